"""One H200 lease, end to end: the latency benchmark, then the leaderboard corpus audited by Lethe (three profiles
from one candidate run, extensions built once in a pool) and judged by KernelBench's own check and our replicas.

Every step is a command of the package (``lethe.audit.latency``, ``lethe audit``, ``lethe.kernelbench.real``);
this driver only orders them, logs, and records each step's wall time and exit code in ``RUN/state.json`` so that
a step already done is skipped when the driver is started again (the device's calls last ten minutes; the driver
runs detached across them). Usage on the GPU machine::

    python experiments/audit/replicate_h200.py --run /tmp/lethe-run --kb .scratch/kb --raw .scratch/lb/raw_data.json

``collect`` packs the results (rows, summaries, timings, provenance; never a candidate source) for the way back.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path

PROFILES = "strict,cuda-default,fast-math"


def _state(run: Path) -> dict:
    try:
        return json.loads((run / "state.json").read_text())
    except (OSError, ValueError):
        return {}


def _save(run: Path, state: dict) -> None:
    tmp = run / ".state.json.tmp"
    tmp.write_text(json.dumps(state, indent=1, sort_keys=True))
    os.replace(tmp, run / "state.json")


def step(run: Path, name: str, cmd: list[str], *, timeout_s: float | None = None, redo: bool = False) -> int:
    state = _state(run)
    if not redo and state.get(name, {}).get("rc") == 0:
        return 0
    log = open(run / f"{name}.log", "ab")
    print(f"[{time.strftime('%H:%M:%S')}] {name}: {' '.join(cmd)}", flush=True)
    t0 = time.time()
    state[name] = {"started": t0, "cmd": cmd}
    _save(run, state)
    try:
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s).returncode
    except subprocess.TimeoutExpired:
        rc = -9
    state = _state(run)
    state[name].update(rc=rc, wall_s=round(time.time() - t0, 1))
    _save(run, state)
    print(f"[{time.strftime('%H:%M:%S')}] {name}: rc={rc} in {time.time() - t0:.0f} s", flush=True)
    return rc


def build_map(items: list[dict], path: Path) -> None:
    """id -> the kernel's extension build root, for KernelBench's ``build_dir`` (reuses our builds)."""
    from lethe.sandbox import extensions

    store = extensions.store_root(None, extensions.arch_list("cuda"))
    path.write_text(json.dumps({it["id"]: str(extensions.ext_root(store, it["candidate"]))
                                for it in items if it.get("candidate")}, indent=0, sort_keys=True))


def mixed_run(lb: Path, kb: str, out: Path, n_cuda: int, n_self: int) -> dict:
    """A KernelBench run folder mixing the first ``n_cuda`` leaderboard kernels of levels 1-2 (by SHA-256 of
    id, the order the latency benchmark samples in), every hand-written trusted kernel (sample 100) and the
    reference's own code as a candidate for ``n_self`` of those problems (sample 200): CUDA, Triton and PyTorch
    candidates that both judges see as the same pairs. Returns {id: origin}."""
    import hashlib
    import shutil

    from lethe.audit.batch import discover
    from lethe.trusted.corpus import hand_kernels, self_candidate

    out.mkdir(parents=True, exist_ok=True)
    origin = {}
    lbi = [it for it in discover(str(lb), kernelbench=kb) if it.get("candidate") and it["level"] in (1, 2)]
    for it in sorted(lbi, key=lambda it: hashlib.sha256(it["id"].encode()).hexdigest())[:n_cuda]:
        shutil.copy(it["cand_path"], out / Path(it["cand_path"]).name)
        origin[it["id"]] = "leaderboard"
    probs = []
    for k in hand_kernels():
        m = re.match(r"level(\d+)/(\d+)_", k["problem"])
        level, problem = int(m.group(1)), int(m.group(2))
        kid = f"level_{level}_problem_{problem}_sample_100"
        if kid in origin:
            continue
        (out / f"{kid}_kernel.py").write_text(k["candidate"], encoding="utf-8")
        origin[kid] = "hand-triton" if k["triton"] else "hand-pytorch"
        probs.append((level, problem, Path(kb) / "KernelBench" / k["problem"]))
    for level, problem, ref in sorted(set(probs))[:n_self]:
        kid = f"level_{level}_problem_{problem}_sample_200"
        (out / f"{kid}_kernel.py").write_text(self_candidate(ref.read_text(encoding="utf-8")), encoding="utf-8")
        origin[kid] = "self"
    (out / "origin.json").write_text(json.dumps(origin, indent=0, sort_keys=True))
    return origin


def slice_run(lb: Path, kb: str, out: Path, n: int, done: set[str], backends: tuple[str, ...] | None = None) -> list[str]:
    """A KernelBench run folder with the next ``n`` kernels not yet committed (lethe.audit.accumulate.next_slice);
    with ``backends``, only kernels whose detected backend (the corpus manifest's ``backend_detected``) is one of
    them (lethe.audit.accumulate.select_backends): a Triton slice needs no extension build."""
    import shutil

    from lethe.audit.accumulate import detected_backends, next_slice, select_backends
    from lethe.audit.batch import discover

    out.mkdir(parents=True, exist_ok=True)
    items = discover(str(lb), kernelbench=kb)
    if backends:
        items = select_backends(items, detected_backends(lb / "manifest.jsonl"), backends)
    todo = next_slice(items, n, done)
    for it in todo:
        shutil.copy(it["cand_path"], out / Path(it["cand_path"]).name)
    return [it["id"] for it in todo]


def prune_unbuilt(target: Path, kb: str, work: Path, spill: Path) -> list[str]:
    """Move the kernels the build budget left unbuilt out of ``target`` (KernelBench's check and the audit then
    judge only kernels whose build outcome is known, and compile nothing); the next call takes them."""
    from lethe.audit.accumulate import unbuilt
    from lethe.audit.batch import _cuda_items, discover

    items = _cuda_items(discover(str(target), kernelbench=kb))
    moved = unbuilt(items, work)
    spill.mkdir(parents=True, exist_ok=True)
    for it in items:
        if it["id"] in moved:
            Path(it["cand_path"]).rename(spill / Path(it["cand_path"]).name)
    return moved


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", required=True)
    ap.add_argument("--kb", required=True, help="KernelBench copy at 48642c5c (src/ and KernelBench/)")
    ap.add_argument("--raw", required=True, help="the leaderboard's raw_data.json")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--build-workers", type=int, default=8)
    ap.add_argument("--kb-workers", type=int, default=4)
    ap.add_argument("--kill-after", type=float, default=120.0, help="first audit attempt is SIGKILLed after this")
    ap.add_argument("--sakana", default="", help="the second corpus's subset.jsonl (skipped when empty)")
    ap.add_argument("--trusted-s", type=float, default=240.0, help="wall budget of the trusted corpus's H200 column")
    ap.add_argument("--subset", type=int, default=0, help="audit a mixed folder with this many leaderboard kernels")
    ap.add_argument("--n-self", type=int, default=10, help="reference-as-candidate kernels in the mixed folder")
    ap.add_argument("--slice", type=int, default=0,
                    help="audit the next this many leaderboard kernels (SHA-256-of-id order) not in --done")
    ap.add_argument("--corpus", default="leaderboard",
                    help="with --slice: leaderboard, or a KernelBench-runs corpus (hzeng-backends, ...)")
    ap.add_argument("--corpus-src", default="",
                    help="with a KernelBench-runs --corpus: a hand-supplied checkout at its pinned commit")
    ap.add_argument("--backends", default="", help="with --slice: only kernels of these detected backends (comma-separated)")
    ap.add_argument("--done", default="", help="committed rows.parquet whose kernel ids --slice skips")
    ap.add_argument("--build-budget-s", type=float, default=0.0,
                    help="no extension build starts after this many seconds; kernels left unbuilt wait for the next call")
    ap.add_argument("--lat-n", type=int, default=10, help="latency benchmark: kernels of each kind")
    ap.add_argument("--lat-steps", default="build,cold,warm,phases,kb,batch")
    ap.add_argument("--reference-device", default="auto", choices=["auto", "cpu", "cuda"],
                    help="where the float64 references run, in the audits and the latency benchmark")
    ap.add_argument("--skip", default="", help="comma-separated steps to skip")
    ap.add_argument("--collect", default="", help="only pack the results into this tar.gz")
    a = ap.parse_args(argv)
    from lethe.audit import accumulate as A

    try:
        backends = A.parse_backends(a.backends)
    except ValueError as exc:
        ap.error(f"--backends: {exc}")
    if backends and not a.slice:
        ap.error("--backends selects the kernels of a --slice")
    run = Path(a.run)
    run.mkdir(parents=True, exist_ok=True)
    if a.collect:
        return collect(run, Path(a.collect))
    skip = set(a.skip.split(","))
    py = sys.executable
    lb = run / "lb"
    step(run, "materialise", [py, "-m", "lethe.corpora.leaderboard", "materialise", "--out", str(lb), "--raw", a.raw,
                              "--kb", a.kb])
    problems = a.kb  # where the audit and KernelBench's check read each kernel's reference
    if a.corpus != "leaderboard":  # a corpus of KernelBench runs (lethe.corpora.kbruns): its own problem files
        src = run / "src"
        step(run, "materialise_corpus", [py, "-m", f"lethe.corpora.{a.corpus.replace('-', '_')}", "materialise",
                                         "--out", str(src)] + (["--src", a.corpus_src] if a.corpus_src else []))
        lb, problems = src / "run", str(src / "problems")
    target = lb
    if a.slice:
        target = run / "slice"
        if "slice" not in _state(run):
            ids = slice_run(lb, problems, target, a.slice, A.audited_ids(a.done), backends)
            state = _state(run)
            state["slice"] = {"rc": 0, "kernels": len(ids), "ids": ids, "skipped_done": len(A.audited_ids(a.done))}
            _save(run, state)
    elif a.subset:
        target = run / "mixed"
        if "mixed" not in _state(run):
            origin = mixed_run(lb, a.kb, target, a.subset, a.n_self)
            state = _state(run)
            state["mixed"] = {"rc": 0, "kernels": len(origin)}
            _save(run, state)
    audit = [py, "-m", "lethe.cli", "audit", str(target), "--kernelbench", problems, "--profiles", PROFILES,
             "--workers", str(a.workers), "--build-workers", str(a.build_workers), "--device", "cuda", "--corpus",
             "mixed" if a.subset and not a.slice else a.corpus, "--out", str(run / "out" / "audit"), "--quiet",
             "--reference-device", a.reference_device]
    from lethe.audit.batch import discover

    build_map(discover(str(target), kernelbench=problems), run / "buildmap.json")

    def kernelbench(impl: str) -> None:
        if f"kb_{impl}" not in skip:
            step(run, f"kb_{impl}", [py, "-m", "lethe.kernelbench.real", "judge", str(target), "--checkout", a.kb,
                                     "--problems", problems,
                                     "--impl", impl, "--out", str(run / "out" / f"kb-{impl}"), "--workers",
                                     str(a.kb_workers), "--build-dir-map", str(run / "buildmap.json"), "--quiet"])

    if "build" not in skip:
        if a.build_budget_s and "build" not in _state(run):
            os.environ["LETHE_BUILD_DEADLINE"] = str(time.time() + a.build_budget_s)
        step(run, "build", audit + ["--build-only"])
        os.environ.pop("LETHE_BUILD_DEADLINE", None)
        if a.slice and "prune" not in _state(run):
            moved = prune_unbuilt(target, problems, run / "out" / "audit" / "work", run / "slice-unbuilt")
            state = _state(run)
            state["prune"] = {"rc": 0, "unbuilt": moved}
            _save(run, state)
            build_map(discover(str(target), kernelbench=problems), run / "buildmap.json")
    kernelbench("real")
    if "audit" not in skip:
        audit[audit.index("--build-workers") + 1] = "0"
        # The resume test: the first attempt is killed with SIGKILL mid-run; the same command then finishes it.
        if "audit_killed" not in _state(run) and "audit_killed" not in skip:
            step(run, "audit_killed", audit, timeout_s=a.kill_after)
        step(run, "audit", audit)
    if "latency" not in skip:
        step(run, "latency", [py, "-m", "lethe.audit.latency", "--out", str(run / "out" / "latency.json"),
                              "--lb-dir", str(lb), "--kb-root", a.kb, "--kb-src", a.kb, "--n-cuda",
                              str(a.lat_n), "--n-torch", str(a.lat_n), "--n-phases", "2", "--n-kb", "2",
                              "--build-workers", str(a.build_workers), "--steps", a.lat_steps,
                              "--reference-device", a.reference_device])
    if "mamba" not in skip:
        step(run, "mamba_gpu", [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/kernels/mamba/test_mamba_gpu.py"],
             timeout_s=150)
    kernelbench("replica-paper")
    kernelbench("replica-hardened")
    if "sakana" not in skip and a.sakana:
        sk = run / "sakana"
        step(run, "sakana_materialise", [py, "-m", "lethe.corpora.sakana", "materialise", a.sakana, str(sk)])
        sk_audit = [py, "-m", "lethe.cli", "audit", str(sk / "run"), "--kernelbench", str(sk / "problems"),
                    "--profiles", PROFILES, "--workers", str(a.workers), "--build-workers", str(a.build_workers),
                    "--device", "cuda", "--corpus", "sakana", "--out", str(run / "out" / "audit-sakana"), "--quiet",
                    "--reference-device", a.reference_device]
        step(run, "sakana_audit", sk_audit)
        build_map(discover(str(sk / "run"), kernelbench=str(sk / "problems")), run / "buildmap-sakana.json")
        step(run, "sakana_kb_real", [py, "-m", "lethe.kernelbench.real", "judge", str(sk / "run"), "--checkout",
                                     a.kb, "--problems", str(sk / "problems"), "--impl", "real", "--out",
                                     str(run / "out" / "kb-real-sakana"), "--workers", str(a.kb_workers),
                                     "--build-dir-map", str(run / "buildmap-sakana.json"), "--quiet"])
    if "trusted" not in skip:
        step(run, "trusted", [py, "-m", "lethe.trusted.run", "--device", "cuda", "--kb-root", a.kb, "--out",
                              str(run / "out" / "trusted-h200"), "--checkpoint", str(run / "trusted-ck.jsonl"),
                              "--stop-after-s", str(a.trusted_s)])
    print("driver done", flush=True)
    return 0


def collect(run: Path, dest: Path) -> int:
    """Rows, summaries, timings, provenance, build outcomes and logs; never a candidate source or a build."""
    def wanted(rel: Path) -> bool:
        if rel.parts[0] in ("lb", "src"):
            return rel.name == "manifest.jsonl"
        if "work" in rel.parts:
            # Checkpoints too: an audit cut short by the lease still brings back every row it finished.
            return rel.suffix in (".jsonl", ".log", ".attempts") or rel.name == "spec.json"
        return rel.suffix in (".json", ".jsonl", ".parquet", ".log")

    with tarfile.open(dest, "w:gz") as tar:
        for p in sorted(run.rglob("*")):
            rel = p.relative_to(run)
            if p.is_file() and wanted(rel):
                tar.add(p, arcname=str(rel))
    print(f"packed {dest} ({dest.stat().st_size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
