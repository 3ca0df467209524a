"""How long the verifier takes per kernel, end to end, as a user meets it: the latency benchmark.

For a fixed set of kernels (CUDA ``load_inline`` candidates and PyTorch/Triton candidates, each paired with its
KernelBench problem) it measures, on one machine and in one call:

* **build**: each CUDA candidate's extension build step (:mod:`lethe.sandbox.extensions`), in the parallel pool
  ``lethe audit`` uses -- reported apart, as the issue asks (compile excluded from the latency goals);
* **cold**: ``lethe verify REF CAND --json`` in a fresh process with an empty reference cache (the float64
  reference is computed; the extension is already built);
* **warm**: the same command again (the reference comes from the disk cache);
* **served**: the same command with ``--server``, in a fresh client process, against one warm ``lethe serve``
  the step starts for the run on a private socket (:class:`RunServer`): ``served_cold`` with the server's
  reference results dropped first (its disk cache emptied and its in-memory results forgotten),
  ``served_warm`` again. Only answers of that server count: a client that fell back to verifying itself, or
  got no answer, is recorded and left out of the medians. Each kernel's served answers are compared with its
  local cold one (``served_row_equal``, :func:`served_row_equal`);
* **phases**: where a warm verification spends its time (reference, build lookup, the candidate process, its
  load and probes, grading), from ``api.verify_profiles(..., timings=...)`` in this process;
* **batch**: ``lethe audit`` over all the kernels at 1, 4 and 8 workers (extensions prebuilt, reference cache
  empty at the start of each run), wall seconds per kernel;
* **KernelBench**: KernelBench's own check on the same kernels, one fresh process per kernel as its driver runs
  it, with the same prebuilt extension directory as ``build_dir`` (the reference point).

Results go to one JSON file, rewritten after every step, so a run cut short keeps what it measured.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from lethe.kernelbench.real import STAND_IN_NAMES

SCHEMA = "lethe.latency/1"
#: The steps of a run; ``--steps`` picks some and their order.
STEPS = ("build", "cold", "warm", "served", "phases", "kb", "batch")
#: The device every ``lethe verify`` of the benchmark asks for (a module constant so a CPU test can change it).
DEVICE = "cuda"
#: What ``served_row_equal`` compares: the part of the verdict a client receives that must not depend on where
#: it was computed.
ROW_CHECK = ("the `lethe verify --json` document less its wall-clock fields (records.WALL_CLOCK_FIELDS): id, "
             "verdict, status, exit code, isolation, reference device, every gate's status, reason, seed and "
             "evidence; the parquet row's environment and sources fields are not in it")


def _pick(items: list[dict], n: int) -> list[dict]:
    """A deterministic sample: the first n by the SHA-256 of their id."""
    return sorted(items, key=lambda it: hashlib.sha256(it["id"].encode()).hexdigest())[:n]


def cuda_items(lb_dir: str, kb_root: str, n: int, levels=(1, 2)) -> list[dict]:
    from lethe.audit.batch import discover

    items = [it for it in discover(lb_dir, kernelbench=kb_root) if it.get("candidate") and it["level"] in levels]
    return [dict(it, kind="cuda") for it in _pick(items, n)]


def torch_items(kb_root: str, n: int) -> list[dict]:
    from lethe.trusted.corpus import hand_kernels, kb_levels_root
    from lethe.verifier.reference import read_source

    probs = kb_levels_root(kb_root)
    out = []
    for k in hand_kernels():
        ref = probs / k["problem"]
        if ref.is_file():
            out.append({"id": f"hand-{k['name']}", "reference": read_source(ref), "candidate": k["candidate"],
                        "ref_path": str(ref), "cand_path": k["path"],
                        "kind": "triton" if k["triton"] else "pytorch"})
    return _pick(out, n)


def _median(xs: list[float]) -> float | None:
    xs = [x for x in xs if x is not None]
    return round(statistics.median(xs), 3) if xs else None


def _pairs_dir(items: list[dict], root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for it in items:
        d = root / it["id"]
        d.mkdir(exist_ok=True)
        (d / "ref.py").write_text(it["reference"], encoding="utf-8")
        (d / "cand.py").write_text(it["candidate"], encoding="utf-8")
    return root


def _answer_digest(doc: dict) -> str:
    """SHA-256 of a ``lethe verify --json`` document without its wall-clock fields (:data:`ROW_CHECK`)."""
    from lethe.verifier.records import WALL_CLOCK_FIELDS

    view = {k: v for k, v in doc.items() if k not in WALL_CLOCK_FIELDS}
    return hashlib.sha256(json.dumps(view, sort_keys=True).encode()).hexdigest()


def _verify_cmd(it: dict, pairs: Path, reference_device: str, *extra: str) -> list[str]:
    d = pairs / it["id"]
    return [sys.executable, "-m", "lethe.cli", "verify", str(d / "ref.py"), str(d / "cand.py"), "--json",
            *extra, "--device", DEVICE, "--reference-device", reference_device, "--id", it["id"]]


def _verify_process(cmd: list[str], env: dict, timeout_s: float) -> dict[str, Any]:
    """One ``lethe verify --json`` in a fresh process: wall seconds, exit code, the row's status, where the
    reference ran, the answer's digest; ``_stderr`` (the whole stderr, for the caller to read and drop)."""
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        return {"wall_s": None, "rc": None, "status": "timeout", "_stderr": ""}
    wall = time.perf_counter() - t0
    try:
        doc = json.loads(p.stdout)
    except ValueError:
        doc = {}
    doc = doc if isinstance(doc, dict) else {}
    status = (doc.get("row") or doc).get("status")
    # Where the reference ran (and why not on CUDA, when it fell back): part of what the time measures.
    where = {k: doc.get(k) for k in ("reference_device", "reference_fallback")}
    return {"wall_s": round(wall, 3), "rc": p.returncode, "status": status, **where,
            "answer_sha256": _answer_digest(doc) if doc else None,
            "stderr_tail": p.stderr[-300:] if p.returncode not in (0, 1) else "", "_stderr": p.stderr}


def _cli_once(it: dict, pairs: Path, cache: Path, timeout_s: float, reference_device: str = "auto") -> dict[str, Any]:
    env = dict(os.environ, LETHE_REF_CACHE=str(cache))
    env.pop("LETHE_SERVER", None)  # the local path, whatever the caller's environment asks for
    res = _verify_process(_verify_cmd(it, pairs, reference_device), env, timeout_s)
    res.pop("_stderr", None)
    return res


def _served_once(it: dict, pairs: Path, server: "RunServer", timeout_s: float,
                 reference_device: str = "auto") -> dict[str, Any]:
    """``lethe verify --json --server`` in a fresh client process against the run's server, and where its
    answer came from (``via``):

    * ``server``: from the run's server (the only answers the medians count, ``from_server``);
    * ``local fallback``: the client reached no server and verified in its own process (it says so on stderr,
      :data:`lethe.cli.SERVER_FALLBACK`);
    * ``other server``: the run's server is gone and another one answers on its socket (one the client
      started: its time includes that server's start);
    * ``server exited``: a verdict came, but no server answers on the socket after it (not counted: which
      server answered, and in what state, is not known);
    * ``no answer``: no verdict was printed (the server failed, refused or timed out; ``stderr_tail`` says);
    * ``timeout``: the client did not end within the step's budget."""
    from lethe.cli import SERVER_FALLBACK

    env = server.client_env(timeout_s)
    pid = server.pid()  # the caller made sure it is the run's server
    res = _verify_process(_verify_cmd(it, pairs, reference_device, "--server"), env, timeout_s + 30.0)
    stderr = res.pop("_stderr", "")
    res["fallback"] = SERVER_FALLBACK in stderr
    if res["fallback"]:
        res["via"] = "local fallback"
        res["stderr_tail"] = stderr[-300:]
    elif res["status"] == "timeout":
        res["via"] = "timeout"
    elif res["answer_sha256"] is None:
        res["via"] = "no answer"
        res["stderr_tail"] = stderr[-300:]
    else:
        after = server.pid()
        res["via"] = "server exited" if after is None else "server" if after == pid else "other server"
    res["from_server"] = res["via"] == "server"
    res["server_pid"] = pid
    return res


def _term_with_parent() -> None:
    """In the server's child before exec: SIGTERM when the benchmark dies (a run killed by its caller leaves no
    server behind; its idle exit is the bound elsewhere)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - not Linux
        pass


class RunServer:
    """The benchmark's own ``lethe serve``: its socket in a fresh private directory (mode 0700, under /tmp so
    the path stays within AF_UNIX's limit), its own reference cache, started and stopped by the step; no user's
    server is reached or replaced. ``LETHE_SERVER`` of the clients names its socket."""

    def __init__(self, idle_exit_s: float = 180.0, start_timeout_s: float = 300.0):
        self.root = Path(tempfile.mkdtemp(prefix="lethe-lat-srv-", dir="/tmp"))
        self.sock = self.root / "s.sock"
        self.cache = self.root / "refcache"
        self.log = self.root / "serve.log"
        self.idle_exit_s = idle_exit_s
        self.start_timeout_s = start_timeout_s
        self.proc: subprocess.Popen | None = None
        self.starts: list[dict[str, Any]] = []

    def _env(self) -> dict:
        env = {k: v for k, v in os.environ.items() if k not in ("LETHE_SERVER", "LETHE_SERVER_TIMEOUT")}
        env["LETHE_REF_CACHE"] = str(self.cache)
        return env

    def client_env(self, timeout_s: float) -> dict:
        """A client's environment: ``LETHE_SERVER`` is this socket (so ``--server`` goes nowhere else), and the
        client gives up on the server after the step's budget. Its own cache is the server's (a local fallback
        is recorded as one and not counted either way)."""
        return dict(self._env(), LETHE_SERVER=str(self.sock), LETHE_SERVER_TIMEOUT=str(timeout_s))

    def pid(self) -> int | None:
        """The pid of whichever server answers a status request on the socket now, or None."""
        from lethe import server as S

        try:
            return int(S.request(self.sock, {"op": "status"}, response_timeout_s=S.CONNECT_TIMEOUT_S)["pid"])
        except (S.ServerError, KeyError, TypeError, ValueError):
            return None

    def alive(self) -> bool:
        """Whether the server this object started is running and is the one answering on the socket."""
        return self.proc is not None and self.proc.poll() is None and self.pid() == self.proc.pid

    def start(self) -> dict[str, Any]:
        """Start the server and wait until it answers (its zygotes are warm by then): the start's record."""
        from lethe import server as S

        self.stop_server()
        t0 = time.perf_counter()
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "lethe.cli", "serve", "--socket", str(self.sock),
                                          "--idle-exit", str(self.idle_exit_s)], env=self._env(),
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         preexec_fn=_term_with_parent)
        listening = S.wait_listening(self.sock, self.proc, self.start_timeout_s)
        rec = {"pid": self.proc.pid, "wall_s": round(time.perf_counter() - t0, 3),
               "ok": bool(listening) and self.alive()}
        self.starts.append(rec)
        return rec

    def ensure(self, max_failed_starts: int = 2) -> bool:
        """The server runs (started again if it is not, or if another answers on its socket); False once
        ``max_failed_starts`` starts have failed (the step then records the rest as run without a server)."""
        if self.alive():
            return True
        if sum(not r["ok"] for r in self.starts) >= max_failed_starts:
            return False
        return self.start()["ok"]

    def forget(self) -> bool:
        """Drop every reference result the server could reuse: its disk cache (emptied here, between two
        requests) and its in-memory results (the ``forget`` request). True when both were done."""
        from lethe import server as S

        shutil.rmtree(self.cache, ignore_errors=True)
        try:
            S.request(self.sock, {"op": "forget"}, response_timeout_s=60.0)
        except S.ServerError:
            return False
        return not self.cache.exists()

    def stop_server(self) -> None:
        """SIGTERM to the server this object started (SIGKILL if it has not ended in 30 s) and to any other
        server answering on its private socket (one a client started after this one died)."""
        other = self.pid()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        if other is not None and (self.proc is None or other != self.proc.pid):
            try:
                os.kill(other, signal.SIGTERM)
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + 30.0
            while self.sock.exists() and time.monotonic() < deadline:
                time.sleep(0.1)

    def log_tail(self, n: int = 2000) -> str:
        try:
            return self.log.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def close(self) -> None:
        """Stop the server(s) and remove the private directory."""
        try:
            self.stop_server()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def served_row_equal(k: dict[str, Any]) -> bool | None:
    """Whether a kernel's served answers (those from the run's server) equal its local cold answer
    (:data:`ROW_CHECK`); None when the kernel lacks either."""
    local = (k.get("cold") or {}).get("answer_sha256")
    got = [r.get("answer_sha256") for r in (k.get(s) or {} for s in ("served_cold", "served_warm"))
           if r.get("from_server") and r.get("answer_sha256")]
    if not local or not got:
        return None
    return all(g == local for g in got)


def served_counted(step: str, rec: dict[str, Any] | None) -> str | None:
    """Why a served record is left out of the medians, or None when it counts: only answers of the run's
    server with a wall time count, and a served cold one only when the server's reference results were
    dropped before it."""
    if not rec:
        return "not run"
    if not rec.get("from_server"):
        return rec.get("via") or "not from the server"
    if step == "served_cold" and not rec.get("reference_cache_cleared"):
        return "reference cache not cleared"
    if rec.get("wall_s") is None:
        return "no wall time"
    return None


def _kb_one(kb_src: str, ref_path: str, cand_path: str, build_dir: str) -> None:
    """Child mode: KernelBench's own check on one kernel, as its driver runs one sample (fresh process)."""
    t0 = time.perf_counter()
    from lethe.kernelbench.real import install_stand_ins

    install_stand_ins()
    sys.path.insert(0, kb_src)
    import torch
    from src.eval import eval_kernel_against_ref  # KernelBench's code, imported unmodified

    t1 = time.perf_counter()
    ref = Path(ref_path).read_text()
    cand = Path(cand_path).read_text()
    try:
        res = eval_kernel_against_ref(ref, cand, seed_num=42, num_correct_trials=5, measure_performance=False,
                                      verbose=False, build_dir=build_dir or None, device=torch.cuda.current_device())
        out = {"compiled": bool(res.compiled), "correctness": bool(res.correctness)} if res is not None else \
            {"compiled": None, "correctness": None, "retry": True}
    except Exception as exc:  # noqa: BLE001 - the driver's outer catch
        out = {"compiled": False, "correctness": False, "error": f"{type(exc).__name__}: {str(exc)[:200]}"}
    out.update(import_s=round(t1 - t0, 3), check_s=round(time.perf_counter() - t1, 3))
    print("LETHE_KB " + json.dumps(out))


def _kb_check(it: dict, pairs: Path, kb_src: str, build_dir: str, timeout_s: float) -> dict[str, Any]:
    d = pairs / it["id"]
    t0 = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, "-m", "lethe.audit.latency", "--kb-one", kb_src, str(d / "ref.py"),
                            str(d / "cand.py"), build_dir], capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"wall_s": None, "timeout": True}
    line = next((x for x in p.stdout.splitlines()[::-1] if x.startswith("LETHE_KB ")), None)
    res = json.loads(line[len("LETHE_KB "):]) if line else {"error": p.stderr[-300:]}
    res["wall_s"] = round(time.perf_counter() - t0, 3)
    return res


def run(out: str, *, lb_dir: str, kb_root: str, kb_src: str, n_cuda: int = 20, n_torch: int = 20,
        workers: tuple[int, ...] = (1, 4, 8), build_workers: int = 8, timeout_s: float = 600.0,
        n_phases: int | None = None, n_kb: int | None = None,
        steps: tuple[str, ...] = STEPS,
        reference_device: str = "auto") -> dict[str, Any]:
    from lethe.audit import batch
    from lethe.provenance import gpu_info, library_versions
    from lethe.sandbox import extensions

    unknown = [s for s in steps if s not in STEPS]
    if unknown:
        raise ValueError(f"unknown latency step(s) {unknown}; choose from {list(STEPS)}")
    out_path = Path(out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="lethe-latency-"))
    items = cuda_items(lb_dir, kb_root, n_cuda) + torch_items(kb_root, n_torch)
    pairs = _pairs_dir(items, scratch / "pairs")
    doc: dict[str, Any] = {"schema": SCHEMA, "provenance": {"gpu": gpu_info(), "libraries": library_versions(),
                                                           "cpus": os.cpu_count(), "kb_stand_ins": list(STAND_IN_NAMES),
                                                           "started": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                    time.gmtime()),
                                                           "reference_device": reference_device},
                           "kernels": {it["id"]: {"kind": it["kind"]} for it in items}, "batch": {}}

    def save() -> None:
        tmp = out_path.with_name(out_path.name + ".tmp")
        tmp.write_text(json.dumps(doc, indent=1, sort_keys=True))
        os.replace(tmp, out_path)

    def log(msg: str) -> None:
        print(f"[latency {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    cuda = [it for it in items if it["kind"] == "cuda"]
    caches = {it["id"]: scratch / "refcache" / it["id"] for it in items}

    def first(n: int | None) -> list[dict]:
        """The first n of each kind (all when None): the costly steps run on a subset."""
        if n is None:
            return items
        return [it for kind in ("cuda", "pytorch", "triton") for it in [x for x in items if x["kind"] == kind][:n]]

    def step_build() -> None:
        if not cuda:
            return
        work = scratch / "build"
        work.mkdir()
        (work / "spec.json").write_text(json.dumps({"root": str(pairs), "ref": None, "kernelbench": None,
                                                    "problem_base": 1}))
        t0 = time.perf_counter()
        batch.build_extensions(cuda, work, workers=build_workers, progress=False)
        doc["build_pool"] = {"kernels": len(cuda), "workers": build_workers,
                             "wall_s": round(time.perf_counter() - t0, 3)}
        for f in work.glob("builds-*.jsonl"):
            for line in f.read_text().splitlines():
                r = json.loads(line)
                if r["id"] in doc["kernels"]:
                    doc["kernels"][r["id"]]["build"] = {k: r[k] for k in ("ok", "cached", "build_seconds")}
        save()
        log(f"built {len(cuda)} in {doc['build_pool']['wall_s']} s")

    def step_cli(step: str) -> None:
        for it in items:
            doc["kernels"][it["id"]][step] = _cli_once(it, pairs, caches[it["id"]], timeout_s, reference_device)
            save()
        log(f"{step}: median {_median([doc['kernels'][i][step]['wall_s'] for i in doc['kernels']])} s")

    def step_phases() -> None:
        from lethe.verifier import api

        for it in first(n_phases):
            os.environ["LETHE_REF_CACHE"] = str(caches[it["id"]])
            t: dict[str, Any] = {}
            t0 = time.perf_counter()
            try:
                api.verify_profiles(it["reference"], it["candidate"], profiles=["strict"], device="cuda",
                                    timings=t, kernel_id=it["id"], reference_device=reference_device)
            except Exception as exc:  # noqa: BLE001 - a measurement, not a verdict
                t["error"] = str(exc)[:200]
            t["in_process_s"] = round(time.perf_counter() - t0, 3)
            t.pop("candidate_stderr_tail", None)
            doc["kernels"][it["id"]]["phases"] = t
            save()
        os.environ.pop("LETHE_REF_CACHE", None)
        log("phases done")

    def step_kb() -> None:
        store = extensions.store_root(None, extensions.arch_list("cuda"))
        for it in [x for x in first(n_kb) if x["kind"] == "cuda"]:
            bdir = str(extensions.ext_root(store, it["candidate"])) if it["kind"] == "cuda" else ""
            doc["kernels"][it["id"]]["kernelbench"] = _kb_check(it, pairs, kb_src, bdir, timeout_s)
            save()
        log("kernelbench done")

    def step_served() -> None:
        server = RunServer()
        info: dict[str, Any] = {"row_check": ROW_CHECK, "starts": server.starts, "socket": "a fresh private "
                                "directory under /tmp (mode 0700), its own reference cache"}
        doc["served"] = info
        try:
            for it in items:
                k = doc["kernels"][it["id"]]
                for step in ("served_cold", "served_warm"):
                    if not server.ensure():
                        k[step] = {"wall_s": None, "rc": None, "status": None, "via": "no server",
                                   "from_server": False, "fallback": False}
                        continue
                    cleared = server.forget() if step == "served_cold" else None
                    k[step] = _served_once(it, pairs, server, timeout_s, reference_device)
                    if cleared is not None:
                        k[step]["reference_cache_cleared"] = cleared
                    if k[step]["via"] in ("timeout", "no answer", "other server"):
                        server.start()  # the next kernel meets a server that is not busy with this one
                    save()
                k["served_row_equal"] = served_row_equal(k)
                save()
        finally:
            server.close()
            info["log_tail"] = server.log_tail()
            save()
        counted = [i for i in doc["kernels"] if served_counted("served_warm", doc["kernels"][i].get("served_warm"))
                   is None]
        log(f"served: {len(counted)} of {len(items)} warm answers from the server, median "
            f"{_median([doc['kernels'][i]['served_warm']['wall_s'] for i in counted])} s")

    def step_batch() -> None:
        for w in workers:
            cache = scratch / f"batch-cache-{w}"
            env = dict(os.environ, LETHE_REF_CACHE=str(cache))
            t0 = time.perf_counter()
            p = subprocess.run([sys.executable, "-m", "lethe.cli", "audit", str(pairs), "--out",
                                str(scratch / f"batch-{w}"), "--workers", str(w), "--build-workers", "0",
                                "--device", "cuda", "--reference-device", reference_device, "--quiet"],
                               capture_output=True, text=True, env=env,
                               timeout=max(timeout_s, 60.0 * len(items) / w))
            wall = time.perf_counter() - t0
            doc["batch"][str(w)] = {"wall_s": round(wall, 3), "kernels": len(items), "rc": p.returncode,
                                    "per_kernel_s": round(wall / len(items), 3), "stdout": p.stdout[-300:]}
            save()
            log(f"batch {w} workers: {wall / len(items):.2f} s/kernel")

    runners = {"build": step_build, "cold": lambda: step_cli("cold"), "warm": lambda: step_cli("warm"),
               "served": step_served, "phases": step_phases, "kb": step_kb, "batch": step_batch}
    # In the order asked: a device call with little time left runs the step it needs first. The status is
    # saved before each step, so a run its caller cuts short says which step it was in and what it finished.
    for i, step in enumerate(steps):
        doc["status"] = f"partial: ended during the {step} step ({i} of {len(steps)} steps finished: " \
                        f"{', '.join(steps[:i]) or 'none'})"
        save()
        runners[step]()
    doc["status"] = "complete"
    for k in doc["kernels"].values():  # the served step may have run before the cold one
        if "served_cold" in k or "served_warm" in k:
            k["served_row_equal"] = served_row_equal(k)
    doc["summary"] = summarise(doc)
    save()
    shutil.rmtree(scratch, ignore_errors=True)
    return doc


def summarise(doc: dict[str, Any]) -> dict[str, Any]:
    """Medians per kernel kind (cuda / pytorch / triton), each with the number of kernels it is over (``*_n``),
    and phase shares of the warm in-process run. The served medians count only answers of the run's server
    (:func:`served_counted`); what was left out is counted by reason in ``served_*_excluded``, and
    ``served_row_equal`` says for how many kernels the served answers were compared with the local cold one
    and how many were equal."""
    out: dict[str, Any] = {}
    kinds = sorted({k["kind"] for k in doc["kernels"].values()})
    for kind in kinds:
        ks = [k for k in doc["kernels"].values() if k["kind"] == kind]
        row: dict[str, Any] = {"n": len(ks)}
        for step in ("cold", "warm"):
            walls = [w for w in ((k.get(step) or {}).get("wall_s") for k in ks) if w is not None]
            row[f"{step}_median_s"] = _median(walls)
            row[f"{step}_n"] = len(walls)
        for step in ("served_cold", "served_warm"):
            walls, excluded = [], {}
            for k in ks:
                why = served_counted(step, k.get(step))
                if why is None:
                    walls.append(k[step]["wall_s"])
                elif why != "not run":
                    excluded[why] = excluded.get(why, 0) + 1
            row[f"{step}_median_s"] = _median(walls)
            row[f"{step}_n"] = len(walls)
            row[f"{step}_excluded"] = dict(sorted(excluded.items()))
        eq = [k.get("served_row_equal") for k in ks if k.get("served_row_equal") is not None]
        row["served_row_equal"] = {"compared": len(eq), "equal": sum(1 for e in eq if e)}
        # A cached build still records how long the build step took when it ran (the store's marker).
        row["build_median_s"] = _median([(k.get("build") or {}).get("build_seconds") for k in ks])
        row["kb_wall_median_s"] = _median([(k.get("kernelbench") or {}).get("wall_s") for k in ks])
        row["kb_check_median_s"] = _median([(k.get("kernelbench") or {}).get("check_s") for k in ks])
        phases = [k.get("phases") or {} for k in ks]
        total = sum(p.get("in_process_s", 0.0) for p in phases) or None
        if total:
            row["phase_share"] = {name: round(sum(p.get(name, 0.0) or 0.0 for p in phases) / total, 3)
                                  for name in ("reference_s", "build_s", "candidate_s", "candidate_load_s",
                                               "candidate_probes_s", "grade_s")}
        out[kind] = row
    return out


#: The goals of the tool issue (seconds per kernel): CUDA cold / warm end to end, batch at 8 workers.
GOALS = {"cold": 5.0, "warm": 2.0, "batch8": 0.5}
#: The timed columns whose cells say over how many kernels they are when that is fewer than the kind's n.
_COUNTED = ("cold", "warm", "served_cold", "served_warm")


def _summary(doc: dict[str, Any]) -> dict[str, Any]:
    """The summary of the per-kernel records, computed afresh (a stored summary may predate the counts and the
    served columns; the records are the source of it); the stored one when there are no records."""
    return summarise(doc) if doc.get("kernels") else (doc.get("summary") or {})


def table_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per kernel kind: medians of cold, warm, served cold and warm, build, KernelBench's check, and the
    phase shares; ``<column>_n`` is the number of kernels a timed median is over."""
    out = []
    summary = _summary(doc)
    for kind, row in sorted(summary.items()):
        share = row.get("phase_share") or {}
        r = {"kind": kind, "n": row["n"], "cold": row.get("cold_median_s"), "warm": row.get("warm_median_s"),
             "served_cold": row.get("served_cold_median_s"), "served_warm": row.get("served_warm_median_s"),
             "build": row.get("build_median_s"), "kb_wall": row.get("kb_wall_median_s"),
             "kb_check": row.get("kb_check_median_s"),
             "ref": share.get("reference_s"), "cand": share.get("candidate_s"),
             "probes": share.get("candidate_probes_s"), "grade": share.get("grade_s")}
        for c in _COUNTED:
            r[f"{c}_n"] = row.get(f"{c}_n", 0)
        out.append(r)
    return out


def _served_notes(doc: dict[str, Any], summary: dict[str, Any]) -> list[str]:
    """What the served columns are, what was left out of them and the answers' comparison, in words."""
    if not any(r.get("served_cold_n") or r.get("served_warm_n") or r.get("served_cold_excluded")
               or r.get("served_warm_excluded") for r in summary.values()):
        return []
    notes = ["served cold: `lethe verify --json --server` in a fresh client process against one warm `lethe "
             "serve` of the run (private socket), the server's reference results (disk and memory) dropped "
             "first; served warm: the same command again. Only answers of that server count."]
    left = []
    for kind, r in sorted(summary.items()):
        for step in ("served_cold", "served_warm"):
            for why, n in (r.get(f"{step}_excluded") or {}).items():
                left.append(f"{kind} {step.replace('_', ' ')}: {n} {why}")
    notes.append("Left out of the served medians: " + ("; ".join(left) if left else "none") + ".")
    eq = [(kind, r.get("served_row_equal") or {}) for kind, r in sorted(summary.items())]
    compared = sum(e.get("compared", 0) for _, e in eq)
    equal = sum(e.get("equal", 0) for _, e in eq)
    notes.append(f"Served answers equal to the local cold one ({ROW_CHECK}): {equal} of {compared} kernels "
                 f"compared" + ("" if equal == compared else " (" + ", ".join(
                     f"{kind}: {e.get('equal', 0)}/{e.get('compared', 0)}" for kind, e in eq
                     if e.get("equal", 0) != e.get("compared", 0)) + ")") + ".")
    starts = [s for s in ((doc.get("served") or {}).get("starts") or []) if s.get("ok")]
    if starts:
        notes.append(f"Server start (zygotes warm, paid once): {starts[0]['wall_s']:.1f} s"
                     + (f"; {len(starts) - 1} restart(s)" if len(starts) > 1 else "") + ".")
    return notes


def render(doc: dict[str, Any], md: str, tex: str) -> None:
    """The latency table (``paper/tables/tool_latency``) from a committed latency.json."""
    from lethe.render.tables import Column, render_table

    sec = lambda v: "–" if v is None else f"{v:.2f}"  # noqa: E731
    pct = lambda v: "–" if v is None else f"{v:.0%}"  # noqa: E731
    prov = doc.get("provenance", {})
    gpu = (prov.get("gpu") or {}).get("gpu", "unknown device")
    batch = doc.get("batch") or {}
    summary = _summary(doc)
    rows = table_rows(doc)
    for r in rows:
        for c in _COUNTED:
            # A median over fewer kernels than the kind has says so in its cell.
            r[c] = sec(r[c]) + (f" (n={r[f'{c}_n']})" if r[c] is not None and r[f"{c}_n"] < r["n"] else "")
    notes = [f"Device: {gpu}; {prov.get('cpus', '?')} CPU cores. Medians over the kernels of each kind; a cell "
             f"marked (n=k) is over the k kernels that have that measurement.",
             "cold: `lethe verify --json` in a fresh process, empty reference cache, extension already built; "
             "warm: the same command again (reference from the disk cache); build: the extension build step alone; "
             "KernelBench: its own check in a fresh process (wall) and the check call itself.",
             "Phase shares: of a warm in-process verification (reference, candidate process, its probes, grading).",
             f"Goals (tool issue): CUDA cold <= {GOALS['cold']:g} s, warm <= {GOALS['warm']:g} s; batch <= "
             f"{GOALS['batch8']:g} s per kernel at 8 workers."]
    notes[2:2] = _served_notes(doc, summary)
    if doc.get("status") and doc["status"] != "complete":
        notes.insert(0, f"Status: {doc['status']}")
    for w, b in sorted(batch.items(), key=lambda kv: int(kv[0])):
        notes.append(f"batch ({b['kernels']} kernels, {w} workers, reference cache empty, builds done"
                     f"{'; ' + b['source'] if b.get('source') else ''}): {b['per_kernel_s']:.2f} s per kernel")
    timed = lambda key, header: Column(key, header, align="r")  # noqa: E731 - preformatted above
    render_table(rows, [("kind", "candidates"), ("n", "n"), timed("cold", "cold s"), timed("warm", "warm s"),
                        timed("served_cold", "served cold s"), timed("served_warm", "served warm s"),
                        ("build", "build s", sec), ("kb_wall", "KernelBench s", sec), ("kb_check", "its check s", sec),
                        ("ref", "reference", pct), ("cand", "candidate", pct), ("probes", "probes", pct),
                        ("grade", "grading", pct)],
                 "Seconds per kernel of lethe verify, cold, warm and through a warm server, against KernelBench's "
                 "own check", "tab:tool-latency", md, tex, notes=notes)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "--kb-one":
        _kb_one(*argv[1:5])
        return 0
    ap = argparse.ArgumentParser(prog="python -m lethe.audit.latency", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="the JSON file to write")
    ap.add_argument("--lb-dir", required=True, help="a KernelBench run layout of CUDA candidates")
    ap.add_argument("--kb-root", required=True, help="KernelBench problems (checkout root or KernelBench/)")
    ap.add_argument("--kb-src", required=True, help="the KernelBench checkout root holding src/eval.py")
    ap.add_argument("--n-cuda", type=int, default=20)
    ap.add_argument("--n-torch", type=int, default=20)
    ap.add_argument("--workers", default="1,4,8")
    ap.add_argument("--build-workers", type=int, default=8)
    ap.add_argument("--steps", default=",".join(STEPS),
                    help="comma-separated, run in the order given (default: %(default)s)")
    ap.add_argument("--n-phases", type=int, default=None, help="phase split on the first N of each kind")
    ap.add_argument("--n-kb", type=int, default=None, help="KernelBench's check on the first N CUDA kernels")
    ap.add_argument("--reference-device", default="auto", choices=["auto", "cpu", "cuda"],
                    help="where the float64 references run (lethe verify --reference-device); recorded in the JSON")
    a = ap.parse_args(argv)
    run(a.out, lb_dir=a.lb_dir, kb_root=a.kb_root, kb_src=a.kb_src, n_cuda=a.n_cuda, n_torch=a.n_torch,
        workers=tuple(int(w) for w in a.workers.split(",") if w), build_workers=a.build_workers,
        steps=tuple(a.steps.split(",")), n_phases=a.n_phases, n_kb=a.n_kb, reference_device=a.reference_device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
