"""How well repros work on recorded failures: shrink factor, and whether the standalone pytest reproduces.

``python -m lethe.repro.measure --out results/repro`` makes one repro per failing kernel of the red team
(``results/red_team/rows.parquet``: the gate the kernel was built to fail when it failed and a repro can
show it, else its first failed gate a repro can show) and of the mixed corpus's failures whose sources this
machine has (``results/audit/mixed``: the hand-written and reference-as-candidate kernels; its leaderboard
kernels are CUDA sources that are not committed), then runs each repro's pytest in a separate interpreter
(``--python``: a fresh virtual environment with torch and pytest, plus triton for Triton candidates) with
``lethe`` made unimportable, and records per case:

* ``original_elements`` / ``elements``: the recorded probe's input elements and the shrunk case's;
* ``reproduced``: the contract test fails (the standalone case shows the defect);
* ``bitwise``: the candidate's output on the stored input equals, bit for bit, what the verifier's sandbox saw;
* ``expectation_ok``: the float64 reference recomputed on the stored input gives the stored expectation.

Writes ``summary.json`` (cases and totals) and ``provenance.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from lethe.repro.core import SUPPORTED_GATES, ReproError, make_repro

# The interpreter runs pytest with lethe unimportable: a repro that reached into the package fails here.
_BLOCKED_RUN = ("import sys; sys.modules['lethe'] = None; import pytest; "
                "sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', '--junitxml', sys.argv[1], sys.argv[2]]))")
CONTRACT_TEST = "test_candidate_meets_contract"
BITWISE_TEST = "test_output_is_what_lethe_saw"
EXPECTATION_TEST = "test_expectation_is_the_float64_reference"
# The mixed corpus's failures whose sources are materialised here (lethe.trusted.corpus), and the KernelBench
# copy their references come from.
KB_ROOT = Path("/work/shared/third_party/kernelbench-48642c5c")


def run_pytest(directory: str | Path, python: str = sys.executable, timeout_s: float = 600.0) -> dict[str, str]:
    """Each test of a repro directory -> "passed" | "failed" | "error" | "skipped", run by ``python`` in a
    child process with no PYTHONPATH and ``lethe`` unimportable."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TRITON_INTERPRET")}
    env["OMP_NUM_THREADS"] = "1"
    with tempfile.TemporaryDirectory() as td:
        xml = Path(td) / "junit.xml"
        subprocess.run([python, "-c", _BLOCKED_RUN, str(xml), str(directory)], cwd=str(directory), env=env,
                       capture_output=True, timeout=timeout_s, check=False)
        if not xml.exists():
            return {}
        out = {}
        for case in ET.parse(xml).getroot().iter("testcase"):
            kids = {c.tag for c in case}
            out[case.get("name")] = ("failed" if "failure" in kids else "error" if "error" in kids
                                     else "skipped" if "skipped" in kids else "passed")
        return out


def pick_gate(row: dict, targets: tuple[str, ...] = ()) -> str | None:
    """The gate to make a repro of: a targeted gate that failed, else the first failed gate a repro can show."""
    failed = [g for g, v in row["gates"].items() if v["status"] == "fail" and g in SUPPORTED_GATES]
    for g in targets:
        if g in failed:
            return g
    return failed[0] if failed else None


def measure_case(row: dict, gate: str, out_dir: Path, *, python: str, budget_s: float, corpus: str,
                 ref_path: str | None = None, cand_path: str | None = None, device: str | None = None) -> dict:
    """One repro and its standalone run, as a record of the summary."""
    rec = {"corpus": corpus, "id": row["id"], "gate": gate, "profile": row["profile"], "row_device": row["device"]}
    t0 = time.monotonic()
    try:
        info = make_repro(row, gate, out_dir, ref_path=ref_path, cand_path=cand_path, budget_s=budget_s,
                          device=device, command=f"lethe repro <rows> {row['id']} {gate} --out <dir>")
    except ReproError as exc:
        rec.update(status="not_written", exit_code=exc.code, reason=str(exc)[:300],
                   seconds=round(time.monotonic() - t0, 1))
        return rec
    except Exception as exc:  # noqa: BLE001 - a harness failure on one case is recorded, the others still run
        rec.update(status="error", exit_code=4, reason=f"{type(exc).__name__}: {exc}"[:300],
                   seconds=round(time.monotonic() - t0, 1))
        return rec
    tests = run_pytest(out_dir, python)
    rec.update(status="written", probe=info["probe"], device=info["device"], signature=info["signature"],
               original_elements=info["original_elements"], elements=info["elements"],
               shrink_factor=info["shrink_factor"], tests=tests,
               reproduced=tests.get(CONTRACT_TEST) == "failed", bitwise=tests.get(BITWISE_TEST) == "passed",
               expectation_ok=tests.get(EXPECTATION_TEST) == "passed", seconds=round(time.monotonic() - t0, 1))
    return rec


def totals(cases: list[dict]) -> dict:
    """Per corpus and overall: cases, repros written, median shrink factor, share reproduced and bit for bit
    (shares over the repros written)."""
    out = {}
    for name in sorted({c["corpus"] for c in cases}) + ["all"]:
        sel = [c for c in cases if name in ("all", c["corpus"])]
        wrote = [c for c in sel if c["status"] == "written"]
        out[name] = {"cases": len(sel), "written": len(wrote),
                     "median_shrink_factor": statistics.median([c["shrink_factor"] for c in wrote]) if wrote else None,
                     "reproduced": sum(c["reproduced"] for c in wrote),
                     "bitwise": sum(c["bitwise"] for c in wrote),
                     "expectation_ok": sum(c["expectation_ok"] for c in wrote),
                     "share_reproduced": sum(c["reproduced"] for c in wrote) / len(wrote) if wrote else None,
                     "share_bitwise": sum(c["bitwise"] for c in wrote) / len(wrote) if wrote else None}
    return out


def red_team_cases(rows_path: Path) -> list[tuple[dict, str]]:
    from lethe.redteam.manifest import load_suite
    from lethe.verifier import records

    targets = {k.name: k.targets for k in load_suite("red_team")}
    out = []
    for row in records.read_rows(rows_path):
        gate = pick_gate(row, targets.get(row["id"], ()))
        out.append((row, gate))
    return out


def mixed_sources(rows_path: Path, work: Path, kb_root: Path = KB_ROOT) -> list[tuple[dict, str, str, str]]:
    """(row, gate, ref path, cand path) for the strict rows of the mixed corpus that failed a gate a repro can
    show and whose sources are materialised here, checked against the row's SHA-256 of each."""
    import hashlib
    import re

    from lethe.trusted.corpus import hand_kernels, self_candidate
    from lethe.verifier import records

    def sha(s: str) -> str:
        return hashlib.sha256(s.encode()).hexdigest()

    problems = {}
    for k in hand_kernels():
        m = re.match(r"level(\d+)/(\d+)_", k["problem"])
        problems[(int(m.group(1)), int(m.group(2)))] = k
    out = []
    work.mkdir(parents=True, exist_ok=True)
    for row in records.read_rows(rows_path):
        gate = pick_gate(row)
        m = re.match(r"level_(\d+)_problem_(\d+)_sample_(\d+)$", row["id"])
        if row["profile"] != "strict" or gate is None or m is None:
            continue
        level, problem, sample = (int(g) for g in m.groups())
        k = problems.get((level, problem))
        if k is None or sample not in (100, 200):
            continue  # a leaderboard (CUDA) kernel: its source is not committed
        ref = (kb_root / "KernelBench" / k["problem"]).read_text(encoding="utf-8")
        cand = k["candidate"] if sample == 100 else self_candidate(ref)
        src = json.loads(row["sources"])
        if sha(ref) != src.get("ref_sha256") or sha(cand) != src.get("cand_sha256"):
            continue
        d = work / row["id"]
        d.mkdir(exist_ok=True)
        (d / "ref.py").write_text(ref, encoding="utf-8")
        (d / "cand.py").write_text(cand, encoding="utf-8")
        out.append((row, gate, str(d / "ref.py"), str(d / "cand.py")))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m lethe.repro.measure")
    ap.add_argument("--out", default="results/repro")
    ap.add_argument("--python", default=sys.executable, help="interpreter that runs the standalone tests")
    ap.add_argument("--python-label", default="", help="what that interpreter has installed, for the summary")
    ap.add_argument("--budget-s", type=float, default=30.0, help="shrinking budget per case")
    ap.add_argument("--work", default="", help="where repro directories are written (default: a temporary one)")
    ap.add_argument("--only", default="", help="comma-separated row ids (a partial run)")
    a = ap.parse_args(argv)
    from lethe import provenance

    out = Path(a.out)
    work = Path(a.work or tempfile.mkdtemp(prefix="lethe-repro-"))
    only = set(filter(None, a.only.split(",")))
    plan: list[tuple[str, dict, str | None, str | None, str | None, str | None]] = []
    for row, gate in red_team_cases(Path("results/red_team/rows.parquet")):
        plan.append(("red_team", row, gate, None, None, None))
    for row, gate, rp, cp in mixed_sources(Path("results/audit/mixed/rows.parquet"), work / "mixed_src"):
        plan.append(("mixed", row, gate, rp, cp, "cpu"))
    cases = []
    t0 = time.monotonic()
    for corpus, row, gate, rp, cp, dev in plan:
        if only and row["id"] not in only:
            continue
        if gate is None:
            cases.append({"corpus": corpus, "id": row["id"], "status": "no_gate",
                          "reason": "no failed gate a repro can show (" + ", ".join(
                              g for g, v in row["gates"].items() if v["status"] == "fail") + ")"})
            continue
        rec = measure_case(row, gate, work / corpus / row["id"], python=a.python, budget_s=a.budget_s,
                           corpus=corpus, ref_path=rp, cand_path=cp, device=dev)
        print(json.dumps({k: rec.get(k) for k in ("corpus", "id", "gate", "status", "elements", "reproduced",
                                                  "bitwise", "seconds")}), flush=True)
        cases.append(rec)
    summary = {"cases": cases, "totals": totals(cases), "python": a.python_label or a.python,
               "budget_s": a.budget_s, "partial": bool(only), "wall_s": round(time.monotonic() - t0, 1)}
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    provenance.write(out / "provenance.json", command="python -m lethe.repro.measure " + " ".join(argv or sys.argv[1:]),
                     standalone_python=a.python_label or a.python, budget_s=a.budget_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
