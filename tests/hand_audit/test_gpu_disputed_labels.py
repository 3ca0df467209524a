"""The shipped hand-audit of the GPU disputed cells: the label file covers every committed disputed kernel and
agrees with its verdict rows, false alarms on trusted kernels are in the trusted explanations (issue 23), and
the committed selection and table agree with the labels."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lethe.hand_audit import labels as L
from lethe.hand_audit import render, sample

ROOT = Path(__file__).resolve().parents[2]


def _gpu_config():
    import yaml

    return yaml.safe_load((ROOT / "config/config.yaml").read_text())["hand_audit"]


def test_shipped_gpu_labels_cover_every_committed_disputed_kernel():
    from lethe.verifier.records import read_rows

    rows = L.read(ROOT / "data/hand_audit/gpu_disputed.csv")
    by = {(r["corpus"], r["id"]): r for r in rows}
    for corpus in _gpu_config()["gpu_corpora"]:
        cell = json.loads((ROOT / f"results/differential/{corpus}/real_vs_battery.json").read_text())
        verdicts = {r["id"]: r for r in read_rows(ROOT / f"results/audit/{corpus}/rows.parquet")
                    if r["profile"] == cell["profile"]}
        for kid in cell["paper"]["money_cell"]["ids"]:
            lab = by[(corpus, kid)]  # every kernel of the committed cell is in the label file
            assert lab["label"] not in ("unlabelled", "unclear") and lab["labeller"] and lab["note"]
            assert lab["our_channels"].split(";") == sample.channels(verdicts[kid])
            assert lab["stratum"] == sample.stratum(verdicts[kid])


def test_gpu_false_alarms_on_trusted_kernels_are_in_the_trusted_explanations():
    """A verifier false fail found here goes back into the trusted corpus (issue 23): every false alarm on a
    hand-written trusted kernel has a false_fail explanation for each gate it failed."""
    from lethe.trusted import table as T
    from lethe.trusted.corpus import hand_kernels

    ex = T.load_explanations()
    origin = json.loads((ROOT / "results/audit/mixed/origin.json").read_text())
    trusted_id = {}
    for k in hand_kernels():  # the mixed corpus's sample 100 of a problem is its first hand kernel by name
        folder, stem = k["problem"].split("/")
        level, number = int(folder.removeprefix("level")), int(stem.split("_")[0])
        trusted_id.setdefault(f"level_{level}_problem_{number}_sample_100", f"L{level}/{Path(stem).stem}:{k['name']}")
    checked = 0
    for r in L.read(ROOT / "data/hand_audit/gpu_disputed.csv"):
        if r["label"] == "false_alarm" and origin.get(r["id"], "").startswith("hand-"):
            for gate in r["our_channels"].split(";"):
                # the mixed corpus's rows are the H200's: its device is cuda
                got = T.explain(trusted_id[r["id"]], gate, "strict", "cuda", ex)["class"]
                assert got == "false_fail", (r["id"], gate)
            checked += 1
    if not checked:
        pytest.skip("no false alarm on a hand-written trusted kernel in the label file")


def test_committed_gpu_selection_and_table_agree_with_the_labels():
    sel = json.loads((ROOT / "results/hand_audit/gpu_disputed/selection.json").read_text())
    assert sorted(sel["corpora"]) == sorted(_gpu_config()["gpu_corpora"])
    for corpus, s in sel["corpora"].items():
        cell = json.loads((ROOT / f"results/differential/{corpus}/real_vs_battery.json").read_text())
        ids = cell["paper"]["money_cell"]["ids"]
        assert s["cell_size"] == len(ids) == sum(v for k, v in sel["bucket_sizes"].items() if k.startswith(corpus + " "))
        if len(ids) <= sel["target"]:
            assert sorted(x["id"] for x in s["selected"]) == sorted(ids)  # a small cell is audited whole
    rows = L.read(ROOT / "data/hand_audit/gpu_disputed.csv")
    summ = render.summary_rows(rows, sel["bucket_sizes"], render.corpus_stratum_key)
    total = summ[-1]
    assert total["selected"] == len(rows) == sum(total[k] for k in L.LABELS)
    md = (ROOT / "paper/tables/hand_audit_gpu.md").read_text()
    for s in summ[:-1]:
        assert f"| {s['stratum']} | {s['cell']} | {s['selected']} |" in md
