"""Calibration sweep: bisection brackets the threshold, honest kernels pass, defects fail, margins computed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from lethe.calibration import render, sweep

ROOT = Path(__file__).resolve().parents[2]


def test_trip_point_brackets_the_gate_flip():
    gate, op = sweep.GATES["CMP-01"], sweep.OPERATORS["softmax"]
    ps = sweep.probes(gate, op, seed=1)
    t = sweep.trip_point(ps)
    assert sweep.passes([p.ref * (1 + t["last_pass_eps"]) for p in ps], ps)
    assert not sweep.passes([p.ref * (1 + t["first_fail_eps"]) for p in ps], ps)
    assert t["first_fail_eps"] / t["last_pass_eps"] <= 1.001 + 1e-12


def test_uniform_error_has_its_own_scaled_error():
    """The trip point's unit is the floor's unit: r*(1+eps) has scaled error exactly eps."""
    ps = sweep.probes(sweep.GATES["CMP-01"], sweep.OPERATORS["row_sum"], seed=2)
    assert np.isclose(sweep.scaled_error([ps[0].ref * (1 + 3e-5)], ps), 3e-5, rtol=1e-9)


def test_cmp01_softmax_separates_cleanly():
    row = sweep.calibrate_one(sweep.GATES["CMP-01"], sweep.OPERATORS["softmax"], seed=3)
    assert row["honest_passes_gate"] and row["clean_separation"]
    assert row["honest_floor"] < row["trip_point"] < row["defect_onset"]
    assert row["margin_trip_over_floor"] == row["trip_point"] / row["honest_floor"]


def test_ord03_catches_a_narrow_running_total_but_not_a_recursive_fp32_one():
    """The cancellation bound is the worst case of any fp32 order: a recursive fp32 total (a vendor GEMM's K-loop)
    is inside it, an fp16 running total is not."""
    for name in ("cumsum", "matmul"):
        gate, op = sweep.GATES["ORD-03"], sweep.OPERATORS[name]
        row = sweep.calibrate_one(gate, op, seed=4)
        assert row["honest_passes_gate"]
        fp16 = next(d for d in row["defects"] if d["defect"] == "fp16 accumulator")
        assert fp16["fails_gate"]
        ps = sweep.probes(gate, op, seed=4)
        rec = [sweep._run_defect(op.defects["recursive fp32 total"], p.inputs64, "float32") for p in ps]
        assert sweep.passes(rec, ps), name


def test_cmp02_gradient_gate_separates_softmax():
    """The hand-written stable softmax's autograd backward passes at N = 4096; a backward from an output saved in
    fp16 and one that drops the normaliser's term fail."""
    row = sweep.calibrate_one(sweep.GATES["CMP-02"], sweep.OPERATORS["softmax"], seed=6)
    assert row["honest_passes_gate"] and row["clean_separation"]
    assert {d["defect"]: d["fails_gate"] for d in row["defects"]} == {
        "fp16 saved output": True, "normaliser treated as constant": True}


def test_prc02_fp16_accumulator_fails_fp32_accumulator_passes():
    row = sweep.calibrate_one(sweep.GATES["PRC-02"], sweep.OPERATORS["row_sum"], seed=5)
    fp16 = next(d for d in row["defects"] if d["defect"] == "fp16 accumulator")
    assert row["honest_passes_gate"] and fp16["fails_gate"]


def test_prc02_bracketed_rows_catch_a_half_total_of_fp32_block_sums_that_ones_miss():
    """Ones are summed exactly by an fp16 total of 1024-long fp32 block sums; the bracketed rows are not."""
    caught = {}
    for gid in ("PRC-02", "PRC-02 blocks"):
        row = sweep.calibrate_one(sweep.GATES[gid], sweep.OPERATORS["row_sum"], seed=5)
        assert row["honest_passes_gate"], gid
        caught[gid] = {d["defect"]: d["fails_gate"] for d in row["defects"]}
    assert not caught["PRC-02"]["fp16 total of fp32 block sums"]
    assert caught["PRC-02 blocks"]["fp16 total of fp32 block sums"]


def test_thin_margin_is_labelled_thin():
    row = {"honest_passes_gate": True, "defect_onset": 2.0, "clean_separation": True, "thin_margin": True}
    assert render.verdict(row) == "thin"
    assert render.verdict({**row, "honest_passes_gate": False}).startswith("not separated")


def test_published_calibration_table(tmp_path):
    pub = ROOT / "data" / "published" / "threshold_calibration.json"
    rows = render.published_rows(json.loads(pub.read_text()))
    cmp01 = next(r for r in rows if r["gate"] == "CMP-01")
    assert round(cmp01["m1"], 1) == 147.5 and round(cmp01["m2"], 1) == 57.2  # published margins, recomputed
    render.render_published(pub, tmp_path / "a.md", tmp_path / "a.tex")
    render.render_published(pub, tmp_path / "b.md", tmp_path / "b.tex")
    assert (tmp_path / "a.md").read_bytes() == (tmp_path / "b.md").read_bytes()
    text = (tmp_path / "a.md").read_text()
    assert "published figures" in text and "ORD-03 (onset/trip 1.2x)" in text
