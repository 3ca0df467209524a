"""Verify every trusted candidate, resumably, within a per-kernel and an overall wall-clock budget.

One command runs (and, run again, resumes) the whole corpus::

    PYTHONPATH=src OMP_NUM_THREADS=1 nice -n 15 python -m lethe.trusted.run --device cpu --out results/trusted

(``--kb-root`` when the KernelBench checkout is not beside the worktree.) On the H200, whose copy of the tree
has no ``../shared``: copy the checkout's ``KernelBench/`` into a folder of the repository that git ignores
(``.kb/``), carry it, and run in calls that each fit the device's per-command limit, with the checkpoint kept
beside the results so that it travels back and forth with the tree::

    python -m lethe.trusted.run --device cuda --kb-root .kb --out results/trusted/gpu \
        --checkpoint results/trusted/gpu/checkpoint.jsonl --stop-after-s 480

(then copy ``results/trusted/gpu`` to ``$OUT``; repeat until ``summary.json`` says nothing is left; the
device machine keeps nothing between calls, so the checkpoint must travel back each time:
``experiments/trusted/device_run.sh`` does both columns that way). Every finished kernel is appended to a checkpoint (``lethe.audit.shard.run_shard``:
fsynced JSONL, torn lines cut away, stale rows -- other sources, seed or verifier code -- redone), so a killed
run loses at most the kernel in flight. Kernels run one at a time in corpus order (level, then input size), and
the run stops starting new kernels once ``--stop-after-s`` seconds have passed or the clock reaches
``--stop-at`` (UTC, HH:MM); the committed files always say how far it got.

Each candidate runs once and is graded under every profile (``verify_profiles``). The float64 reference runs
first under the per-kernel budget: a reference that needs longer is recorded as a ``timeout`` row whose error
says so, i.e. the problem is excluded at run time, with its reason.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from lethe.provenance import REPO_ROOT
from lethe.trusted import corpus as C

CORPUS = "trusted"
REF_BUDGET_PREFIX = "float64 reference exceeded the per-kernel budget"
REF_MEMORY_PREFIX = "float64 reference exceeded the per-kernel memory budget"
# The same limits as the reference reports them when they trip inside its own process (lethe.verifier.api
# .reference_error): its alarm at the time budget, its allocator at the memory budget.
_REF_OWN_TIME = re.compile(r"reference exceeded its [0-9.]+ s time budget")
_REF_OWN_MEMORY = re.compile(r"reference exceeded its [0-9]+ MB memory budget")


def budget_exclusion(row: Mapping[str, Any]) -> str | None:
    """Why a row is a run-time exclusion rather than a verdict: ``"reference_time"`` or ``"reference_memory"``
    (the float64 reference outran the per-kernel budget, wherever the limit tripped), ``"candidate_time"`` (the
    candidate outran it), or None. A reference over budget says nothing about the candidate, so such a
    problem is excluded, with its reason, like one the static size budget excludes."""
    err = str(row.get("error", "") or "")
    if row.get("status") == "timeout":
        return "reference_time" if err.startswith(REF_BUDGET_PREFIX) else "candidate_time"
    if row.get("status") == "ref_broken":
        if err.startswith(REF_MEMORY_PREFIX) or _REF_OWN_MEMORY.match(err):
            return "reference_memory"
        if _REF_OWN_TIME.match(err):
            return "reference_time"
    return None


class ProfileMemo:
    """A ``verify_fn`` for ``run_shard`` that verifies once per kernel and hands out one row per profile.

    ``run_shard`` asks for (kernel, profile) pairs one at a time; the verifier grades every profile from one
    candidate run, so the first request of a kernel runs ``verify_profiles`` for all profiles and the others are
    answered from memory.
    """

    def __init__(self, profiles: list[str], *, ref_memory_mb: int, memory_mb: int,
                 verify_profiles: Callable[..., list[dict]] | None = None,
                 run_reference: Callable[..., Any] | None = None, reference_device: str = "auto") -> None:
        self.profiles = list(profiles)
        self.reference_device = reference_device
        self.ref_memory_mb = ref_memory_mb
        self.memory_mb = memory_mb
        self._verify_profiles = verify_profiles
        self._run_reference = run_reference
        self._memo: dict[tuple, dict[str, dict]] = {}
        self._lock = threading.Lock()

    def __call__(self, *, ref_src: str, cand_src: str, profile: str, device: str, seed: int, kernel_id: str,
                 corpus: str, timeout_s: float) -> dict:
        """``timeout_s`` is the per-kernel budget; each sandboxed phase (reference, candidate, ahead-of-time pass)
        gets it in full, so ``run_shard``'s own backstop must be given :func:`backstop_s` of it."""
        key = (kernel_id, C._sha(ref_src), C._sha(cand_src), seed, device)
        # One verification at a time: a call arriving while an earlier one for the same kernel is still running
        # (its caller gave up on it) waits for it instead of starting a second copy.
        with self._lock:
            if key not in self._memo:
                self._forget_other_references(C._sha(ref_src))
                self._memo = {key: self._verify_all(ref_src, cand_src, device=device, seed=seed,
                                                    kernel_id=kernel_id, corpus=corpus, timeout_s=timeout_s)}
            return dict(self._memo[key][profile])

    def _forget_other_references(self, ref_sha: str) -> None:
        """Keep the verifier's in-process reference cache to the current problem's entries.

        The corpus visits each problem's members together, so older references are never asked for again, and
        the float64 arrays of a large problem would otherwise stay in this process for the rest of the run.
        """
        if self._verify_profiles is not None or ref_sha == getattr(self, "_ref_sha", None):
            return
        from lethe.verifier import api

        api._REF_CACHE.clear()
        api._REF_MEMO.clear()  # the tolerances kept with them (api.grade)
        self._ref_sha = ref_sha

    def _verify_all(self, ref_src: str, cand_src: str, *, device: str, seed: int, kernel_id: str, corpus: str,
                    timeout_s: float) -> dict[str, dict]:
        from lethe.verifier import api
        from lethe.verifier import records as R

        run_reference = self._run_reference or api.run_reference
        verify_profiles = self._verify_profiles or api.verify_profiles
        dev = api.resolve_device(device)
        ref_dev = api.resolve_reference_device(self.reference_device, dev)
        interpret = dev == "cpu" and "triton" in cand_src
        # The reference runs here first, under the kernel's budget, and lands in the verifier's reference cache,
        # so verify_profiles below reuses it instead of running it again under its own (longer) default limit.
        t0 = time.monotonic()
        status, res, _arr, raw = run_reference(ref_src, seed, timeout_s=timeout_s, memory_mb=self.ref_memory_mb,
                                               interpret=interpret, device=ref_dev)
        if status != "ok" or not (res or {}).get("ok"):
            # Handled here: verify_profiles would run a failed reference again, under its own longer limit.
            secs = round(time.monotonic() - t0, 3)
            if status == "timeout":
                row_status, err = "timeout", f"{REF_BUDGET_PREFIX} ({timeout_s:.0f} s)"
            elif status == "oom":
                row_status, err = "ref_broken", f"{REF_MEMORY_PREFIX} ({self.ref_memory_mb} MB)"
            else:
                row_status = "ref_broken"
                err = (res or {}).get("error") or f"reference sandbox {status}: {getattr(raw, 'detail', '')}"
            return {p: R.make_row(id=kernel_id, corpus=corpus, profile=p, device=dev, seed=int(seed),
                                  status=row_status, seconds=secs, error=str(err)[:2000],
                                  environment=json.dumps(api.environment(dev), sort_keys=True),
                                  sources=json.dumps({"ref_sha256": C._sha(ref_src), "cand_sha256": C._sha(cand_src)},
                                                     sort_keys=True),
                                  gates=R.na_gates(f"row status {row_status}", int(seed)))
                    for p in self.profiles}
        # The reference's second pass (after a failing candidate) keeps the verifier's default time budget, within
        # which it plans its draws by the plan's estimates (several times the real time: at the kernel's own
        # budget it could afford almost none of a large problem's floors), and the kernel's memory budget.
        rows = verify_profiles(ref_src, cand_src, profiles=self.profiles, device=device, seed=seed,
                               timeout_s=timeout_s, memory_mb=self.memory_mb, kernel_id=kernel_id, corpus=corpus,
                               op_class="trusted", reference_device=self.reference_device,
                               ref_memory_mb=self.ref_memory_mb)
        return {r["profile"]: r for r in rows}


def backstop_s(budget_s: float) -> float:
    """How long ``run_shard`` waits for one kernel before it writes a timeout row: the verifier enforces the
    budget itself, once per sandboxed phase (reference, candidate, ahead-of-time pass), and the reference's second
    pass after a failing candidate under the verifier's default reference budget, so the backstop only catches a
    hung verifier."""
    from lethe.verifier import api

    return 3.0 * budget_s + api.REF_TIMEOUT_S


def _deadline(stop_after_s: float | None, stop_at: str | None, now: float | None = None) -> float | None:
    """Monotonic time after which no new kernel starts (None: run to the end)."""
    now = time.monotonic() if now is None else now
    ends = []
    if stop_after_s:
        ends.append(now + float(stop_after_s))
    if stop_at:
        hh, mm = (int(x) for x in stop_at.split(":"))
        utc = dt.datetime.now(dt.timezone.utc)
        target = utc.replace(hour=hh, minute=mm, second=0, microsecond=0)
        if target <= utc:
            target += dt.timedelta(days=1)
        ends.append(now + (target - utc).total_seconds())
    return min(ends) if ends else None


def drop_rows(checkpoint: str | os.PathLike[str], keep: Callable[[Mapping[str, Any]], bool]) -> int:
    """Rewrite the checkpoint without the rows ``keep`` rejects (atomically); returns how many were dropped."""
    from lethe.audit.shard import read_checkpoint

    rows = read_checkpoint(checkpoint)
    kept = [r for r in rows if keep(r)]
    if len(kept) == len(rows):
        return 0
    _rewrite_checkpoint(checkpoint, kept)
    return len(rows) - len(kept)


def _rewrite_checkpoint(checkpoint: str | os.PathLike[str], rows: list[Mapping[str, Any]]) -> None:
    """Replace the checkpoint by ``rows`` atomically (a synced temporary file renamed over it)."""
    tmp = Path(f"{checkpoint}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps(r, sort_keys=True, default=str) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, checkpoint)


def run(corpus: Mapping[str, Any], out_dir: str | os.PathLike[str], *, checkpoint: str | os.PathLike[str],
        profiles: list[str], device: str, seed: int, budget_s: float, deadline: float | None = None,
        verify_fn: Callable[..., Mapping[str, Any]] | None = None, kb_commit: str = "",
        ref_memory_mb: int = 4096, memory_mb: int = 4096, log: Callable[[str], None] = print,
        reference_device: str = "auto", collect_only: bool = False,
        stopped_early: bool = False, started: int = 0) -> dict[str, Any]:
    """Verify the corpus's items in order until done or past ``deadline``; write the results folder.

    ``collect_only`` verifies nothing and writes the folder from what the checkpoint holds (the last step of a
    parallel run, :func:`run_parallel`, whose workers report ``stopped_early`` and how many they ``started``).

    Writes ``rows.parquet`` (every finished row of this corpus, in corpus order), ``corpus.json`` (the
    manifest: every member, its census and exclusion reason), ``summary.json`` (coverage) and
    ``provenance.json``. Returns the summary.
    """
    from lethe import provenance
    from lethe.audit.shard import item_sources, read_checkpoint, run_shard, still_valid, write_parquet

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    verify_fn = verify_fn or ProfileMemo(profiles, ref_memory_mb=ref_memory_mb, memory_mb=memory_mb,
                                         reference_device=reference_device)
    items = corpus["items"]
    man = C.manifest(corpus, kb_commit)
    # Written first as well: it caches the census for the next call even if this one is killed.
    (out_dir / "corpus.json").write_text(json.dumps(man, indent=1, sort_keys=True) + "\n")
    t0 = time.monotonic()
    for i, it in enumerate([] if collect_only else items):
        if deadline is not None and time.monotonic() >= deadline:
            stopped_early = True
            log(f"deadline reached before item {i + 1}/{len(items)} ({it['id']}); stopping")
            break
        k0 = time.monotonic()
        rows = run_shard([it], checkpoint, verify_fn=_with_budget(verify_fn, budget_s), profiles=profiles,
                         device=device, seed=seed, timeout_s=backstop_s(budget_s), corpus=CORPUS, shard_label="",
                         progress=False)
        took = time.monotonic() - k0
        if took > 1.0:
            started += 1
            log(f"[{i + 1}/{len(items)}] {it['id']}: {rows[0]['status']} "
                f"{_fails(rows)} ({took:.0f} s, total {time.monotonic() - t0:.0f} s)")
    # Collect what the checkpoint holds for this corpus (later lines win), in corpus order.
    wanted = {(str(it["id"]), p): item_sources(it) for it in items for p in profiles}
    done: dict[tuple[str, str], dict] = {}
    for r in read_checkpoint(checkpoint):
        key = (str(r["id"]), r.get("profile"))
        if key in wanted and still_valid(r, wanted[key], seed=seed, device=device):
            done[key] = r
    rows = [done[(str(it["id"]), p)] for it in items for p in profiles if (str(it["id"]), p) in done]
    write_parquet(rows, out_dir / "rows.parquet")
    finished = {r["id"] for r in rows}
    summary = coverage(man, rows)
    summary["budget"] = dict(corpus["budget"])
    summary["machine"] = machine(device)
    summary["run"] = {"profiles": profiles, "device": device, "reference_device": reference_device, "seed": seed,
                      "budget_s": budget_s,
                      "ref_memory_mb": ref_memory_mb, "memory_mb": memory_mb,
                      "stopped_early": stopped_early, "kernels_run_this_call": started,
                      "wall_s_this_call": round(time.monotonic() - t0, 1)}
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    provenance.write(out_dir / "provenance.json", command="python -m lethe.trusted.run", device=device,
                     seed=seed, profiles=profiles, budget_s=budget_s, kernelbench_commit=kb_commit,
                     n_finished=len(finished), reference_device=reference_device)
    return summary


def shard_items(corpus: Mapping[str, Any], index: int, count: int) -> dict[str, Any]:
    """The share of the corpus that worker ``index`` of ``count`` verifies.

    Whole problems go to one worker (the members of a problem share its float64 reference, which a worker
    computes once), dealt round-robin in corpus order so that every worker gets a like mix of sizes.
    """
    if not 0 <= index < count:
        raise ValueError(f"shard {index}/{count}: need 0 <= index < count")
    order: dict[str, int] = {}
    for it in corpus["items"]:
        order.setdefault(C._sha(it["reference"]), len(order))
    mine = [it for it in corpus["items"] if order[C._sha(it["reference"])] % count == index]
    ids = {it["id"] for it in mine}
    return {**corpus, "items": mine, "members": [m for m in corpus["members"] if m.get("id") in ids]}


def merge_checkpoints(target: str | os.PathLike[str], parts: list[Path]) -> int:
    """Fold the workers' checkpoints into ``target`` (atomically): its own lines first, then each part's, with
    lines already present dropped (every worker started from a copy of ``target``). Returns the lines added."""
    from lethe.audit.shard import read_checkpoint

    target = Path(target)
    rows = read_checkpoint(target)
    seen = {json.dumps(r, sort_keys=True, default=str) for r in rows}
    added = 0
    for part in parts:
        for r in read_checkpoint(part):
            line = json.dumps(r, sort_keys=True, default=str)
            if line not in seen:
                seen.add(line)
                rows.append(r)
                added += 1
    _rewrite_checkpoint(target, rows)
    return added


def _worker_files(checkpoint: Path) -> list[Path]:
    """Worker checkpoints beside ``checkpoint`` (this run's, or a killed earlier run's)."""
    return sorted(p for p in checkpoint.parent.glob(f"{checkpoint.name}.worker*")
                  if re.fullmatch(r"worker\d+of\d+", p.name[len(checkpoint.name) + 1:]))


def fold_workers(checkpoint: Path, parts: list[Path]) -> int:
    """Fold worker checkpoints (and the attempt markers each added after its seed, recorded in
    ``<part>.seed``) into ``checkpoint``, then delete them. Returns the rows added."""
    from lethe.audit.shard import attempts_path

    added = merge_checkpoints(checkpoint, [p for p in parts if p.exists()])
    with open(attempts_path(checkpoint), "ab") as fh:
        for part in parts:
            seed = part.with_name(part.name + ".seed")
            size = int(seed.read_text()) if seed.exists() else 0
            if attempts_path(part).exists():
                fh.write(attempts_path(part).read_bytes()[size:])
        fh.flush()
        os.fsync(fh.fileno())
    for part in parts:
        for f in (part, attempts_path(part), part.with_name(part.name + ".seed")):
            f.unlink(missing_ok=True)
    return added


def run_parallel(argv: list[str], *, workers: int, checkpoint: Path, out: Path,
                 log: Callable[[str], None], popen: Callable[[list[str]], Any] | None = None) -> tuple[bool, int]:
    """Run ``workers`` copies of this command, each on its :func:`shard_items` share with its own checkpoint
    (seeded from ``checkpoint``, so a resumed run redoes nothing), then fold their checkpoints into
    ``checkpoint``. Returns whether some worker stopped before its share was done (its deadline, or it failed)
    and how many kernels the workers verified. ``popen`` starts a worker (tests replace it).

    Processes rather than threads: each worker keeps its own in-process reference cache and verifier state,
    and one that dies costs its share's unfinished kernels, which the next run resumes. Nothing finished is
    lost when this process is stopped: SIGTERM stops the workers and folds what they wrote, and worker files
    left by a run killed outright are folded in before the next run starts.
    """
    import shutil
    import signal
    import subprocess

    from lethe.audit.shard import attempts_path

    left = _worker_files(checkpoint)
    if left:
        log(f"folding {fold_workers(checkpoint, left)} rows from {len(left)} worker files of an earlier run")
    parts, procs = [], []
    main_attempts = attempts_path(checkpoint)

    def stop(signum, frame):
        raise SystemExit(128 + signum)

    old = signal.signal(signal.SIGTERM, stop)
    codes: list[int | None] = []
    try:
        for i in range(workers):
            part = checkpoint.with_name(f"{checkpoint.name}.worker{i}of{workers}")
            for src, dst in ((checkpoint, part), (main_attempts, attempts_path(part))):
                if src.exists():
                    shutil.copyfile(src, dst)
                else:
                    dst.unlink(missing_ok=True)
            # A kernel that kills its worker is retried only so often: the markers each worker adds after its
            # seed are folded back.
            seed = main_attempts.stat().st_size if main_attempts.exists() else 0
            part.with_name(part.name + ".seed").write_text(str(seed))
            parts.append(part)
            cmd = [sys.executable, "-m", "lethe.trusted.run", *argv, "--workers", "1", "--shard",
                   f"{i}/{workers}", "--checkpoint", str(part), "--out", str(out / f".worker{i}")]
            procs.append((popen or subprocess.Popen)(cmd))
        codes = [p.wait() for p in procs]
    except SystemExit:
        # Stopped from outside: fall through to fold what the workers finished; the caller then writes the
        # results folder as for a run that reached its deadline.
        pass
    finally:
        signal.signal(signal.SIGTERM, old)
        if len(codes) < len(procs):
            for p in procs:
                if hasattr(p, "terminate"):
                    p.terminate()
            codes = [p.wait() for p in procs]
            log("stopped: workers terminated, their finished rows kept")
        added = fold_workers(checkpoint, parts)
    stopped, started = any(codes), 0
    for i in range(workers):
        summ = out / f".worker{i}" / "summary.json"
        try:
            ran = json.loads(summ.read_text())["run"]
            stopped = stopped or bool(ran["stopped_early"])
            started += int(ran["kernels_run_this_call"])
        except (OSError, ValueError, KeyError):
            stopped = True
        shutil.rmtree(out / f".worker{i}", ignore_errors=True)
    log(f"{workers} workers finished (exit codes {codes}); {added} new rows folded into {checkpoint}")
    return stopped, started


def machine(device: str) -> str:
    """The processor (or GPU) and library versions the rows were measured with, in words."""
    import platform

    import torch

    if device.startswith("cuda") and torch.cuda.is_available():
        where = torch.cuda.get_device_name(0)
    else:
        where = platform.machine()
        try:
            for line in Path("/proc/cpuinfo").read_text().splitlines():
                if line.startswith("model name"):
                    where = line.split(":", 1)[1].strip()
                    break
        except OSError:
            pass
        where += f", {os.cpu_count()} cores"
    try:
        import triton
        tv = triton.__version__
    except ImportError:
        tv = "none"
    return f"{where}; torch {torch.__version__}, Triton {tv}, Python {platform.python_version()}"


def _with_budget(verify_fn: Callable[..., Mapping[str, Any]], budget_s: float) -> Callable[..., Mapping[str, Any]]:
    """``verify_fn`` with the per-kernel budget as its timeout (run_shard passes its backstop instead)."""

    def call(**kw: Any) -> Mapping[str, Any]:
        kw["timeout_s"] = budget_s
        return verify_fn(**kw)

    return call


def _fails(rows: list[Mapping[str, Any]]) -> str:
    bits = []
    for r in rows:
        f = [g for g, v in (r.get("gates") or {}).items() if v.get("status") in ("fail", "error")]
        if f:
            bits.append(f"{r['profile']}: {','.join(f)}")
    return "; ".join(bits)


def coverage(man: Mapping[str, Any], rows: list[Mapping[str, Any]]) -> dict[str, Any]:
    """How much of the corpus the rows cover: members, excluded by the static budget (with reasons), attempted
    (a row exists), of those gated, and the run-time exclusions and other row statuses."""
    by_id: dict[str, dict[str, Any]] = {}
    for r in rows:
        by_id.setdefault(r["id"], r)
    members = man["members"]
    out: dict[str, Any] = {"members": len(members), "by_kind": {}}
    for kind in ("self", "hand"):
        ms = [m for m in members if m["kind"] == kind]
        static = [m for m in ms if m["excluded"]]
        attempted = [m for m in ms if m["id"] in by_id]
        statuses: dict[str, int] = {}
        for m in attempted:
            r = by_id[m["id"]]
            s = {"reference_time": "excluded_reference_over_time_budget",
                 "reference_memory": "excluded_reference_over_memory_budget",
                 "candidate_time": "candidate_over_time_budget"}.get(budget_exclusion(r) or "", r["status"])
            statuses[s] = statuses.get(s, 0) + 1
        out["by_kind"][kind] = {
            "members": len(ms), "excluded_static": len(static), "eligible": len(ms) - len(static),
            "attempted": len(attempted), "not_reached": len(ms) - len(static) - len(attempted),
            "statuses": dict(sorted(statuses.items())),
            "excluded_static_reasons": _reason_counts(static)}
    return out


def _reason_counts(ms: list[Mapping[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for m in ms:
        why = m["excluded"]
        key = ("elements" if "elements" in why else "flops" if "FLOPs" in why else "untraceable")
        counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items()))


def only_items(corpus: Mapping[str, Any], ids: list[str]) -> dict[str, Any]:
    """The corpus restricted to the items (and members) named in ``ids``; raises ValueError for an id that is
    not an item (a typo must not silently measure nothing)."""
    want = {i.strip() for i in ids if i.strip()}
    have = {it["id"] for it in corpus["items"]}
    if want - have:
        raise ValueError(f"not items of the corpus: {sorted(want - have)}")
    return {**corpus, "items": [it for it in corpus["items"] if it["id"] in want],
            "members": [m for m in corpus["members"] if m.get("id") in want]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kb-root", default=str(C.DEFAULT_KB_ROOT),
                    help="KernelBench checkout (holding KernelBench/level1..3, or the level folders themselves)")
    ap.add_argument("--out", default=str(REPO_ROOT / "results" / "trusted"))
    ap.add_argument("--checkpoint", default=None, help="default: cache/trusted/<device>/checkpoint.jsonl")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--profiles", default="strict,cuda-default,fast-math")
    ap.add_argument("--seed", type=int, default=20260829)
    ap.add_argument("--levels", default="1,2,3")
    ap.add_argument("--budget-s", type=float, default=120.0, help="per-kernel limit (reference, and candidate)")
    ap.add_argument("--max-numel", type=int, default=C.Budget.max_numel)
    ap.add_argument("--max-flops", type=float, default=C.Budget.max_flops)
    ap.add_argument("--ref-memory-mb", type=int, default=4096, help="memory limit of the float64 reference")
    ap.add_argument("--memory-mb", type=int, default=4096, help="memory limit of the candidate")
    ap.add_argument("--stop-after-s", type=float, default=None, help="overall wall budget for this call")
    ap.add_argument("--stop-at", default=None, help="UTC HH:MM after which no new kernel starts")
    ap.add_argument("--only", default=None,
                    help="comma-separated item ids (e.g. L2/17_Conv2d_InstanceNorm_Divide): verify only these, "
                         "for a measurement on a subset; the outputs then cover only them")
    ap.add_argument("--retry-timeouts", action="store_true",
                    help="redo kernels whose checkpointed row is a timeout (e.g. after a loaded run)")
    ap.add_argument("--reference-device", default="auto", choices=("auto", "cpu", "cuda"),
                    help="where the float64 reference runs (lethe verify's option of the same name)")
    ap.add_argument("--workers", type=int, default=1,
                    help="kernels verified at once: this many processes, each on a share of the problems with "
                         "its own checkpoint, folded into --checkpoint at the end")
    ap.add_argument("--shard", default=None, help="I/N: verify only worker I's share of N (set by --workers)")
    raw_argv = list(sys.argv[1:] if argv is None else argv)
    a = ap.parse_args(argv)
    if a.workers < 1:
        ap.error("--workers must be at least 1")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    out = Path(a.out)
    checkpoint = Path(a.checkpoint or REPO_ROOT / "cache" / "trusted" / a.device / "checkpoint.jsonl")
    checkpoint.parent.mkdir(parents=True, exist_ok=True)
    if a.retry_timeouts and checkpoint.exists():
        n = drop_rows(checkpoint, lambda r: r.get("status") != "timeout")
        print(f"dropped {n} timeout rows from {checkpoint}", file=sys.stderr)
    budget = C.Budget(max_numel=a.max_numel, max_flops=a.max_flops)
    # The census depends only on the problem files, so another device's committed manifest serves as well.
    cache = out / "corpus.json"
    if not cache.exists():
        cache = REPO_ROOT / "results" / "trusted" / "corpus.json"
    corpus = C.build(a.kb_root, levels=[int(x) for x in a.levels.split(",")], budget=budget, census_cache=cache)
    if a.only:
        corpus = only_items(corpus, a.only.split(","))
    if a.shard:
        idx, cnt = (int(x) for x in a.shard.split("/"))
        corpus = shard_items(corpus, idx, cnt)
    n_ex = sum(1 for m in corpus["members"] if m["excluded"])
    print(f"corpus: {len(corpus['members'])} members, {n_ex} excluded by the static budget, "
          f"{len(corpus['items'])} to verify", file=sys.stderr, flush=True)

    def say(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    stopped, started = False, 0
    if a.workers > 1:
        stopped, started = run_parallel(raw_argv, workers=a.workers, checkpoint=checkpoint, out=out, log=say)
    summary = run(corpus, out, checkpoint=checkpoint, profiles=a.profiles.split(","), device=a.device,
                  seed=a.seed, budget_s=a.budget_s, deadline=_deadline(a.stop_after_s, a.stop_at),
                  kb_commit=C.kb_commit(a.kb_root), ref_memory_mb=a.ref_memory_mb, memory_mb=a.memory_mb, log=say,
                  reference_device=a.reference_device, collect_only=a.workers > 1, stopped_early=stopped,
                  started=started)
    say(json.dumps(summary["by_kind"], sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
