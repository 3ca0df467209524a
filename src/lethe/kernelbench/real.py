"""KernelBench's own check, run unmodified from a pinned copy, over a KernelBench run folder -- and our replica.

``python -m lethe.kernelbench.real judge RUN_DIR --checkout KB --out OUT [--impl real|replica-paper|replica-hardened]``
judges every ``RUN_DIR/level_<L>_problem_<P>_sample_<S>_kernel.py`` (paired with its problem file by
:func:`lethe.audit.batch.discover`) and writes one row per kernel. ``--impl real`` (the default) imports
``eval_kernel_against_ref`` from the checkout's ``src/eval.py`` and calls it with the benchmark scripts' settings
(5 correctness trials, seed 42, ``measure_performance=False``, one build directory per sample) inside the driver's
outer catch (``eval_from_generations.evaluate_single_sample``: whatever escapes becomes ``compiled=False``,
``cuda_error`` or ``other_error``). ``--impl replica-paper`` / ``replica-hardened`` runs
:func:`lethe.kernelbench.check.evaluate_single_sample` on the same kernels through the same pool, so the rows of
the three implementations have one schema and differ only in the judge.

``python -m lethe.kernelbench.real agree --theirs OUT_real --ours OUT_replica --out agreement.json`` joins two such
runs with :func:`lethe.kernelbench.agreement.agreement` and files every disagreement under one class of
:data:`DISAGREEMENT_CLASSES` (:func:`classify_disagreement`).

Throughput. Importing torch and KernelBench and creating a CUDA context costs seconds; judging a kernel usually
costs less. Kernels are therefore judged by a pool of long-lived ``spawn`` worker processes, each importing the
judge once. What a fresh process per sample (KernelBench's own pool) gives for free, each worker restores before
every kernel: the environment and working directory, and torch's in-process ``load_inline`` version table (without
that reset, the second extension of a given name in one process is built as ``<name>_v1`` and a prebuilt directory
is never reused). A worker is replaced after its row when the row reports a CUDA error that leaves the context
unusable, when a CUDA probe fails, when the kernel rebound a torch function (the next kernel would run against the
patched torch), after ``--kernels-per-worker`` kernels, and when it is killed at the per-kernel timeout (180 s,
KernelBench's). ``--kernels-per-worker 1`` is a fresh process per kernel.

Resumable: rows are appended to ``OUT/work/checkpoint.jsonl`` and fsynced one by one; a run killed at any point
(SIGKILL included; workers die with the parent) and started again judges exactly the kernels without a row for
the same sources. Outputs: ``OUT/rows.jsonl`` (verdict fields only, sorted by id: the same kernels, seed and
environment give the same bytes), ``OUT/timing.jsonl`` (wall seconds, whether a build happened, worker),
``OUT/summary.json`` and ``OUT/provenance.json`` (KernelBench commit and file hashes, the stand-in modules, torch,
CUDA, driver and GPU).
"""

from __future__ import annotations

import argparse
import ast
import ctypes
import fcntl
import hashlib
import json
import os
import signal
import sys
import time
import types
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

IMPLS = ("real", "replica-paper", "replica-hardened")
#: The variant of :mod:`lethe.kernelbench.check` each implementation corresponds to.
IMPL_VARIANT = {"real": "paper", "replica-paper": "paper", "replica-hardened": "hardened"}
#: atol = rtol each implementation applies to fp32 outputs (KernelBench@48642c5c: 1e-2).
IMPL_TOL = {"real": 1e-2, "replica-paper": 1e-2, "replica-hardened": 1e-4}

#: Modules ``src/utils.py`` imports at module level for the generation path only; absent ones get a stand-in.
STAND_IN_NAMES = ("together", "openai", "google.generativeai", "anthropic")
#: The benchmark scripts' settings (``eval_from_generations.EvalConfig``), not the function defaults.
NUM_CORRECT_TRIALS = 5
SEED = 42
TIMEOUT_S = 180.0
#: Each metadata value and the detail are cut to this many characters (compiler logs can be megabytes).
META_CHARS = 300
#: Texts of CUDA errors after which a context is not trusted for another kernel.
STICKY_CUDA = ("CUDA error", "illegal memory access", "device-side assert", "unspecified launch failure",
               "misaligned address", "an illegal instruction", "CUBLAS_STATUS_EXECUTION_FAILED")

ROW_FIELDS = ("id", "impl", "variant", "tolerance", "level", "problem", "sample", "outcome", "compiled",
              "correctness", "correct", "dropped", "trials_passed", "n_trials", "max_difference", "detail",
              "metadata", "worker_event", "cand_rebinds", "ref_sha256", "cand_sha256")
TIMING_FIELDS = ("id", "wall_s", "built", "worker", "worker_kernel_no")


class SetupError(RuntimeError):
    """The judge cannot start (checkout, imports, CUDA); the message says what to fix."""


# ------------------------------------------------------------------------------------------ pure helpers


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def kernelbench_fingerprint(checkout: str | os.PathLike[str]) -> dict[str, Any]:
    """Commit (``COMMIT`` file of a hand-supplied copy, else ``git rev-parse``) and SHA-256 of every ``src/*.py``."""
    root = Path(checkout).resolve()
    commit = None
    if (root / "COMMIT").is_file():
        commit = (root / "COMMIT").read_text().strip()
    elif (root / ".git").exists():
        import subprocess

        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                             check=False)
        commit = out.stdout.strip() or None
    files = {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
             for p in sorted((root / "src").rglob("*.py"))}
    return {"checkout": str(root), "commit": commit, "file_sha256": files}


def top_level_names(src: str) -> set[str]:
    """Names a module binds at its top level (assignments, defs, classes, imports); empty on a syntax error."""
    try:
        tree = ast.parse(src)
    except (SyntaxError, ValueError):
        return set()
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for sub in ast.walk(t):
                    if isinstance(sub, ast.Name):
                        names.add(sub.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                names.add((a.asname or a.name).split(".")[0])
    return names


def rebound_reference_names(ref_src: str, cand_src: str) -> list[str]:
    """Reference top-level names (other than imports) that the candidate binds again at its top level.

    Reference and candidate share one globals dict in KernelBench, so such a name changes what the reference's
    ``get_inputs``/``Model`` see; a disagreement on such a kernel may come from that namespace semantics.
    """
    try:
        imported = {(a.asname or a.name).split(".")[0] for n in ast.parse(ref_src).body
                    if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
    except (SyntaxError, ValueError):
        imported = set()
    shared = (top_level_names(ref_src) - imported) & top_level_names(cand_src)
    return sorted(shared - {"Model", "ModelNew"})


def _cut(text: str, n: int = META_CHARS) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."


def trim_metadata(md: Mapping[str, Any] | None, n: int = META_CHARS) -> dict[str, Any]:
    """KernelBench's metadata with every value a string (exceptions stringified, as KernelBench does on save),
    lists kept as lists of strings, each string cut to ``n`` characters."""
    out: dict[str, Any] = {}
    for k, v in (md or {}).items():
        if isinstance(v, (list, tuple)):
            out[str(k)] = [_cut(str(x), n) for x in v]
        else:
            out[str(k)] = _cut(str(v), n)
    return dict(sorted(out.items()))


def is_sticky_cuda(row: Mapping[str, Any]) -> bool:
    """True when the row's error texts name a CUDA error after which the context may be unusable."""
    texts = [str(row.get("detail", ""))] + [str(v) for v in (row.get("metadata") or {}).values()]
    return any(s in t for t in texts for s in STICKY_CUDA)


def make_row(result: Any, item: Mapping[str, Any], impl: str, *, outcome: str | None = None,
             worker_event: str | None = None, detail: str | None = None) -> dict[str, Any]:
    """One row in the schema shared by every implementation (:data:`ROW_FIELDS`).

    ``result`` is a KernelBench ``KernelExecResult`` (pydantic there, a dataclass in the replica) or ``None``
    (the retry drop). ``correctness`` is KernelBench's own field; ``correct`` is ``None`` when KernelBench's
    driver would not record the sample (retry drop, timeout), as :func:`lethe.kernelbench.check.to_row` does.
    """
    from lethe.kernelbench import check as kb

    # to_row reads a verdict off ``result``; with none, any outcome is recorded the way a dropped sample is.
    no_verdict = result is None and outcome not in (None, "dropped_retry", "timeout")
    base = kb.to_row(result, IMPL_VARIANT[impl], NUM_CORRECT_TRIALS, outcome="timeout" if no_verdict else outcome)
    if no_verdict:
        base["outcome"] = outcome
    md = trim_metadata(getattr(result, "metadata", None)) if result is not None else {}
    row = {
        "id": item["id"], "impl": impl, "variant": IMPL_VARIANT[impl], "tolerance": IMPL_TOL[impl],
        "level": item.get("level"), "problem": item.get("problem"), "sample": item.get("sample"),
        "outcome": base["outcome"], "compiled": base["compiled"],
        "correctness": None if result is None else bool(getattr(result, "correctness", False)),
        "correct": base["correct"], "dropped": base["dropped"], "trials_passed": base["trials_passed"],
        "n_trials": NUM_CORRECT_TRIALS, "max_difference": base["max_difference"],
        "detail": _cut(str(detail if detail is not None else base["detail"])), "metadata": md,
        "worker_event": worker_event,
        "cand_rebinds": rebound_reference_names(item.get("reference", ""), item.get("candidate", "")),
        "ref_sha256": sha256_text(item.get("reference", "")), "cand_sha256": sha256_text(item.get("candidate", "")),
    }
    return row


def event_row(item: Mapping[str, Any], impl: str, event: str, detail: str) -> dict[str, Any]:
    """The row of a kernel whose judge gave no answer.

    ``timeout``: KernelBench's driver writes nothing for a sample past its 180 s, so the row is dropped
    (``correct=None``). A worker that died or whose kernel escaped every catch (``died``/``escaped``) is
    ``other_error``, ``compiled=False``, as :func:`lethe.kernelbench.check.check_isolated` records a dead child.
    ``not_run``: the kernel has no problem file, nothing was judged.
    """
    from lethe.kernelbench import check as kb

    if event == "timeout":
        return make_row(None, item, impl, outcome="timeout", worker_event=event, detail=detail)
    if event == "not_run":
        return make_row(None, item, impl, outcome="not_run", worker_event=event, detail=detail)
    res = kb.KernelExecResult(compiled=False, correctness=False, metadata={"other_error": detail})
    return make_row(res, item, impl, worker_event=event)


def timing_row(item_id: str, wall_s: float | None, built: bool | None, worker: int | None,
               worker_kernel_no: int | None) -> dict[str, Any]:
    return {"id": item_id, "wall_s": None if wall_s is None else round(wall_s, 3), "built": built,
            "worker": worker, "worker_kernel_no": worker_kernel_no}


def id_key(s: str) -> tuple:
    """Natural order of ids (``level_1_problem_2`` before ``level_1_problem_10``)."""
    import re

    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", str(s)))


# ------------------------------------------------------------------------------------------ checkpoint


def read_jsonl(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Objects of a JSONL file in order. A torn last line (the writer was killed mid-write) is cut off the file
    so the next append starts on a fresh line; other undecodable lines are skipped."""
    path = Path(path)
    if not path.exists():
        return []
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    if end != len(data):
        with open(path, "r+b") as fh:
            fh.truncate(end)
            fh.flush()
            os.fsync(fh.fileno())
        data = data[:end]
    out = []
    for line in data.split(b"\n"):
        line = line.strip(b"\0 \t\r")
        if not line:
            continue
        try:
            obj = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue
        if isinstance(obj, dict) and "row" in obj and "id" in obj.get("row", {}):
            out.append(obj)
    return out


def append_fsync(fh, obj: Mapping[str, Any]) -> None:
    fh.write(json.dumps(obj, sort_keys=True) + "\n")
    fh.flush()
    os.fsync(fh.fileno())


def done_ids(entries: Iterable[Mapping[str, Any]], items: Mapping[str, Mapping[str, Any]], impl: str) -> set[str]:
    """Ids whose latest checkpoint row was judged by ``impl`` on the current sources (others are redone)."""
    latest = {}
    for e in entries:
        latest[e["row"]["id"]] = e["row"]
    out = set()
    for i, r in latest.items():
        it = items.get(i)
        if it is None or r.get("impl") != impl:
            continue
        if r.get("ref_sha256") == sha256_text(it.get("reference", "")) and \
                r.get("cand_sha256") == sha256_text(it.get("candidate", "")):
            out.add(i)
    return out


# ------------------------------------------------------------------------------------------ worker side


def _pdeathsig() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)
    except Exception:  # noqa: BLE001 - not Linux: a killed parent may leave a worker finishing its kernel
        pass


class _StandIn(types.ModuleType):
    """A module that only exists so ``src/utils.py`` imports; any use of it raises."""

    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        name = self.__name__

        class _Unavailable:
            def __init__(self, *a, **k):
                raise RuntimeError(f"{name}.{attr} is a stand-in (lethe.kernelbench.real): the generation path "
                                   f"of KernelBench is not available here")

        _Unavailable.__name__ = attr
        return _Unavailable


def install_stand_ins(names: Sequence[str] = STAND_IN_NAMES) -> list[str]:
    """Put a stand-in in ``sys.modules`` for each of ``names`` that cannot be imported; returns those installed.

    A dotted name's missing parent package (``google`` for ``google.generativeai``) is created as a stand-in
    package too and listed.
    """
    import importlib
    import importlib.util

    installed: list[str] = []
    for name in names:
        if name in sys.modules:
            continue
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if found:
            continue
        parts = name.split(".")
        for depth in range(1, len(parts) + 1):
            sub = ".".join(parts[:depth])
            if sub in sys.modules:
                continue
            try:
                exists = depth < len(parts) and importlib.util.find_spec(sub) is not None
            except (ImportError, ValueError):
                exists = False
            if exists:
                importlib.import_module(sub)
                continue
            mod = _StandIn(sub)
            mod.__path__ = []  # a package, so a dotted child can hang under it
            sys.modules[sub] = mod
            if depth > 1:
                setattr(sys.modules[".".join(parts[: depth - 1])], parts[depth - 1], mod)
            installed.append(sub)
    return installed


_TAINT_TARGETS = ("torch", "torch.nn.functional", "torch.cuda", "torch.Tensor", "torch.nn.Module",
                  "torch.utils.cpp_extension")


def _taint_snapshot() -> dict[tuple[str, str], int]:
    """Identity of every callable in the torch namespaces a check relies on (``vars``: no lazy imports fire)."""
    if "torch" not in sys.modules:
        return {}
    import torch

    objs = {"torch": torch, "torch.nn.functional": torch.nn.functional, "torch.cuda": torch.cuda,
            "torch.Tensor": torch.Tensor, "torch.nn.Module": torch.nn.Module,
            "torch.utils.cpp_extension": sys.modules.get("torch.utils.cpp_extension")}
    snap = {}
    for name in _TAINT_TARGETS:
        obj = objs.get(name)
        if obj is None:
            continue
        for k, v in list(vars(obj).items()):
            if callable(v):
                snap[(name, k)] = id(v)
    return snap


def _tainted(before: Mapping[tuple[str, str], int]) -> list[str]:
    after = _taint_snapshot()
    return sorted(f"{m}.{k}" for (m, k), i in before.items() if (m, k) in after and after[(m, k)] != i)


def _reset_extension_versions() -> None:
    """Forget earlier ``load_inline`` builds of this process, so a kernel's extension keeps its own name."""
    ext = sys.modules.get("torch.utils.cpp_extension")
    versioner = getattr(ext, "JIT_EXTENSION_VERSIONER", None)
    entries = getattr(versioner, "entries", None)
    if isinstance(entries, dict):
        entries.clear()


def _cuda_healthy() -> bool:
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return True
    try:
        torch.cuda.synchronize()
        return float(torch.ones(1, device="cuda").add_(1).item()) == 2.0
    except Exception:  # noqa: BLE001 - any failure means the context is not usable
        return False


def so_state(directory: str | os.PathLike[str] | None) -> dict[str, int]:
    """``{path: mtime_ns}`` of the shared objects under a build directory."""
    if not directory or not os.path.isdir(directory):
        return {}
    out = {}
    for dirpath, _dirs, files in os.walk(directory):
        for f in files:
            if f.endswith(".so"):
                p = os.path.join(dirpath, f)
                try:
                    out[p] = os.stat(p).st_mtime_ns
                except OSError:
                    pass
    return out


def clear_stale_locks(directory: str | os.PathLike[str] | None) -> list[str]:
    """Remove ``load_inline``'s ``<ext>/lock`` files left under a kernel's build directory by a killed run.

    Only the one worker judging a kernel ever builds in its directory, and the run lock excludes a second
    command, so a lock found here belongs to a dead process; left alone, ``load_inline`` would wait on it
    until the timeout.
    """
    removed = []
    if not directory or not os.path.isdir(directory):
        return removed
    for dirpath, _dirs, files in os.walk(directory):
        if "lock" in files:
            p = os.path.join(dirpath, "lock")
            try:
                os.remove(p)
                removed.append(p)
            except OSError:
                pass
    return removed


def build_happened(before: Mapping[str, int], after: Mapping[str, int]) -> bool | None:
    """True: a shared object appeared or was rewritten; False: one was there and none changed; None: none."""
    if not after:
        return None
    return any(before.get(p) != t for p, t in after.items())


def _worker_setup(spec: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
    """Import the judge once; returns (judge function, facts for the provenance)."""
    for p in reversed(spec.get("extra_paths") or []):
        if p not in sys.path:
            sys.path.insert(0, p)
    info: dict[str, Any] = {"stand_ins": []}
    if spec["impl"] == "real":
        if spec.get("stand_ins", True):
            info["stand_ins"] = install_stand_ins(STAND_IN_NAMES)
        from lethe.kernelbench import agreement as ag

        try:
            fn = ag.load_eval(spec["checkout"])
        except ag.AgreementSetupError as e:
            raise SetupError(str(e)) from e
        mod = sys.modules.get(fn.__module__)
        info["eval_module"] = getattr(mod, "__file__", None)
    else:
        from lethe.kernelbench import check as kb

        fn = kb.evaluate_single_sample
        info["eval_module"] = kb.__file__
    import torch

    from lethe import provenance

    info.update(provenance.gpu_info())
    info.update(provenance.library_versions())
    for name in ("pydantic", "pydantic_core"):
        mod = sys.modules.get(name)
        info[name] = getattr(mod, "__version__", None) if mod else None
    info["torch_cuda"] = torch.version.cuda
    info["build_env"] = {k: os.environ.get(k) for k in BUILD_ENV}
    info["nvcc"] = _nvcc_version()
    info["cuda_available"] = bool(torch.cuda.is_available())
    from lethe.kernelbench import check as kb

    info["trial_seeds"] = kb.trial_seeds(SEED, NUM_CORRECT_TRIALS)
    return fn, info


#: Environment that decides how load_inline builds (and so whether a prebuilt directory is up to date).
BUILD_ENV = ("TORCH_CUDA_ARCH_LIST", "CUDA_HOME", "CXX", "CC", "MAX_JOBS", "CUDA_VISIBLE_DEVICES")


def _nvcc_version() -> str | None:
    """Last line of ``nvcc --version`` of the toolkit load_inline uses, or None without one."""
    import subprocess

    try:
        from torch.utils.cpp_extension import CUDA_HOME
    except Exception:  # noqa: BLE001 - a torch without the extension module
        return None
    if not CUDA_HOME:
        return None
    try:
        out = subprocess.run([os.path.join(CUDA_HOME, "bin", "nvcc"), "--version"], capture_output=True, text=True,
                             timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [x for x in out.stdout.splitlines() if x.strip()]
    return lines[-1] if lines else None


def _device(spec: Mapping[str, Any]) -> Any:
    if spec.get("device", "cuda") == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise SetupError("KernelBench's check asserts CUDA; this worker sees no CUDA device "
                             "(run on the GPU machine, or --device cpu for the replica only)")
        return torch.cuda.current_device()
    return spec["device"]


def judge_one(fn: Any, impl: str, item: Mapping[str, Any], build_dir: str | None, device: Any) -> dict[str, Any]:
    """One kernel through the configured judge, inside the driver's outer catch; returns the row."""
    from lethe.kernelbench import check as kb

    ref, cand = item["reference"], item["candidate"]
    if impl == "real":
        try:
            res = fn(ref, cand, seed_num=SEED, num_correct_trials=NUM_CORRECT_TRIALS, measure_performance=False,
                     verbose=False, build_dir=build_dir, device=device)
        except Exception as e:  # noqa: BLE001 - the outer catch of eval_from_generations.evaluate_single_sample
            key, text = ("cuda_error", f"CUDA Error: {e}") if "CUDA error" in str(e) else ("other_error",
                                                                                        f"error: {e}")
            res = kb.KernelExecResult(compiled=False, correctness=False,
                                      metadata={key: text, "hardware": kb._hardware(device), "device": str(device)})
    else:
        res = fn(ref, cand, seed_num=SEED, num_correct_trials=NUM_CORRECT_TRIALS, build_dir=build_dir,
                 device=device, variant=IMPL_VARIANT[impl])
    return make_row(res, item, impl)


def _worker_main(conn, spec: dict[str, Any]) -> None:
    """A worker: import the judge once, then judge kernels sent over ``conn`` until told to stop."""
    _pdeathsig()
    if os.getppid() != spec["parent_pid"]:
        os._exit(0)
    log = os.open(spec["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.makedirs(spec["scratch"], exist_ok=True)
    os.chdir(spec["scratch"])
    try:
        fn, info = _worker_setup(spec)
        device = _device(spec)
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which stops the run
        conn.send({"type": "setup_error", "error": f"{type(e).__name__}: {e}"})
        return
    info["pid"] = os.getpid()
    conn.send({"type": "ready", "info": info})
    env0, cwd0 = dict(os.environ), os.getcwd()
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg.get("type") != "job":
            return
        item, build_dir = msg["item"], msg.get("build_dir")
        os.environ.clear()
        os.environ.update(env0)
        os.chdir(cwd0)
        _reset_extension_versions()
        if msg.get("clear_locks"):
            clear_stale_locks(build_dir)
        snap = _taint_snapshot()
        before = so_state(build_dir)
        t0 = time.monotonic()
        retire = None
        try:
            row = judge_one(fn, spec["impl"], item, build_dir, device)
        except BaseException as e:  # noqa: BLE001 - e.g. SystemExit from a candidate: no driver catch holds it
            row = event_row(item, spec["impl"], "escaped", f"escaped the driver's catch: {type(e).__name__}: {e}")
            retire = "escaped"
        wall = time.monotonic() - t0
        built = build_happened(before, so_state(build_dir))
        if retire is None and (is_sticky_cuda(row) or not _cuda_healthy()):
            retire = "cuda_context"
        if retire is None:
            patched = _tainted(snap)
            if patched:
                retire = "torch_patched:" + ",".join(patched[:5])
        sys.stdout.flush()
        sys.stderr.flush()
        conn.send({"type": "row", "row": row, "wall_s": wall, "built": built, "retire": retire})
        if retire:
            return


# ------------------------------------------------------------------------------------------ parent side


class _Worker:
    def __init__(self, ctx, slot: int, spec: dict[str, Any], gpu: str | None):
        self.slot, self.ready, self.job, self.deadline, self.served = slot, False, None, None, 0
        self.started = time.monotonic()
        self.conn, child = ctx.Pipe()
        env_gpu = os.environ.get("CUDA_VISIBLE_DEVICES")
        if gpu is not None:
            os.environ["CUDA_VISIBLE_DEVICES"] = gpu
        try:
            self.proc = ctx.Process(target=_worker_main, args=(child, {**spec, "log": spec["log"].format(slot=slot),
                                                                       "scratch": spec["scratch"].format(slot=slot)}),
                                    daemon=True)
            self.proc.start()
        finally:
            if gpu is not None:
                if env_gpu is None:
                    os.environ.pop("CUDA_VISIBLE_DEVICES", None)
                else:
                    os.environ["CUDA_VISIBLE_DEVICES"] = env_gpu
        child.close()
        self.info: dict[str, Any] = {}

    def kill(self) -> None:
        if self.proc.is_alive():
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.join(timeout=30)
        self.conn.close()


def load_build_dir_map(path: str | os.PathLike[str] | None) -> dict[str, str]:
    """``{id: directory}`` from a JSON object; relative directories are taken from the map file's folder."""
    if not path:
        return {}
    path = Path(path)
    raw = json.loads(path.read_text())
    if not isinstance(raw, dict):
        raise SetupError(f"{path}: the build-dir map must be a JSON object id -> directory")
    return {str(k): str((path.parent / v).resolve()) if not os.path.isabs(v) else str(v) for k, v in raw.items()}


def _progress(enabled: bool, text: str) -> None:
    if enabled:
        print(text, file=sys.stderr, flush=True)


def run(run_dir: str | os.PathLike[str], out: str | os.PathLike[str], *, impl: str = "real",
        checkout: str | os.PathLike[str] | None = None, problems: str | os.PathLike[str] | None = None,
        problem_base: int = 1, workers: int = 1, gpus: Sequence[str] | None = None, timeout_s: float = TIMEOUT_S,
        build_dir_map: str | os.PathLike[str] | None = None, device: str = "cuda", kernels_per_worker: int = 0,
        extra_paths: Sequence[str] = (), ids: Iterable[str] | None = None, stand_ins: bool = True,
        startup_timeout_s: float = 900.0, progress: bool = True,
        work: str | os.PathLike[str] | None = None,
        build_root: str | os.PathLike[str] | None = None, stop_after_s: float = 0.0) -> dict[str, Any]:
    """Judge every kernel of ``run_dir`` that has no current row; then write the outputs. Returns the summary.

    ``work`` (default ``OUT/work``) holds the checkpoint, the per-sample build directories, worker logs and
    scratch folders: large and machine-specific, so a workflow keeps it outside ``results/``. ``build_root``
    (default ``WORK/build``) holds one build directory per kernel (``<build_root>/<id>``) where the build-dir map
    names none; runs of several implementations given the same ``build_root`` build each extension once (same
    sources, flags and environment: ninja finds the second one up to date). ``stop_after_s`` > 0: no kernel is
    started after that many seconds; those in flight finish, the outputs cover what is judged, a later call
    resumes.
    """
    import multiprocessing as mp

    from lethe.audit.batch import discover

    if impl not in IMPLS:
        raise SetupError(f"unknown --impl {impl!r} (one of {', '.join(IMPLS)})")
    if impl == "real" and not checkout:
        raise SetupError("--impl real needs --checkout (a KernelBench copy at 48642c5c holding src/eval.py)")
    # Workers judge each kernel from its own working directory: every path they are given must be absolute.
    checkout = os.path.abspath(checkout) if checkout else checkout
    problems = os.path.abspath(problems) if problems else checkout
    run_dir = os.path.abspath(run_dir)
    build_dir_map = os.path.abspath(build_dir_map) if build_dir_map else build_dir_map
    if not problems:
        raise SetupError("no KernelBench problem files: give --problems (or --checkout)")
    items = discover(run_dir, kernelbench=str(problems), problem_base=problem_base)
    if ids is not None:
        wanted = set(ids)
        items = [it for it in items if it["id"] in wanted]
    by_id = {it["id"]: it for it in items}
    out = Path(out)
    # Absolute: build directories are written into the candidate source and workers run in their own cwd.
    out = out.resolve()
    work = Path(work).resolve() if work else out / "work"
    work.mkdir(parents=True, exist_ok=True)
    lock = open(work / "lock", "a")
    # A killed earlier command's workers die with it; a live second command must not write the same checkpoint.
    try:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise SetupError(f"another run holds {work / 'lock'}") from None
    ckpt_path = work / "checkpoint.jsonl"
    done = done_ids(read_jsonl(ckpt_path), by_id, impl)
    bdmap = load_build_dir_map(build_dir_map)
    todo = [it for it in items if it["id"] not in done]
    t_run = time.monotonic()
    infos: list[dict[str, Any]] = []
    n_total, n_done0 = len(items), len(done)
    _progress(progress, f"kernelbench-real {impl}: {n_total} kernels, {n_done0} already judged, {len(todo)} to go")
    with open(ckpt_path, "a", encoding="utf-8") as ckpt:
        pending = []
        for it in todo:
            if it.get("extract_error"):
                append_fsync(ckpt, {"row": event_row(it, impl, "not_run", it["extract_error"]),
                                    "timing": timing_row(it["id"], None, None, None, None)})
            else:
                pending.append(it)
        if pending:
            infos = _pool(pending, ckpt, impl=impl, checkout=checkout, workers=workers, gpus=gpus,
                          timeout_s=timeout_s, bdmap=bdmap, work=work, device=device,
                          kernels_per_worker=kernels_per_worker, extra_paths=list(extra_paths), stand_ins=stand_ins,
                          startup_timeout_s=startup_timeout_s, progress=progress, n_total=n_total,
                          build_root=Path(build_root).resolve() if build_root else work / "build",
                          stop_at=time.monotonic() + stop_after_s if stop_after_s and stop_after_s > 0 else None,
                          n_done0=n_total - len(pending), ctx=mp.get_context("spawn"))
    summary = gather(items, out, work, impl=impl, checkout=checkout, infos=infos, settings={
        "impl": impl, "run_dir": str(run_dir), "problems": str(problems), "problem_base": problem_base,
        "workers": workers, "gpus": list(gpus or []), "timeout_s": timeout_s, "device": device,
        "kernels_per_worker": kernels_per_worker, "extra_paths": list(extra_paths),
        "build_dir_map": str(build_dir_map) if build_dir_map else None,
        "build_root": str(build_root) if build_root else None, "num_correct_trials": NUM_CORRECT_TRIALS,
        "seed": SEED, "measure_performance": False, "stand_ins_allowed": list(STAND_IN_NAMES) if stand_ins else [],
        "this_call_wall_s": round(time.monotonic() - t_run, 1)})
    lock.close()
    return summary


def _pool(pending: list[dict[str, Any]], ckpt, *, impl, checkout, workers, gpus, timeout_s, bdmap, work, device,
          kernels_per_worker, extra_paths, stand_ins, startup_timeout_s, progress, n_total, n_done0, ctx,
          build_root: Path, stop_at: float | None = None) -> list[dict[str, Any]]:
    from multiprocessing.connection import wait

    spec = {"impl": impl, "checkout": str(checkout) if checkout else None, "device": device,
            "extra_paths": [str(Path(p).resolve()) for p in extra_paths], "stand_ins": stand_ins,
            "parent_pid": os.getpid(), "log": str(work / "worker-{slot}.log"),
            "scratch": str(work / "scratch" / "{slot}")}
    shared_dirs = {d for d, c in Counter(bdmap.values()).items() if c > 1}
    n = max(1, min(int(workers), len(pending)))
    queue = list(pending)
    infos: list[dict[str, Any]] = []
    pool = [_Worker(ctx, i, spec, gpus[i % len(gpus)] if gpus else None) for i in range(n)]
    finished, t0 = 0, time.monotonic()

    def record(w: _Worker, row: dict[str, Any], wall: float | None, built: bool | None) -> None:
        nonlocal finished
        append_fsync(ckpt, {"row": row, "timing": timing_row(row["id"], wall, built, w.slot, w.served)})
        finished += 1
        rate = finished / max(time.monotonic() - t0, 1e-9) * 3600
        wall_txt = "-" if wall is None else f"{wall:.1f}s"
        _progress(progress, f"[{n_done0 + finished}/{n_total}] {row['id']} {row['outcome']} {wall_txt} "
                            f"(worker {w.slot}, {rate:.0f} kernels/h)")

    def replace(w: _Worker) -> None:
        w.kill()
        pool[pool.index(w)] = _Worker(ctx, w.slot, spec, gpus[w.slot % len(gpus)] if gpus else None)

    try:
        while queue or any(w.job is not None for w in pool):
            if stop_at is not None and queue and time.monotonic() > stop_at:
                _progress(progress, f"stop-after reached: {len(queue)} kernels left for a later call")
                queue.clear()
            for w in pool:
                if w.ready and w.job is None and queue:
                    if kernels_per_worker and w.served >= kernels_per_worker:
                        try:
                            w.conn.send({"type": "stop"})
                        except OSError:
                            pass
                        replace(w)
                        continue
                    item = queue.pop(0)
                    w.job, w.deadline = item, time.monotonic() + timeout_s
                    w.served += 1
                    bdir = bdmap.get(item["id"], str(build_root / item["id"]))
                    # A directory several kernels share may hold a live lock of another worker: leave it.
                    w.conn.send({"type": "job", "item": item, "build_dir": bdir,
                                 "clear_locks": bdir not in shared_dirs})
            if not queue and all(w.job is None for w in pool):
                break
            now = time.monotonic()
            limits = [w.deadline - now for w in pool if w.job is not None] + \
                     [w.started + startup_timeout_s - now for w in pool if not w.ready]
            ready = wait([w.conn for w in pool], timeout=max(0.05, min(limits) if limits else 1.0))
            for w in list(pool):
                if w.conn in ready:
                    try:
                        msg = w.conn.recv()
                    except (EOFError, OSError):
                        msg = None
                    if msg is None:
                        code = w.proc.exitcode if not w.proc.is_alive() else None
                        w.proc.join(timeout=10)
                        code = w.proc.exitcode if code is None else code
                        if w.job is None:
                            raise SetupError(f"worker {w.slot} exited ({code}) before it was ready; see "
                                             f"{spec['log'].format(slot=w.slot)}")
                        record(w, event_row(w.job, impl, "died", f"worker died (exit code {code}) with no row"),
                               time.monotonic() - (w.deadline - timeout_s), None)
                        w.job = None
                        replace(w)
                    elif msg["type"] == "setup_error":
                        raise SetupError(f"worker {w.slot}: {msg['error']}")
                    elif msg["type"] == "ready":
                        w.ready, w.info = True, msg["info"]
                        infos.append(msg["info"])
                    elif msg["type"] == "row":
                        record(w, msg["row"], msg["wall_s"], msg["built"])
                        w.job = None
                        if msg.get("retire"):
                            _progress(progress, f"worker {w.slot} replaced after {msg['row']['id']}: {msg['retire']}")
                            replace(w)
            now = time.monotonic()
            for w in list(pool):
                if w.job is not None and now > w.deadline:
                    record(w, event_row(w.job, impl, "timeout", f"no result within {timeout_s:g} s"), timeout_s,
                           None)
                    w.job = None
                    _progress(progress, f"worker {w.slot} killed at the {timeout_s:g} s timeout and replaced")
                    replace(w)
                elif not w.ready and now > w.started + startup_timeout_s:
                    raise SetupError(f"worker {w.slot} not ready within {startup_timeout_s:g} s")
    finally:
        for w in pool:
            if w.ready and w.job is None and w.proc.is_alive():
                try:
                    w.conn.send({"type": "stop"})
                except OSError:
                    pass
                w.proc.join(timeout=10)
            w.kill()
    return infos


def _write_lines(path: Path, objs: Iterable[Mapping[str, Any]]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        for o in objs:
            fh.write(json.dumps(o, sort_keys=True) + "\n")
    os.replace(tmp, path)


def summarise(rows: list[Mapping[str, Any]], timing: list[Mapping[str, Any]], *, impl: str,
              kernels: int) -> dict[str, Any]:
    """The judge's summary over its rows and their timing lines (one each per kernel): outcome counts, accepted
    / rejected / not recorded, worker events, builds against reused prebuilt extensions, judge wall time. Also
    what a union of several device calls' rows is summarised with (experiments/audit/ingest_h200.py)."""
    walls = [t["wall_s"] for t in timing if t["wall_s"] is not None]
    return {
        "impl": impl, "kernels": kernels, "rows": len(rows), "missing": kernels - len(rows),
        "outcomes": dict(sorted(Counter(r["outcome"] for r in rows).items())),
        "accepted": sum(1 for r in rows if r["correct"] is True),
        "rejected": sum(1 for r in rows if r["correct"] is False),
        "not_recorded": sum(1 for r in rows if r["correct"] is None),
        "worker_events": dict(sorted(Counter(r["worker_event"] for r in rows if r["worker_event"]).items())),
        "builds": sum(1 for t in timing if t["built"] is True),
        "prebuilt_reused": sum(1 for t in timing if t["built"] is False),
        "judge_wall_s_sum": round(sum(walls), 1),
        "judge_wall_s_median": round(sorted(walls)[len(walls) // 2], 3) if walls else None,
    }


def gather(items: list[dict[str, Any]], out: Path, work: Path, *, impl: str, checkout, infos: list[dict[str, Any]],
           settings: dict[str, Any]) -> dict[str, Any]:
    """rows.jsonl, timing.jsonl, summary.json and provenance.json from the checkpoint (latest row per id)."""
    from lethe import provenance

    latest: dict[str, dict[str, Any]] = {}
    out.mkdir(parents=True, exist_ok=True)
    for e in read_jsonl(work / "checkpoint.jsonl"):
        if e["row"].get("impl") == impl:
            latest[e["row"]["id"]] = e
    ids = sorted((it["id"] for it in items if it["id"] in latest), key=id_key)
    rows = [{k: latest[i]["row"].get(k) for k in ROW_FIELDS} for i in ids]
    timing = [{k: latest[i].get("timing", {}).get(k) for k in TIMING_FIELDS} for i in ids]
    _write_lines(out / "rows.jsonl", rows)
    _write_lines(out / "timing.jsonl", timing)
    summary = summarise(rows, timing, impl=impl, kernels=len(items))
    (out / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    workers = {}
    for key in ("gpu", "driver", "capability", "cuda_runtime", "torch", "torch_cuda", "python", "pydantic",
                "pydantic_core", "eval_module", "trial_seeds", "build_env", "nvcc"):
        vals = sorted({json.dumps(i.get(key)) for i in infos})
        workers[key] = [json.loads(v) for v in vals]
    stand_ins = sorted({s for i in infos for s in i.get("stand_ins", [])})
    prov_path = out / "provenance.json"
    old = json.loads(prov_path.read_text()) if prov_path.exists() else {}
    # A resumed call whose every kernel was already judged starts no worker: keep what the workers reported.
    if not infos and old.get("workers"):
        workers, stand_ins = old["workers"], old.get("stand_ins", [])
    extra = {"kernelbench_real": settings, "workers": workers, "stand_ins": stand_ins,
             "extension_versions_reset_per_kernel": True}
    if impl == "real":
        extra["kernelbench"] = kernelbench_fingerprint(checkout)
    provenance.write(prov_path, **extra)
    return summary


# ------------------------------------------------------------------------------------------ agreement


#: Classes of a real-vs-replica disagreement, in the order :func:`classify_disagreement` tries them.
DISAGREEMENT_CLASSES = {
    "timeout_or_retry_dropped": "one side has no verdict: a timeout or KernelBench's lock/no-such-file retry drop",
    "compile_env": "the sides disagree on whether the kernel compiled and loaded (build, toolchain, import, "
                   "worker death): an environment difference, not a check semantics difference",
    "nondeterministic_candidate": "the candidate's verdict changes between runs of the same check (a repeat run "
                                  "disagrees with itself), or its outputs pass some trials and fail others",
    "shared_namespace": "the candidate rebinds a top-level name of the reference (batch_size, N, ...), which "
                        "both checks read from one shared globals dict",
    "tolerance_policy": "the two checks apply different tolerances and the stricter one rejects on values",
    "tolerance_edge": "same tolerance, and the rejecting side's largest |ref - new| is at most 4 x atol",
    "runtime_divergence": "one side raised (runtime error, shape mismatch) where the other ran to a verdict",
    "unexplained": "none of the rules above applies: read the kernel",
}
#: A value rejection whose max |ref - new| is within this factor of atol is at the tolerance edge (the definition
#: in DISAGREEMENT_CLASSES states it; a test holds the two together).
EDGE_FACTOR = 4.0
_NOT_LOADED = ("compilation_error", "cuda_error", "other_error")


def _repeat_disagrees(i: str, repeats: Sequence[Mapping[str, Mapping[str, Any]]],
                      base: Mapping[str, Any] | None) -> bool:
    if base is None:
        return False
    return any(i in rep and rep[i].get("correct") is not None and base.get("correct") is not None
               and rep[i].get("correct") != base.get("correct") for rep in repeats)


def classify_disagreement(t: Mapping[str, Any], o: Mapping[str, Any],
                          repeats: Sequence[Mapping[str, Mapping[str, Any]]] = ()) -> tuple[str, str]:
    """(class, reason) of one kernel on which two rows disagree; first matching rule of :data:`DISAGREEMENT_CLASSES`.

    ``repeats`` are further runs keyed by id (of either implementation); a kernel whose verdict differs from its
    own implementation's repeat is nondeterministic, whatever the other rules say.
    """
    i = str(t.get("id", o.get("id")))
    if t.get("correct") is None or o.get("correct") is None:
        side = t if t.get("correct") is None else o
        return "timeout_or_retry_dropped", f"{side.get('impl')}: {side.get('outcome')}"
    if bool(t.get("compiled")) != bool(o.get("compiled")) or \
            (t.get("outcome") in _NOT_LOADED) != (o.get("outcome") in _NOT_LOADED):
        return "compile_env", f"{t.get('impl')} {t.get('outcome')} vs {o.get('impl')} {o.get('outcome')}"
    same_impl = [[r for r in repeats if i in r and r[i].get("impl") == x.get("impl")] for x in (t, o)]
    for x, reps in zip((t, o), same_impl, strict=True):
        if _repeat_disagrees(i, reps, x):
            return "nondeterministic_candidate", f"{x.get('impl')} gave another verdict on a repeat run"
    if t.get("cand_rebinds") or o.get("cand_rebinds"):
        names = t.get("cand_rebinds") or o.get("cand_rebinds")
        return "shared_namespace", "candidate rebinds " + ", ".join(names)
    fail = t if t.get("correct") is False else o
    other = o if fail is t else t
    tol_f, tol_o = fail.get("tolerance"), other.get("tolerance")
    if fail.get("outcome") == "output_mismatch":
        if tol_f is not None and tol_o is not None and tol_f < tol_o:
            return "tolerance_policy", f"{fail.get('impl')} atol=rtol={tol_f:g} vs {other.get('impl')} {tol_o:g}"
        md = fail.get("max_difference")
        if md is not None and tol_f is not None and md <= EDGE_FACTOR * tol_f:
            return "tolerance_edge", f"max|diff| {md:g} <= {EDGE_FACTOR:g} x {tol_f:g}"
        k, n = fail.get("trials_passed"), fail.get("n_trials")
        if k is not None and n is not None and 0 < k < n:
            return "nondeterministic_candidate", f"{fail.get('impl')} passed {k}/{n} trials"
    if {t.get("outcome"), o.get("outcome")} & {"runtime_error", "shape_mismatch"}:
        return "runtime_divergence", f"{t.get('impl')} {t.get('outcome')} vs {o.get('impl')} {o.get('outcome')}"
    return "unexplained", f"{t.get('impl')} {t.get('outcome')} vs {o.get('impl')} {o.get('outcome')}"


def agree(theirs: Iterable[Mapping[str, Any]], ours: Iterable[Mapping[str, Any]],
          repeats: Sequence[Iterable[Mapping[str, Any]]] = ()) -> dict[str, Any]:
    """The 2x2 of :func:`lethe.kernelbench.agreement.agreement`, plus every disagreement classified.

    Disagreements are (a) the off-diagonal cells of the 2x2 and (b) kernels present on both sides that only one
    side leaves without a verdict (the 2x2 skips those; they are listed here so none goes unexplained).
    """
    from lethe.kernelbench import agreement as ag

    t = {str(r["id"]): r for r in theirs}
    o = {str(r["id"]): r for r in ours}
    reps = [{str(r["id"]): r for r in rep} for rep in repeats]
    base = ag.agreement(t.values(), o.values())
    listed = []
    for i in sorted(set(t) & set(o), key=id_key):
        a, b = t[i], o[i]
        both_none = a.get("correct") is None and b.get("correct") is None
        if both_none or a.get("correct") == b.get("correct"):
            continue
        cls, why = classify_disagreement(a, b, reps)
        listed.append({"id": i, "class": cls, "why": why, "their_outcome": a.get("outcome"),
                       "our_outcome": b.get("outcome"), "their_correct": a.get("correct"),
                       "our_correct": b.get("correct"), "their_max_difference": a.get("max_difference"),
                       "our_max_difference": b.get("max_difference")})
    impl_t = sorted({str(r.get("impl")) for r in t.values()})
    impl_o = sorted({str(r.get("impl")) for r in o.values()})
    counts = Counter(d["class"] for d in listed)
    return {
        "theirs": impl_t, "ours": impl_o, "joined_rows": base["joined_rows"],
        "skipped_dropped": base["skipped_dropped"], "only_theirs": base["only_theirs"],
        "only_ours": base["only_ours"], "cells_their_vs_our_replica": base["cells_their_vs_our_replica"],
        "agreement_rate": base["agreement_rate"], "n_disagreements": base["n_disagreements"],
        "n_one_side_dropped": sum(1 for d in listed if d["class"] == "timeout_or_retry_dropped"),
        "classes": {c: counts.get(c, 0) for c in DISAGREEMENT_CLASSES},
        "class_definitions": DISAGREEMENT_CLASSES, "edge_factor": EDGE_FACTOR,
        "disagreements": listed, "repeat_runs": len(reps),
    }


def read_rows(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Rows of a run folder (``rows.jsonl``) or of a rows file."""
    p = Path(path)
    if p.is_dir():
        p = p / "rows.jsonl"
    return [json.loads(x) for x in p.read_text().splitlines() if x.strip()]


# ------------------------------------------------------------------------------------------ CLI


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lethe.kernelbench.real", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    j = sub.add_parser("judge", help="judge a KernelBench run folder with KernelBench's check or our replica")
    j.add_argument("run_dir")
    j.add_argument("--out", required=True)
    j.add_argument("--work", default=None, help="checkpoint, build directories, logs (default OUT/work)")
    j.add_argument("--impl", default="real", choices=IMPLS)
    j.add_argument("--checkout", default=None, help="KernelBench copy at 48642c5c (src/eval.py; problems too)")
    j.add_argument("--problems", default=None, help="KernelBench problems folder (default: the checkout)")
    j.add_argument("--problem-base", type=int, default=1, choices=[0, 1])
    j.add_argument("--workers", type=int, default=1, help="worker processes (they share the visible GPU)")
    j.add_argument("--gpus", default="", help="comma-separated device ids, one per worker round robin")
    j.add_argument("--timeout", type=float, default=TIMEOUT_S)
    j.add_argument("--build-dir-map", default=None, help="JSON id -> prebuilt extension directory")
    j.add_argument("--build-root", default=None, help="per-kernel build directories <root>/<id> (default WORK/build)")
    j.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    j.add_argument("--kernels-per-worker", type=int, default=0, help="replace a worker after this many (0: never)")
    j.add_argument("--extra-path", action="append", default=[], help="prepended to the workers' sys.path")
    j.add_argument("--ids", default=None, help="file of ids (one a line): judge only these")
    j.add_argument("--no-stand-ins", action="store_true")
    j.add_argument("--stop-after", type=float, default=0.0,
                   help="start no kernel after this many seconds (0: run to the end); a later call resumes")
    j.add_argument("--quiet", action="store_true")
    a = sub.add_parser("agree", help="real-vs-replica agreement with every disagreement classified")
    a.add_argument("--theirs", required=True, help="run folder or rows.jsonl of KernelBench's own check")
    a.add_argument("--ours", required=True, help="run folder or rows.jsonl of the replica")
    a.add_argument("--repeat", action="append", default=[], help="a further run (either implementation)")
    a.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    if args.cmd == "agree":
        res = agree(read_rows(args.theirs), read_rows(args.ours), [read_rows(r) for r in args.repeat])
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(res, indent=1, sort_keys=True) + "\n")
        print(f"{res['joined_rows']} joined, agreement {res['agreement_rate']}, classes {res['classes']}")
        return 0
    ids = None
    if args.ids:
        ids = [x.strip() for x in Path(args.ids).read_text().splitlines() if x.strip()]
    try:
        s = run(args.run_dir, args.out, impl=args.impl, checkout=args.checkout, problems=args.problems,
                problem_base=args.problem_base, workers=args.workers,
                gpus=[g for g in args.gpus.split(",") if g] or None, timeout_s=args.timeout,
                build_dir_map=args.build_dir_map, device=args.device, kernels_per_worker=args.kernels_per_worker,
                extra_paths=args.extra_path, ids=ids, stand_ins=not args.no_stand_ins, progress=not args.quiet,
                work=args.work, build_root=args.build_root, stop_after_s=args.stop_after)
    except SetupError as e:
        print(f"kernelbench-real: {e}", file=sys.stderr)
        return 2
    print(json.dumps(s, sort_keys=True))
    return 0 if s["missing"] == 0 else 1


if __name__ == "__main__":
    # Through the package module, so the spawned workers unpickle lethe.kernelbench.real._worker_main, not __main__.
    from lethe.kernelbench import real as _real

    raise SystemExit(_real.main())
