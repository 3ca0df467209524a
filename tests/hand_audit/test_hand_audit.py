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


# --- the GPU disputed cells: severity, (corpus, id) keys, target-sized selection, merge, the shipped labels ---

def test_kernel_label_takes_the_most_severe_gate_verdict():
    assert L.kernel_label(["false_alarm", "convention"]) == "convention"
    assert L.kernel_label(["convention", "defect", "false_alarm"]) == "defect"
    assert L.kernel_label(["false_alarm", "false_alarm"]) == "false_alarm"
    assert L.kernel_label(["unclear", "false_alarm"]) == "unclear"
    assert L.kernel_label([]) == "unlabelled"
    with pytest.raises(L.LabelFileError):
        L.kernel_label(["maybe"])


def test_label_key_is_corpus_and_id(tmp_path):
    base = L.from_selection(sample.select(DISPUTED, seed=1), "a")[0]
    rows = [dict(base, label="convention", labeller="t"), dict(base, corpus="b")]
    p = tmp_path / "two.csv"
    p.write_text(L.dumps(rows))  # the same kernel in two corpora's cells is two rows
    assert [(r["corpus"], r["label"]) for r in L.read(p)] == [("a", "convention"), ("b", "unlabelled")]
    with pytest.raises(L.LabelFileError, match="duplicate"):
        L.dumps([base, dict(base)])


def test_target_selection_takes_small_cells_whole_and_caps_groups():
    n = len(DISPUTED)
    whole = sample.select_target(DISPUTED, seed=3, target=n + 10)
    assert whole["n_selected"] == n and whole["target"] == n + 10
    for target in range(1, n + 1):
        k = sample.per_stratum_for(DISPUTED, target)
        assert sample.select(DISPUTED, seed=3, per_stratum=k)["n_selected"] >= target
        assert k == 0 or sample.select(DISPUTED, seed=3, per_stratum=k - 1)["n_selected"] < target  # minimal quota
    part = sample.select_target(DISPUTED, seed=3, target=8)
    groups = {(s["stratum"], s["op_class"]) for s in part["selected"]}
    assert groups == {(sample.stratum(r), r["op_class"]) for r in DISPUTED}  # every group keeps a member


def test_merge_keeps_verdicts_and_appends_new_kernels():
    fresh = L.from_selection(sample.select(DISPUTED, seed=1, per_stratum=1), "fx")
    labelled = [dict(fresh[0], label="defect", labeller="t", note="seen"), dict(fresh[1], id="gone", label="defect",
                                                                                 labeller="t")]
    merged = L.merge(labelled, fresh)
    by = {r["id"]: r for r in merged}
    assert by[fresh[0]["id"]]["label"] == "defect" and by[fresh[0]["id"]]["note"] == "seen"
    assert by["gone"]["label"] == "defect"  # a verdict is never dropped by re-selecting
    assert {r["id"] for r in fresh} <= set(by) and len(merged) == len(fresh) + 1
    assert all(by[r["id"]]["label"] == "unlabelled" for r in fresh[1:])


def test_money_cell_rows_and_op_class():
    rows = [dict(row(i, ["EXC-01"], ""), id=f"level_2_problem_{i}_sample_0", profile=p)
            for i in (3, 4) for p in ("strict", "fast-math")]
    got = sample.money_cell_rows(rows, ["level_2_problem_4_sample_0"], "strict")
    assert [(r["id"], r["profile"]) for r in got] == [("level_2_problem_4_sample_0", "strict")]
    with pytest.raises(KeyError):
        sample.money_cell_rows(rows, ["level_2_problem_9_sample_0"], "strict")
    assert sample.problem_of("level_3_problem_12_sample_100") == (3, 12) and sample.problem_of("42") is None
    filled = sample.with_op_class(rows, {(2, 3): "conv"})
    assert [r["op_class"] for r in filled] == ["conv", "conv", "", ""]
    assert sample.channels_by_profile(rows, "level_2_problem_3_sample_0") == {"fast-math": ["EXC-01"],
                                                                             "strict": ["EXC-01"]}
