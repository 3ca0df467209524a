"""The Mamba tables: our rows beside the authors' records, goals marked from the row, the positive control."""

import json
from pathlib import Path

from lethe.kernels.mamba.render import bench_rows, positive_control_rows

ROOT = Path(__file__).resolve().parents[3]
PUBLISHED = ROOT / "data" / "published"


def test_bench_rows_join_ours_to_the_published_record():
    shape = dict(batch=8, seq_len=2048, d_model=4096, n_state=16)
    row = {"op": "C2", "shape": shape, "dtype": "float32", "impls": {"ours_triton": {"median_ms": 4.0},
           "official_cuda": {"median_ms": 2.0}}, "not_timed": {}, "speedup_vs_official": 0.5,
           "goal": {"min_speedup": 0.75, "met": False}, "check": {"pass": True}}
    rows = bench_rows([("r", {"rows": [row]}, {})], PUBLISHED)
    (got,) = [r for r in rows if r["op"] == "C2" and r["shape"] == "8x2048x4096x16" and r["dtype"] == "float32"]
    assert got["speedup"] == "0.50" and got["goal"].startswith("unmet") and got["check"] == "pass"
    rec = json.loads((PUBLISHED / "c2_bench_b200.json").read_text())
    want = [r["speedups_vs_ours"]["official_cuda_bwd"] for r in rec["runs"]
            if r["shape"] == shape and r["dtype"] == "float32"][0]
    assert got["b200_speedup"] == f"{want:.2f}"


def test_bench_rows_without_a_result_keep_only_the_records():
    rows = bench_rows(None, PUBLISHED)
    assert rows and all(r["ours_ms"] == "" for r in rows) and any(r["b200_speedup"] for r in rows)


def test_positive_control_rows_read_both_schemas_and_mark_failures():
    new = {"schema": "lethe.mamba.positive_control/1", "profiles": ["strict", "fast-math"],
           "kernels": {"C7": {"profiles": {"strict": {"status": "gated", "failed": []},
                                           "fast-math": {"status": "gated", "failed": ["EXC-01"]}}}}}
    old = json.loads((ROOT / "results/mamba/positive_control_cpu/summary.json").read_text())
    pub = json.loads((PUBLISHED / "positive_control.json").read_text())
    rows, cols = positive_control_rows({"CPU": old, "H200": new}, pub)
    by = {r["kernel"]: r for r in rows}
    assert cols == ["CPU strict", "H200 strict", "H200 fast-math"]
    assert by["C7"]["H200 strict"] == "pass" and by["C7"]["H200 fast-math"] == "fail: EXC-01"
    assert by["C1"]["CPU strict"] == "pass" and by["C7"]["published"] == "pass"


def test_bench_rows_keep_earlier_sides_and_mark_the_goal_on_the_faster_form():
    shape = dict(batch=8, l_out=2048, d_model=4096, n_state=16, conv_k=4)
    old = {"op": "C6", "shape": shape, "dtype": "float32", "model_shape": True, "check": {"pass": True},
           "impls": {"ours_triton": {"median_ms": 800.0}, "composed_official": {"median_ms": 10.0}}, "not_timed": {}}
    new = {"op": "C6", "shape": shape, "dtype": "float32", "model_shape": True, "check": {"pass": True},
           "impls": {"ours_triton_chunk_parallel": {"median_ms": 12.5}, "composed_official": {"median_ms": 10.0}},
           "not_timed": {"ours_triton": "checked, not timed at this shape (--skip-timed)"}}
    rows = bench_rows([("a", {"rows": [old]}, {}), ("b", {"rows": [new]}, {})], PUBLISHED)
    (got,) = [r for r in rows if r["op"] == "C6" and r["shape"] == "8x2048x4096x16x4" and r["dtype"] == "float32"]
    assert got["ours_ms"] == "800.000" and got["cp_ms"] == "12.500"
    assert got["speedup"] == "0.01" and got["cp_speedup"] == "0.80" and got["goal"] == "met (>= 0.75)"
    new["impls"]["ours_triton_chunk_parallel"]["median_ms"] = 20.0
    rows = bench_rows([("a", {"rows": [old]}, {}), ("b", {"rows": [new]}, {})], PUBLISHED)
    (got,) = [r for r in rows if r["op"] == "C6" and r["shape"] == "8x2048x4096x16x4" and r["dtype"] == "float32"]
    assert got["cp_speedup"] == "0.50" and got["goal"] == "unmet (>= 0.75)"
