"""``lethe audit``: verify a folder of kernels with one command, in parallel, resumably.

Layouts it reads (:func:`discover`):

* **pairs** -- ``DIR/<name>/ref.py`` + ``DIR/<name>/cand.py`` (one problem per folder; the red-team layout);
* **one reference** -- ``--ref REF.py DIR``: every ``DIR/*.py`` is a candidate for that reference;
* **KernelBench runs** -- ``--kernelbench KB DIR``: the generated files
  ``DIR/level_<L>_problem_<P>_sample_<S>_kernel.py`` of a KernelBench run, each paired with the problem file
  ``KB/level<L>/<P>_*.py`` of a KernelBench checkout (``KB`` may also be the checkout's root, holding
  ``KernelBench/level<L>``). KernelBench numbers its problem files from 1; ``--problem-base 0`` reads runs
  whose problem ids count from 0.

Work is split over ``--workers`` processes (``--gpus 0,1,...`` gives each worker one device, round robin); each
worker verifies its slice through :func:`lethe.audit.shard.run_shard`, whose fsynced JSONL checkpoint and
attempt markers make the run resumable: kill it (even with SIGKILL) and run the same command again, and it
verifies exactly what has no row yet; no row is lost or duplicated. Workers die with the command
(``PR_SET_PDEATHSIG``) and hold a lock on their checkpoint, so a restarted command never races an old worker.

Outputs in ``--out``: ``rows.parquet`` and ``rows.jsonl`` (verdict rows, one per kernel and profile, sorted
by id), ``summary.jsonl`` (per kernel: KernelBench's own two fields, ``compiled`` and ``correctness``, and
Lethe's verdict and failed gates), and ``work/`` (checkpoints). ``correctness`` here is Lethe's CMP-01 value
gate under the first profile -- the closest analogue of KernelBench's allclose check, not KernelBench's
check itself (which ``lethe.kernelbench`` runs).
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

KB_KERNEL = re.compile(r"^level_(\d+)_problem_(\d+)_sample_(\d+)_kernel\.py$")


class LayoutError(ValueError):
    """The folder does not look like any supported layout (the message says what was expected)."""


def _read(path: Path) -> str:
    from lethe.verifier.reference import read_source

    return read_source(path)


def _kb_problem_dirs(kb: Path) -> Path:
    for cand in (kb, kb / "KernelBench"):
        if any((cand / f"level{i}").is_dir() for i in (1, 2, 3)):
            return cand
    raise LayoutError(f"{kb} holds no level1/level2/level3 folder of KernelBench problems")


def discover(root: str | os.PathLike, *, ref: str | None = None, kernelbench: str | None = None,
             problem_base: int = 1) -> list[dict[str, Any]]:
    """The items of one folder, sorted by id: {id, reference, candidate, ref_path, cand_path[, level, problem,
    sample]}. Raises LayoutError when nothing matches the layout asked for."""
    root = Path(root)
    if not root.is_dir():
        raise LayoutError(f"{root} is not a directory")
    items: list[dict[str, Any]] = []
    if kernelbench:
        probs = _kb_problem_dirs(Path(kernelbench))
        index: dict[tuple[int, int], Path] = {}
        for level_dir in sorted(probs.glob("level*")):
            m = re.match(r"level(\d+)$", level_dir.name)
            if not m:
                continue
            for f in level_dir.glob("*.py"):
                head = f.name.split("_", 1)[0]
                if head.isdigit():
                    index[(int(m.group(1)), int(head))] = f
        for f in sorted(root.iterdir()):
            m = KB_KERNEL.match(f.name)
            if not m:
                continue
            level, problem, sample = (int(x) for x in m.groups())
            prob = index.get((level, problem + (1 - problem_base)))
            item = {"id": f"level_{level}_problem_{problem}_sample_{sample}", "level": level, "problem": problem,
                    "sample": sample, "cand_path": str(f)}
            if prob is None:
                item.update(reference="", candidate="", extract_error=f"no KernelBench problem file for level "
                            f"{level} problem {problem} (problem ids counted from {problem_base})")
            else:
                item.update(ref_path=str(prob), reference=_read(prob), candidate=_read(f))
            items.append(item)
        if not items:
            raise LayoutError(f"{root} holds no level_<L>_problem_<P>_sample_<S>_kernel.py files")
    elif ref:
        ref_src = _read(Path(ref))
        for f in sorted(root.glob("*.py")):
            items.append({"id": f.stem, "ref_path": str(ref), "cand_path": str(f), "reference": ref_src,
                          "candidate": _read(f)})
        if not items:
            raise LayoutError(f"{root} holds no candidate *.py files")
    else:
        for d in sorted(p for p in root.iterdir() if p.is_dir()):
            if (d / "ref.py").is_file() and (d / "cand.py").is_file():
                items.append({"id": d.name, "ref_path": str(d / "ref.py"), "cand_path": str(d / "cand.py"),
                              "reference": _read(d / "ref.py"), "candidate": _read(d / "cand.py")})
        if not items:
            raise LayoutError(f"{root} holds no <name>/ref.py + <name>/cand.py folders (for one reference and a "
                              f"folder of candidates use --ref; for a KernelBench run use --kernelbench)")
    ids = [it["id"] for it in items]
    if len(set(ids)) != len(ids):
        raise LayoutError("two items have the same id")
    return items


def summary_line(rows: list[dict], item: dict) -> dict[str, Any]:
    """The per-kernel summary: KernelBench's fields plus Lethe's verdict (see the module docstring)."""
    from lethe.verifier import api

    first = rows[0]
    out = {"id": item["id"], "compiled": first["status"] not in ("compile_fail", "no_candidate"),
           "correctness": first["status"] == "gated" and first["gates"]["CMP-01"]["status"] == "pass",
           "lethe_verdict": {r["profile"]: api.verdict(r) for r in rows},
           "failed_gates": {r["profile"]: sorted(g for g, v in r["gates"].items() if v["status"] in ("fail", "error"))
                            for r in rows}}
    for k in ("level", "problem", "sample"):
        if k in item:
            out[k] = item[k]
    return out


def _pdeathsig() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)
    except Exception:  # noqa: BLE001 - not Linux: workers may outlive a killed command
        pass


def _count_rows(path: Path) -> int:
    try:
        with open(path, "rb") as fh:
            return sum(1 for line in fh if line.strip().startswith(b"{") and line.rstrip().endswith(b"}"))
    except OSError:
        return 0


def run(root: str, out: str, *, ref: str | None = None, kernelbench: str | None = None, problem_base: int = 1,
        workers: int = 1, gpus: list[str] | None = None, profiles: list[str] = ("strict",), device: str = "auto",
        seed: int = 0, timeout_s: float = 300.0, corpus: str = "", progress: bool = True,
        build_workers: int = 0, build_only: bool = False, reference_device: str = "auto") -> dict[str, Any]:
    """Audit one folder; returns {"rows": n, "kernels": n, "out": path}.

    On a GPU, ``build_workers`` > 0 first builds every CUDA candidate's extensions in a parallel pool
    (:func:`build_extensions`); without it each kernel's own verification builds it (once: the store keeps it)."""
    items = discover(root, ref=ref, kernelbench=kernelbench, problem_base=problem_base)
    out_dir = Path(out)
    work = out_dir / "work"
    work.mkdir(parents=True, exist_ok=True)
    spec = {"root": str(root), "ref": ref, "kernelbench": kernelbench, "problem_base": problem_base,
            "profiles": list(profiles), "device": device, "seed": seed, "timeout_s": timeout_s,
            "corpus": corpus or Path(root).name, "reference_device": reference_device}
    (work / "spec.json").write_text(json.dumps(spec, sort_keys=True, indent=1))
    if build_workers and _resolved_device(device) == "cuda":
        build_extensions(items, work, workers=build_workers, gpus=gpus, progress=progress)
    if build_only:
        return {"rows": 0, "kernels": len(items), "out": str(out_dir), "builds": build_outcomes(work)}
    n = max(1, min(int(workers), len(items)))
    procs = []
    for i in range(n):
        env = worker_env(i, gpus)
        procs.append(subprocess.Popen([sys.executable, "-m", "lethe.audit.batch", "--worker", f"{i}/{n}",
                                       str(work / "spec.json")], env=env, preexec_fn=_pdeathsig,
                                      stdout=subprocess.DEVNULL, stderr=open(work / f"worker-{i}.log", "ab")))
    total = len(items) * len(spec["profiles"])
    from tqdm import tqdm

    bar = tqdm(total=total, desc=f"lethe audit {spec['corpus']}", unit="row", disable=not progress, file=sys.stderr)
    try:
        while any(p.poll() is None for p in procs):
            done = sum(_count_rows(work / f"shard-{i}.jsonl") for i in range(n))
            bar.n = min(done, total)
            bar.refresh()
            time.sleep(0.5)
    except BaseException:
        for p in procs:
            p.kill()
        raise
    finally:
        bar.n = min(sum(_count_rows(work / f"shard-{i}.jsonl") for i in range(n)), total)
        bar.close()
    bad = [(i, p.returncode) for i, p in enumerate(procs) if p.returncode != 0]
    if bad:
        raise RuntimeError(f"audit worker(s) failed: {bad}; see {work}/worker-*.log; run the same command again "
                           f"to resume")
    return _gather(items, spec, work, out_dir, n)


def _resolved_device(device: str) -> str:
    from lethe.verifier.api import resolve_device

    return resolve_device(device)


def _cuda_items(items: list[dict]) -> list[dict]:
    from lethe.verifier.api import CUDA_SOURCE

    return [it for it in items if it.get("candidate") and CUDA_SOURCE.search(it["candidate"])]


def build_extensions(items: list[dict], work: Path, *, workers: int, gpus: list[str] | None = None,
                     progress: bool = True) -> dict[str, int]:
    """Build every CUDA candidate's extensions up front, ``workers`` sandboxed builds at a time (each with
    ``MAX_JOBS`` = cores / workers), so that verification only ever loads them. Outcomes go to
    ``work/builds-<i>.jsonl``; a build already in the store is not redone, so a restarted command resumes."""
    todo = _cuda_items(items)
    if not todo:
        return {"built": 0}
    n = max(1, min(int(workers), len(todo)))
    jobs = max(1, (os.cpu_count() or 2) // n)
    procs = []
    for i in range(n):
        env = worker_env(i, gpus, dict(os.environ, MAX_JOBS=str(jobs)))
        procs.append(subprocess.Popen([sys.executable, "-m", "lethe.audit.batch", "--build-worker", f"{i}/{n}",
                                       str(work / "spec.json")], env=env, preexec_fn=_pdeathsig,
                                      stdout=subprocess.DEVNULL, stderr=open(work / f"build-{i}.log", "ab")))
    from tqdm import tqdm

    bar = tqdm(total=len(todo), desc="building extensions", unit="kernel", disable=not progress, file=sys.stderr)
    try:
        while any(p.poll() is None for p in procs):
            bar.n = min(sum(_count_rows(work / f"builds-{i}.jsonl") for i in range(n)), len(todo))
            bar.refresh()
            time.sleep(0.5)
    except BaseException:
        for p in procs:
            p.kill()
        raise
    finally:
        bar.close()
    bad = [(i, p.returncode) for i, p in enumerate(procs) if p.returncode != 0]
    if bad:
        raise RuntimeError(f"build worker(s) failed: {bad}; see {work}/build-*.log; run the same command again")
    return {"built": len(todo)}


def build_outcomes(work: Path) -> dict[str, int]:
    """Counts over the build log of a run folder: built, failed, cached (latest line per kernel)."""
    latest: dict[str, dict] = {}
    for f in sorted(Path(work).glob("builds-*.jsonl")):
        for line in f.read_text(encoding="utf-8").splitlines():
            try:
                r = json.loads(line)
            except ValueError:
                continue
            latest[r["id"]] = r
    return {"kernels": len(latest), "ok": sum(bool(r["ok"]) for r in latest.values()),
            "failed": sum(not r["ok"] for r in latest.values()),
            "cached": sum(bool(r.get("cached")) for r in latest.values())}


def _build_worker(slot: str, spec_path: str) -> int:
    from lethe.sandbox import extensions, run_isolated

    i, n = (int(x) for x in slot.split("/"))
    spec = json.loads(Path(spec_path).read_text())
    work = Path(spec_path).parent
    items = _cuda_items(discover(spec["root"], ref=spec["ref"], kernelbench=spec["kernelbench"],
                                 problem_base=spec["problem_base"]))[i::n]
    # A wall budget for the whole pool (LETHE_BUILD_DEADLINE, a Unix time): no build starts after it, the ones
    # running finish, so a budgeted device call ends with every started build either done or failed.
    deadline = float(os.environ.get("LETHE_BUILD_DEADLINE") or "inf")
    with open(work / f"builds-{i}.jsonl", "a", encoding="utf-8") as log:
        for it in items:
            if time.time() > deadline:
                break
            t0 = time.perf_counter()
            root, marker, res = extensions.ensure_built(it["candidate"], runner=run_isolated, device="cuda",
                                                        timeout_s=spec.get("build_timeout_s", 900.0),
                                                        jobs=int(os.environ.get("MAX_JOBS", "0")) or None)
            log.write(json.dumps({"id": it["id"], "ok": marker["ok"], "cached": res is None,
                                  "build_seconds": round(marker.get("seconds", 0.0), 3),
                                  "wall_seconds": round(time.perf_counter() - t0, 3), "root": str(root),
                                  "error": marker.get("error", "")[:300]}, sort_keys=True) + "\n")
            log.flush()
            os.fsync(log.fileno())
    return 0


def worker_env(i: int, gpus: list[str] | None, base: dict[str, str] | None = None) -> dict[str, str]:
    """Worker ``i``'s environment: ``base`` (this process's) with one device of ``gpus`` (round robin) made the
    only visible one, so each worker and its sandboxed children use one GPU; None leaves visibility alone."""
    env = dict(os.environ if base is None else base)
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = gpus[i % len(gpus)]
    return env


def _gather(items, spec, work: Path, out_dir: Path, n: int, complete_only: bool = False) -> dict[str, Any]:
    """rows.parquet, rows.jsonl and summary.jsonl from the workers' checkpoints. A kernel without a row for
    every profile is an unfinished run (resume it), unless ``complete_only``: then it is left out and named
    under ``incomplete`` (for the rows a run cut short by its time limit did finish)."""
    from lethe.audit import shard

    latest: dict[tuple[str, str], dict] = {}
    for i in range(n):
        for r in shard.read_checkpoint(work / f"shard-{i}.jsonl"):
            latest[(str(r["id"]), r.get("profile"))] = r
    rows = []
    summary = []
    incomplete: list[str] = []
    for it in items:
        mine = [latest[(it["id"], p)] for p in spec["profiles"] if (it["id"], p) in latest]
        if len(mine) != len(spec["profiles"]):
            if complete_only:
                incomplete.append(it["id"])
                continue
            raise RuntimeError(f"no row for {it['id']}: run the same command again to resume")
        rows += mine
        summary.append(summary_line([shard.complete_row(r) for r in mine], it))
    shard.write_parquet(rows, out_dir / "rows.parquet")
    _write_lines(out_dir / "rows.jsonl", [shard.complete_row(r) for r in rows])
    _write_lines(out_dir / "summary.jsonl", summary)
    out = {"rows": len(rows), "kernels": len(items) - len(incomplete), "out": str(out_dir)}
    return {**out, "incomplete": incomplete} if complete_only else out


def gather_finished(work: str | Path, root: str, *, kernelbench: str | None = None, out: str | Path) -> dict:
    """The rows of an audit whose workers were stopped (a device call's time limit): every kernel with all its
    profiles' rows in the checkpoints of ``work`` (a ``lethe audit`` output's ``work/``), read against the same
    candidate folder ``root``, written to ``out`` as a finished audit writes them."""
    work = Path(work)
    spec = json.loads((work / "spec.json").read_text())
    items = discover(root, ref=spec["ref"], kernelbench=kernelbench or spec["kernelbench"],
                     problem_base=spec["problem_base"])
    n = 1 + max((int(f.name[6:-6]) for f in work.glob("shard-*.jsonl") if f.name[6:-6].isdigit()), default=-1)
    Path(out).mkdir(parents=True, exist_ok=True)
    return _gather(items, spec, work, Path(out), n, complete_only=True)


def _write_lines(path: Path, objs: list[dict]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        for o in objs:
            fh.write(json.dumps(o, sort_keys=True) + "\n")
    os.replace(tmp, path)


def _worker(slot: str, spec_path: str) -> int:
    from lethe.audit import shard

    i, n = (int(x) for x in slot.split("/"))
    spec = json.loads(Path(spec_path).read_text())
    work = Path(spec_path).parent
    items = discover(spec["root"], ref=spec["ref"], kernelbench=spec["kernelbench"],
                     problem_base=spec["problem_base"])[i::n]
    lock = open(work / f"shard-{i}.lock", "a")
    # A worker of an earlier, killed command may still be finishing its kernel: wait for it, never race it.
    fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
    import functools

    from lethe.verifier.api import verify_profiles

    # A spec written before the option existed names none: the default ("auto").
    verify_many = functools.partial(verify_profiles, reference_device=spec.get("reference_device", "auto"))
    shard.run_shard(items, work / f"shard-{i}.jsonl", verify_fn=shard.default_verify(),
                    verify_many_fn=verify_many, profiles=spec["profiles"],
                    device=spec["device"], seed=spec["seed"], timeout_s=spec["timeout_s"], corpus=spec["corpus"],
                    shard_label=f"{i}/{n}", progress=False)
    return 0


def add_subcommand(sub) -> None:
    a = sub.add_parser("audit", help="verify a folder of kernels (pairs, one reference, or a KernelBench run)",
                       description=__doc__.split("\n\n")[0])
    a.add_argument("dir", help="the folder of kernels")
    a.add_argument("--out", required=True, help="output folder (rows.parquet, rows.jsonl, summary.jsonl, work/)")
    a.add_argument("--ref", default=None, help="one reference for every DIR/*.py candidate")
    a.add_argument("--kernelbench", default=None, help="KernelBench problems folder (or checkout root)")
    a.add_argument("--problem-base", type=int, default=1, choices=[0, 1],
                   help="the first problem id of the run's file names (KernelBench's own files: 1)")
    a.add_argument("--workers", type=int, default=1)
    a.add_argument("--build-workers", type=int, default=None,
                   help="parallel extension builds before verification (GPU only; default: cores // 4, 0: off)")
    a.add_argument("--gpus", default="", help="comma-separated device ids, one per worker round robin")
    a.add_argument("--build-only", action="store_true", help="only build the CUDA candidates' extensions")
    a.add_argument("--profiles", default="strict")
    a.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    a.add_argument("--reference-device", default="auto", choices=["auto", "cpu", "cuda"],
                   help="where each float64 reference runs (auto: on CUDA when the candidates do, else the CPU)")
    a.add_argument("--seed", type=int, default=0)
    a.add_argument("--timeout", type=float, default=300.0)
    a.add_argument("--corpus", default="")
    a.add_argument("--quiet", action="store_true", help="no progress bar")
    a.set_defaults(func=_cmd)


def _cmd(args) -> int:
    from lethe.verifier.verdict import EXIT_NOT_AUDITABLE, EXIT_PASS, EXIT_USAGE, EXIT_VIOLATION

    try:
        res = run(args.dir, args.out, ref=args.ref, kernelbench=args.kernelbench, problem_base=args.problem_base,
                  workers=args.workers, gpus=[g for g in args.gpus.split(",") if g] or None,
                  profiles=[p for p in args.profiles.split(",") if p], device=args.device, seed=args.seed,
                  timeout_s=args.timeout, corpus=args.corpus, progress=not args.quiet,
                  build_workers=max(1, (os.cpu_count() or 4) // 4) if args.build_workers is None
                  else args.build_workers, build_only=args.build_only, reference_device=args.reference_device)
    except (LayoutError, FileNotFoundError) as exc:
        print(f"lethe audit: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.build_only:
        print(f"{res['kernels']} kernels: extension builds {json.dumps(res['builds'], sort_keys=True)}")
        return EXIT_PASS
    lines = [json.loads(x) for x in Path(res["out"], "summary.jsonl").read_text().splitlines()]
    passed = sum(1 for s in lines if all(v == "pass" for v in s["lethe_verdict"].values()))
    print(f"{res['kernels']} kernels, {res['rows']} rows: {passed} pass every applicable gate; "
          f"{sum(s['compiled'] for s in lines)} compiled, {sum(s['correctness'] for s in lines)} pass CMP-01; "
          f"rows in {res['out']}/rows.parquet")
    if passed == len(lines):
        return EXIT_PASS
    statuses = {json.loads(x)["status"] for x in Path(res["out"], "rows.jsonl").read_text().splitlines()}
    return EXIT_VIOLATION if statuses - {"ref_broken", "not_auditable"} else EXIT_NOT_AUDITABLE


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "--worker":
        sys.exit(_worker(sys.argv[2], sys.argv[3]))
    if len(sys.argv) >= 4 and sys.argv[1] == "--build-worker":
        sys.exit(_build_worker(sys.argv[2], sys.argv[3]))
    ap = argparse.ArgumentParser(prog="python -m lethe.audit.batch")
    add_subcommand(ap.add_subparsers(dest="command", required=True))
    ns = ap.parse_args(["audit", *sys.argv[1:]])
    sys.exit(ns.func(ns))
