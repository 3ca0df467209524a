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
from pathlib import Path

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


def _write_json(path: Path, doc) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")


def ingest(tar_path: str, corpus: str = "mixed") -> dict:
    from lethe import provenance

    tmp = Path(tempfile.mkdtemp(prefix="lethe-ingest-"))
    with tarfile.open(tar_path) as tar:
        tar.extractall(tmp, filter="data")
    state = json.loads((tmp / "state.json").read_text())
    done = {}
    device = {"device": "NVIDIA H200 (device tool)"}

    audit = tmp / "out" / "audit"
    out_a = ROOT / "results" / "audit" / corpus
    if (audit / "rows.parquet").is_file():
        out_a.mkdir(parents=True, exist_ok=True)
        shutil.copy(audit / "rows.parquet", out_a / "rows.parquet")
        shutil.copy(audit / "summary.jsonl", out_a / "summary.jsonl")
        builds = [r for f in sorted((audit / "work").glob("builds-*.jsonl")) for r in _lines(f)]
        (out_a / "builds.jsonl").write_text("".join(json.dumps({k: r[k] for k in sorted(r) if k != "root"},
                                                               sort_keys=True) + "\n" for r in builds))
        if (tmp / "mixed" / "origin.json").is_file():
            shutil.copy(tmp / "mixed" / "origin.json", out_a / "origin.json")
        rows = [json.loads(x) for x in (audit / "rows.jsonl").read_text().splitlines()]
        keys = [(r["id"], r["profile"]) for r in rows]
        killed, full = state.get("audit_killed", {}), state.get("audit", {})
        ck_lines = sum(len(_lines(f)) for f in (audit / "work").glob("shard-*.jsonl"))
        _write_json(out_a / "resume.json", {
            "first_attempt": {"rc": killed.get("rc"), "wall_s": killed.get("wall_s"),
                              "killed_with": "SIGKILL (subprocess timeout)"},
            "second_attempt": {"rc": full.get("rc"), "wall_s": full.get("wall_s")},
            "rows": len(rows), "unique_rows": len(set(keys)), "kernels": len({k for k, _ in keys}),
            "checkpoint_lines": ck_lines, "build": state.get("build", {}).get("wall_s")})
        provenance.write(out_a / "provenance.json", command="experiments/audit/replicate_h200.py (audit step)",
                         **device, state={k: {kk: v.get(kk) for kk in ("rc", "wall_s")} for k, v in state.items()})
        done["audit"] = len(rows)

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

        doc["summary"] = summarise(doc)
        out_l = ROOT / "results" / "tool" / "latency"
        _write_json(out_l / "latency.json", doc)
        provenance.write(out_l / "provenance.json", command="python -m lethe.audit.latency", **device,
                         run_provenance=doc.get("provenance"))
        done["latency"] = True

    out_d = ROOT / "results" / "differential" / corpus
    for impl in ("real", "replica-paper", "replica-hardened"):
        src = tmp / "out" / f"kb-{impl}"
        if not (src / "rows.jsonl").is_file():
            continue
        dst = out_d / "kb_real" / impl
        dst.mkdir(parents=True, exist_ok=True)
        for name in ("rows.jsonl", "timing.jsonl", "summary.json", "provenance.json"):
            if (src / name).is_file():
                shutil.copy(src / name, dst / name)
        done[impl] = len(_lines(src / "rows.jsonl"))
    for replica in ("replica-paper", "replica-hardened"):
        if "real" in done and replica in done:
            subprocess.run([sys.executable, "-m", "lethe.kernelbench.real", "agree", "--theirs",
                            str(out_d / "kb_real" / "real"), "--ours", str(out_d / "kb_real" / replica), "--out",
                            str(out_d / f"kb_real_agreement_{replica}.json")], check=True)
    if "real" in done and "audit" in done:
        from lethe.kernelbench.differential import differential
        from lethe.verifier.records import read_rows

        audit_rows = [r for r in read_rows(out_a / "rows.parquet") if r["profile"] == "strict"]
        real_rows = _lines(out_d / "kb_real" / "real" / "rows.jsonl")
        _write_json(out_d / "real_vs_battery.json",
                    {"kernelbench": "real (48642c5c, unmodified)", "profile": "strict",
                     **differential(audit_rows, real_rows, variants=("paper",), require_accepted=False)})
        done["differential"] = True
    shutil.rmtree(tmp, ignore_errors=True)
    return done


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("tar")
    ap.add_argument("--corpus", default="mixed")
    a = ap.parse_args(argv)
    print(json.dumps(ingest(a.tar, a.corpus), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
