"""The device benchmark's K2 stages and their rendering, exercised on the CPU (no GPU needed).

Properties: (1) adding the K2 tables left the rendering of a bench.json without K2 keys byte-identical (the
committed results/native/bench.json still renders to the committed paper tables); (2) the benchmark script's
K2 stages run end to end in ``--dry-run`` mode (torch code standing in for the native kernels, tiny shapes),
``--merge`` keeps the keys of the stages it did not run, ``--budget-s`` skips and records instead of running
past its budget, and the resulting bench.json renders K1 rows unchanged plus the K2 and backward rows.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

from lethe.kernels.gdn.native.render import bench_table, k1_wgmma_table, k2_tables, k2_wgmma_table

ROOT = Path(__file__).resolve().parents[3]
BENCH = ROOT / "results/native/bench.json"


def _run_bench(tmp_path, *args):
    env = dict(os.environ, OMP_NUM_THREADS="1", LETHE_GIT_SHA="test-dry-run")
    proc = subprocess.run([sys.executable, str(ROOT / "experiments/native/bench.py"), "--dry-run",
                           "--out", str(tmp_path), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((tmp_path / "bench.json").read_text()), proc.stdout


def test_committed_bench_json_renders_as_committed_and_k1_part_as_before():
    cur = json.loads(BENCH.read_text())
    md, tex = bench_table(cur)
    assert md == (ROOT / "paper/tables/native_bench.md").read_text()
    assert tex == (ROOT / "paper/tables/native_bench.tex").read_text()
    # without its K2 and wgmma keys (a bench.json from before those stages) it renders the K1 table alone, and
    # the full table is that K1 table followed by the K2 tables, then the tensor-core K1 table
    old = {k: v for k, v in cur.items() if not k.startswith(("k2_", "backward_timing", "k1_wgmma"))}
    assert k2_tables(old) == ("", "") and k1_wgmma_table(old) == ("", "") and k2_wgmma_table(old) == ("", "")
    k1md, k1tex = bench_table(old)
    k2md, k2tex = k2_tables(cur)
    wmd, wtex = k1_wgmma_table(cur)
    w2md, w2tex = k2_wgmma_table(cur)
    assert k2md and wmd and "wgmma K1 ms" in wmd and "wgmma K2 ms" in w2md
    assert md == "\n".join((k1md, k2md, wmd, w2md)) and tex == "\n".join((k1tex, k2tex, wtex, w2tex))
    # the K2 wgmma caption reports what was measured: rows that the budget skipped are named, not shown
    skipped = [r for r in cur["k2_wgmma_timing"] if "skipped" in r]
    assert w2md.count("\n| ") == len(cur["k2_wgmma_timing"]) - len(skipped)  # data rows (after the header)
    for r in skipped:
        assert f"T={r['T']} d_v={r['V']}" in w2md


def test_dry_run_k2_stages_merge_and_render(tmp_path):
    out, stdout = _run_bench(tmp_path, "--stages", "k2_correctness,k2_timing,backward_timing",
                             "--merge", str(BENCH))
    assert "[t=" in stdout and "stage k2_timing" in stdout  # progress lines
    for key in ("k2_correctness", "k2_timing", "backward_timing"):
        assert out[key] and f"{key}_error" not in out, out.get(f"{key}_error")
    assert all(r["passed"] for r in out["k2_correctness"])
    old = json.loads(BENCH.read_text())
    assert out["timing"] == old["timing"] and out["k1_correctness"] == old["k1_correctness"]  # merged, kept
    assert out["merged_from"]["file"] == str(BENCH)
    assert out["stages_run"] == ["k2_correctness", "k2_timing", "backward_timing"]
    md, tex = bench_table(out)
    k1md, _ = bench_table({k: v for k, v in out.items() if k not in ("k2_correctness", "k2_timing",
                                                                      "backward_timing")})
    assert md.startswith(k1md.split("\n\nK1 (")[0])  # the K1 rows are the committed ones
    assert "native K2 ms" in md and "native K1+K2 bwd ms" in md and "native K2 ms" in tex
    assert md.count("\n| 128 | 64 |") == 2 and md.count("\n| 256 | 128 |") == 2  # one K2 row + one bwd row each


def test_budget_skips_are_recorded(tmp_path):
    out, _ = _run_bench(tmp_path, "--stages", "k2_correctness,k2_timing", "--budget-s", "0")
    assert out["k2_correctness_skipped"] == "budget" and out["k2_timing_skipped"] == "budget"
    assert "k2_timing" not in out


def test_dry_run_k1_wgmma_stage(tmp_path):
    # the tensor-core K1's stage end to end on the CPU, with the kernel's float64 bf16 replay standing in for it:
    # correctness rows for erase on and off (each judged against float64), then a timing row
    out, stdout = _run_bench(tmp_path, "--stages", "ceilings,k1_wgmma")
    assert "k1_wgmma_error" not in out, out.get("k1_wgmma_error")
    rows = out["k1_wgmma_correctness"]
    assert [(r["V"], r["erase"], r["split"]) for r in rows] == [(128, True, False), (64, False, False),
                                                                 (128, True, True), (64, False, True)]
    assert all(r["passed"] for r in rows)
    assert all(0 < r["dd_rel_vs_f64"] < 1e-2 for r in rows)  # bf16 operands: rounding-sized, not zero, not wrong
    # split operands (P and Qg as hi/lo pairs) remove the dominant rounding of dd
    assert rows[2]["dd_rel_vs_f64"] < rows[0]["dd_rel_vs_f64"] and rows[3]["dd_rel_vs_f64"] < rows[1]["dd_rel_vs_f64"]
    t = out["k1_wgmma_timing"][0]
    assert t["wgmma_ms"] > 0 and t["floor_bytes_ms"] > 0 and "stage k1_wgmma" in stdout
