"""Turn the H200 driver's packed run (experiments/audit/replicate_h200.py --collect) into committed results.

    python experiments/audit/ingest_h200.py RUN.tar.gz [--corpus mixed]

Writes (never a candidate source):

* ``results/tool/latency/latency.json`` + ``provenance.json`` -- the latency benchmark, with the batch
  throughput of the corpus audit (8 workers, builds done) added under ``batch``;
* ``results/audit/<corpus>/`` -- verdict rows (parquet), the per-kernel summary, the build log, each kernel's
  origin, the kill -9 resume facts, provenance;
* ``results/differential/<corpus>/kb_real/<impl>/`` -- KernelBench's own check and our replicas on the same
  kernels (rows, timing, summary, provenance), the real-vs-replica agreement files and the 2x2 of KernelBench's
  real check against the battery (``real_vs_battery.json``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections import Counter
from pathlib import Path

from lethe.audit import accumulate as A

ROOT = Path(__file__).resolve().parents[2]


def _lines(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def _outcomes(rows: list[dict]) -> dict:
    """KernelBench's outcome classes with their distinct details (why it rejected what it rejected)."""
    out: dict = {}
    for r in rows:
        o = out.setdefault(str(r.get("outcome")), {"kernels": 0, "details": []})
        o["kernels"] += 1
        d = str(r.get("detail") or "")[:160]
        if d and d not in o["details"]:
            o["details"].append(d)
    return dict(sorted(out.items()))


def _write_json(path: Path, doc) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")


def device_provenance(rows: list[dict], state: dict, run_commit: str, command: str, ingested: dict,
                      env: dict | None = None) -> dict:
    """The run's provenance as the device saw it: its libraries and GPU from the rows' ``environment`` (the
    verifier records them per row), the commit whose working tree the device ran, the steps' exit codes and
    times; the ingesting machine is named apart. Without rows, ``env`` (the same libraries/gpu blocks, e.g. from
    the latency benchmark's own provenance) says what the device was."""
    env = json.loads(rows[0]["environment"]) if rows else (env or {})
    lib = env.get("libraries", {})
    gpu = env.get("gpu", {})
    return {"schema": "lethe.provenance/1", "git_sha": run_commit, "host": "device machine (nvidia-h200)",
            "gpu": gpu.get("gpu"), "capability": gpu.get("capability"), "cuda_runtime": gpu.get("cuda_runtime"),
            "python": lib.get("python"), "torch": lib.get("torch"), "triton": lib.get("triton"),
            "numpy": lib.get("numpy"), "command": command, "utc_time": ingested["utc_time"],
            "verifier_code": env.get("verifier_code"),
            "steps": {k: {kk: v.get(kk) for kk in ("rc", "wall_s")} for k, v in state.items()},
            "ingested_on": {k: ingested.get(k) for k in ("git_sha", "host", "platform", "utc_time")}}


def preregistered(out_a: Path, sources: str, kb: str) -> dict:
    """The pre-registered robustness test on the committed rows; the fast-math flags are read from the run
    folder's candidate sources on this machine (they are never committed)."""
    from lethe.audit import preregistered as PR
    from lethe.audit.batch import discover
    from lethe.verifier.records import read_rows

    rows = read_rows(out_a / "rows.parquet")
    srcs = {it["id"]: it["candidate"] for it in discover(sources, kernelbench=kb)}
    missing = sorted({str(r["id"]) for r in rows} - set(srcs))
    if missing:
        raise SystemExit(f"--sources lacks {len(missing)} kernel(s) of the rows, e.g. {missing[0]}")
    res = PR.evaluate(rows, {i: PR.fast_math_compiled(src) for i, src in srcs.items()}, require_accepted=False)
    res["fast_math_source"] = "candidate sources of the same run folder, read on the ingesting machine"
    _write_json(out_a / "preregistered.json", res)
    return res


def ingest(tar_path: str, corpus: str = "mixed", run_commit: str = "unknown", sources: str = "",
           kb: str = "", merge: bool = False) -> dict:
    from lethe import provenance

    tmp = Path(tempfile.mkdtemp(prefix="lethe-ingest-"))
    with tarfile.open(tar_path) as tar:
        tar.extractall(tmp, filter="data")
    state = json.loads((tmp / "state.json").read_text())
    done = {}

    audit = tmp / "out" / "audit"
    out_a = ROOT / "results" / "audit" / corpus
    if merge and sources and not (audit / "rows.parquet").is_file() and (audit / "work" / "spec.json").is_file():
        # The call's time ran out during the audit: keep every kernel whose rows (all profiles) were finished.
        from lethe.audit.batch import gather_finished

        fin = gather_finished(audit / "work", sources, kernelbench=kb or None, out=audit)
        last = max((f.stat().st_mtime for f in (audit / "work").glob("shard-*.jsonl")), default=None)
        if last and state.get("audit", {}).get("started"):
            state["audit"]["wall_s_to_last_row"] = round(last - state["audit"]["started"], 1)
        judged = set(state.get("slice", {}).get("ids", [])) - set(state.get("prune", {}).get("unbuilt", []))
        state.setdefault("audit", {})["unfinished"] = sorted(set(fin["incomplete"]) & judged)
    if (audit / "rows.parquet").is_file():
        out_a.mkdir(parents=True, exist_ok=True)
        builds = [{k: r[k] for k in sorted(r) if k != "root"}
                  for f in sorted((audit / "work").glob("builds-*.jsonl")) for r in _lines(f)]
        if merge:
            from lethe.verifier.records import read_rows, write_rows

            old = read_rows(out_a / "rows.parquet") if (out_a / "rows.parquet").is_file() else []
            write_rows(A.merge_rows(old, read_rows(audit / "rows.parquet")), out_a / "rows.parquet")
            A.write_lines(out_a / "summary.jsonl", A.union_lines(_lines(out_a / "summary.jsonl"),
                                                                 _lines(audit / "summary.jsonl")))
            A.write_lines(out_a / "builds.jsonl", A.union_lines(_lines(out_a / "builds.jsonl"), builds))
        else:
            shutil.copy(audit / "rows.parquet", out_a / "rows.parquet")
            shutil.copy(audit / "summary.jsonl", out_a / "summary.jsonl")
            (out_a / "builds.jsonl").write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in builds))
        if (tmp / "mixed" / "origin.json").is_file():
            shutil.copy(tmp / "mixed" / "origin.json", out_a / "origin.json")
        rows = [json.loads(x) for x in (audit / "rows.jsonl").read_text().splitlines()]
        keys = [(r["id"], r["profile"]) for r in rows]
        killed, full = state.get("audit_killed", {}), state.get("audit", {})
        if merge:
            # One line per device call in the index; provenance.json is the newest call's, naming the others.
            prov = device_provenance(rows, state, run_commit, "experiments/audit/replicate_h200.py --slice",
                                     provenance.collect())
            prov.update(kernels=len({k for k, _ in keys}), rows=len(rows),
                        unbuilt_left_for_next_call=len(state.get("prune", {}).get("unbuilt", [])),
                        unfinished_audits_left_for_next_call=len(state.get("audit", {}).get("unfinished", [])),
                        builds=dict(sorted(Counter("ok" if b["ok"] else "failed" for b in builds).items())))
            prov["throughput"] = A.throughput(state, len(builds), len({k for k, _ in keys}),
                                            len(_lines(tmp / "out" / "kb-real" / "rows.jsonl")))
            with open(out_a / "runs.jsonl", "a", encoding="utf-8") as fh:
                fh.write(json.dumps(prov, sort_keys=True) + "\n")
            runs = _lines(out_a / "runs.jsonl")
            _write_json(out_a / "provenance.json", {**prov, "runs": len(runs),
                                                    "run_commits": sorted({r["git_sha"] for r in runs}),
                                                    "index": "runs.jsonl (one line per device call)"})
        else:
            ck_lines = sum(len(_lines(f)) for f in (audit / "work").glob("shard-*.jsonl"))
            _write_json(out_a / "resume.json", {
                "first_attempt": {"rc": killed.get("rc"), "wall_s": killed.get("wall_s"),
                                  "killed_with": "SIGKILL (subprocess timeout)"},
                "second_attempt": {"rc": full.get("rc"), "wall_s": full.get("wall_s")},
                "rows": len(rows), "unique_rows": len(set(keys)), "kernels": len({k for k, _ in keys}),
                "checkpoint_lines": ck_lines, "build": state.get("build", {}).get("wall_s")})
            _write_json(out_a / "provenance.json", device_provenance(
                rows, state, run_commit, "experiments/audit/replicate_h200.py (steps build, audit_killed, audit)",
                provenance.collect()))
        done["audit"] = len(rows)
        if sources:
            done["preregistered"] = preregistered(out_a, sources, kb)["verdict"]

    lat = tmp / "out" / "latency.json"
    if lat.is_file():
        doc = json.loads(lat.read_text())
        a = state.get("audit", {})
        n = done.get("audit", 0) // 3 if done.get("audit") else 0
        if n and a.get("wall_s") is not None:
            wall = float(a["wall_s"]) + float(state.get("audit_killed", {}).get("wall_s") or 0.0)
            doc.setdefault("batch", {})["8"] = {"kernels": n, "wall_s": round(wall, 1),
                                                "per_kernel_s": round(wall / n, 3), "rc": a.get("rc"),
                                                "source": "the corpus audit (three profiles from one candidate "
                                                          "run; includes the kill -9 and restart)"}
        from lethe.audit.latency import summarise

        if state.get("latency", {}).get("rc") != 0:
            ks = doc.get("kernels", {}).values()
            got = {step: sum(1 for k in ks if step in k)
                   for step in ("cold", "warm", "served_warm", "phases", "kernelbench")}
            doc["status"] = (f"partial: the run ended during the latency step (finished: {got['cold']} cold, "
                             f"{got['warm']} warm, {got['served_warm']} served, {got['phases']} phase-split and "
                             f"{got['kernelbench']} KernelBench runs of {len(doc.get('kernels', {}))} kernels)")

        doc["summary"] = summarise(doc)
        out_l = ROOT / "results" / "tool" / "latency"
        _write_json(out_l / "latency.json", doc)
        rows_a = [json.loads(x) for x in (audit / "rows.jsonl").read_text().splitlines()] \
            if (audit / "rows.jsonl").is_file() else []
        rec = device_provenance(rows_a, state, run_commit, "python -m lethe.audit.latency (step latency)",
                                provenance.collect(), env=doc.get("provenance"))
        rec["run_provenance"] = doc.get("provenance")
        _write_json(out_l / "provenance.json", rec)
        done["latency"] = True

    out_d = ROOT / "results" / "differential" / corpus
    for impl in ("real", "replica-paper", "replica-hardened"):
        src = tmp / "out" / f"kb-{impl}"
        if not (src / "rows.jsonl").is_file():
            continue
        dst = out_d / "kb_real" / impl
        dst.mkdir(parents=True, exist_ok=True)
        if merge:
            from lethe.kernelbench.real import summarise

            rows_u = A.union_lines(_lines(dst / "rows.jsonl"), _lines(src / "rows.jsonl"))
            timing_u = A.union_lines(_lines(dst / "timing.jsonl"), _lines(src / "timing.jsonl"))
            A.write_lines(dst / "rows.jsonl", rows_u)
            A.write_lines(dst / "timing.jsonl", timing_u)
            _write_json(dst / "summary.json", summarise(rows_u, timing_u, impl=impl, kernels=len(rows_u)))
            shutil.copy(src / "provenance.json", dst / "provenance.json")
        else:
            for name in ("rows.jsonl", "timing.jsonl", "summary.json", "provenance.json"):
                if (src / name).is_file():
                    shutil.copy(src / name, dst / name)
        done[impl] = len(_lines(src / "rows.jsonl"))
    for replica in ("replica-paper", "replica-hardened"):
        if "real" in done and replica in done:
            subprocess.run([sys.executable, "-m", "lethe.kernelbench.real", "agree", "--theirs",
                            str(out_d / "kb_real" / "real"), "--ours", str(out_d / "kb_real" / replica), "--out",
                            str(out_d / f"kb_real_agreement_{replica}.json")], check=True)
    # The battery's side: this pack's audit, else the corpus's committed rows (a device call may judge the same
    # folder with KernelBench alone; the rows then come from the commit their provenance names).
    if "real" in done and (out_a / "rows.parquet").is_file():
        from lethe.kernelbench.differential import differential
        from lethe.verifier.records import read_rows

        audit_rows = [r for r in read_rows(out_a / "rows.parquet") if r["profile"] == "strict"]
        real_rows = _lines(out_d / "kb_real" / "real" / "rows.jsonl")
        battery_from = f"results/audit/{corpus}/rows.parquet (every device call in runs.jsonl)" if merge else \
            "this device call" if "audit" in done else (
            "results/audit/%s/rows.parquet as committed (run commit %s)" % (
                corpus, json.loads((out_a / "provenance.json").read_text()).get("git_sha", "unknown")
                if (out_a / "provenance.json").is_file() else "unknown"))
        _write_json(out_d / "real_vs_battery.json",
                    {"kernelbench": "real (48642c5c, unmodified)", "profile": "strict", "battery_rows": battery_from,
                     "kernelbench_run_commit": run_commit,
                     "kernelbench_outcomes": _outcomes(real_rows),
                     **differential(audit_rows, real_rows, variants=("paper",), require_accepted=False)})
        done["differential"] = True
    shutil.rmtree(tmp, ignore_errors=True)
    return done


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("tar")
    ap.add_argument("--corpus", default="mixed")
    ap.add_argument("--run-commit", default="unknown", help="the commit whose working tree the device ran")
    ap.add_argument("--sources", default="", help="the same run folder on this machine (fast-math flags)")
    ap.add_argument("--kb", default="", help="its KernelBench problems (with --sources)")
    ap.add_argument("--merge", action="store_true",
                    help="add this call's kernels to the corpus's committed results (a --slice run) instead of "
                         "replacing them; the call is appended to results/audit/<corpus>/runs.jsonl")
    a = ap.parse_args(argv)
    print(json.dumps(ingest(a.tar, a.corpus, a.run_commit, a.sources, a.kb, a.merge), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
