"""Hand-audit: reproducible stratified selection, the label format round trip, the published set, the summary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lethe.hand_audit import labels as L
from lethe.hand_audit import render, sample

ROOT = Path(__file__).resolve().parents[2]


def row(i, fails, op, aliasing=False):
    gates = {g: {"status": "fail" if g in fails else "pass", "reason": f"{g} broke"}
             for g in ("CMP-01", "CMP-03", "EXC-01", "ORD-02", "PRC-02")}
    return {"id": str(i), "op_class": op, "status": "gated", "final_speedup": 1.0, "output_aliasing": aliasing,
            "gates": gates}


DISPUTED = ([row(i, ["EXC-01", "CMP-01"], "matmul") for i in range(10)]
            + [row(100 + i, ["CMP-01"], "softmax") for i in range(5)]
            + [row(200 + i, ["PRC-02"], "scan") for i in range(1)]
            + [row(300, [], "norm", aliasing=True)])


def test_stratum_prefers_tolerance_free_channels():
    assert sample.stratum(DISPUTED[0]) == "EXC-01"
    assert sample.stratum(DISPUTED[-1]) == "aliasing"


def test_selection_is_stratified_and_reproducible():
    a = sample.select(DISPUTED, seed=7, per_stratum=2)
    assert a == sample.select(list(reversed(DISPUTED)), seed=7, per_stratum=2)  # order of input irrelevant
    assert a["bucket_sizes"] == {"CMP-01": 5, "EXC-01": 10, "PRC-02": 1, "aliasing": 1}
    per = {}
    for s in a["selected"]:
        per[(s["stratum"], s["op_class"])] = per.get((s["stratum"], s["op_class"]), 0) + 1
    assert per == {("CMP-01", "softmax"): 2, ("EXC-01", "matmul"): 2, ("PRC-02", "scan"): 1, ("aliasing", "norm"): 1}
    seeds = {tuple(s["id"] for s in sample.select(DISPUTED, seed=k)["selected"]) for k in range(8)}
    assert len(seeds) > 1  # the seed actually drives the draw


def test_label_round_trip_and_validation(tmp_path):
    rows = L.from_selection(sample.select(DISPUTED, seed=1), "fixture")
    p = tmp_path / "s.csv"
    p.write_text(L.dumps(rows))
    back = L.read(p)
    assert [r["id"] for r in back] == sorted((r["id"] for r in rows), key=int)
    bad = dict(back[0], label="maybe")
    with pytest.raises(L.LabelFileError):
        L.validate([bad])
    with pytest.raises(L.LabelFileError, match="labeller"):
        L.validate([dict(back[0], label="defect", labeller="")])


def test_shipped_published_set_matches_the_release():
    pub = json.loads((ROOT / "data/published/failure_sample_selected.json").read_text())
    rows = L.read(ROOT / "data/hand_audit/published_sample.csv")
    assert len(rows) == pub["n_selected"] == 31
    assert {r["id"] for r in rows} == {s["id"] for s in pub["selected"]}
    assert all(r["kb_paper_era"] == "pass" for r in rows)  # every sampled kernel is in the disputed cell
    assert (ROOT / "data/hand_audit/published_sample.csv").read_text() == L.dumps(
        L.from_published_sample(pub, "drkernel"))


def test_summary_counts_labels(tmp_path):
    rows = L.read(ROOT / "data/hand_audit/published_sample.csv")
    rows[0] = dict(rows[0], label="defect", labeller="t")
    summ = render.summary_rows(rows, {"CMP-01": 172, "EXC-01": 827})
    total = summ[-1]
    assert total["selected"] == 31 and total["defect"] == 1 and total["unlabelled"] == 30
    assert summ[0]["stratum"] == "CMP-01" and summ[0]["cell"] == 172
