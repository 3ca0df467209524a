"""The fla #640 tables: they match what the committed results render to, every number in them comes from the
files, and the outcome is chosen by rules (control pair absent -> "did not run"; present -> compared)."""

import json
import shutil
from pathlib import Path

import pytest

from lethe.foreign import fla640_render as FR
from lethe.foreign.fla640_results import RESULT, load
from lethe.verifier.records import read_rows, write_rows

ROOT = Path(__file__).resolve().parents[2]
RES = ROOT / "results" / "foreign" / "fla640"
TABLES = ROOT / "paper" / "tables"
EXPOSED = "fla640/gdn/K64/bfloat16"
CONTROL = "fla640/gdn/K128/bfloat16"

pytestmark = pytest.mark.skipif(not (RES / RESULT).exists(), reason="fla640 results not committed yet")


def test_rendered_tables_match_the_committed_results(tmp_path):
    targets = [TABLES / f"{FR.STEM}.{e}" for e in ("md", "tex")]
    if not all(p.exists() for p in targets):
        pytest.skip("fla640 table not rendered yet")
    FR.render(RES / RESULT, tmp_path)
    for p in targets:
        assert (tmp_path / p.name).read_bytes() == p.read_bytes(), p.name


def test_recomputed_comparisons_and_labels_agree_with_the_run():
    """The renderer recomputes ratios and labels (so a changed error changes them); on the committed files they must
    equal what run.py wrote."""
    for call in load(RES / RESULT)["calls"]:
        doc = call["direct"]
        def key(c):
            return (c["op"], c["dtype"], c["T"], c["tensor"])

        mine = {key(c): c for c in FR.comparisons(doc["cells"], doc["thresholds"])}
        theirs = {key(c): c for c in doc["comparisons"]}
        assert sorted(mine) == sorted(theirs)
        for k, c in mine.items():
            assert c["signature"] == theirs[k]["signature"]
            assert c["ratio"] == pytest.approx(theirs[k]["ratio"], rel=1e-12)
        for cell in doc["cells"]:
            by = cell.get("bypassed", {})
            if "errors" in by:
                assert FR.label(by["worst_grad_rel"], doc["thresholds"]) == by["label"]


def test_outcome_on_the_committed_results_names_what_did_not_run():
    data = load(RES / RESULT)
    text = FR.outcome(data)
    ids = {r["id"] for c in data["calls"] for r in c["rows"]}
    assert "no miscompile signature was measured" in text
    if EXPOSED in ids and CONTROL not in ids:
        assert f"control pair ({CONTROL}), which did not run" in text
        assert "cannot be attributed to #640" in text
        assert "precision-dominated" in text


def test_probe_plan_knows_the_gradient_probe():
    plan = FR.probe_plan(EXPOSED, 0)
    assert plan["grad"].action == "backward" and plan["grad"].dtype == "float32"
    assert plan["prc_bf16"].dtype == "bfloat16" and plan["rand0"].action == "forward"


def test_sci_and_pair_ids():
    assert [FR.sci(x) for x in (2754770.0, 199.231, 0.220667, 0.0039, 0.0)] == ["2.8e6", "199", "0.221", "3.9e-3",
                                                                                "0"]
    p = FR.parse_pair("fla640/sgla/K128/native/T256")
    assert (p.op, p.K, p.compute_dtype, p.T) == ("sgla", 128, None, 256)
    with pytest.raises(ValueError):
        FR.parse_pair("sakana/1/2")


# ---------------------------------------------------------------------------------------------- temp variants


def _copy(tmp_path) -> Path:
    dst = tmp_path / "res"
    shutil.copytree(RES, dst)
    return dst


def _direct_path(dst: Path) -> Path:
    """The direct.json of the first results call that measured cells."""
    for c in load(dst / RESULT)["calls"]:
        if c["direct"]["cells"]:
            return dst / c["folder"] / "direct.json"
    pytest.skip("no direct cells committed")


def _verdicts_path(dst: Path) -> Path:
    for c in load(dst / RESULT)["calls"]:
        if any(r["id"] == EXPOSED for r in c["rows"]):
            return dst / c["folder"] / "verdicts.parquet"
    pytest.skip("exposed pair not committed")


def _set_grad_evidence(row: dict, status: str, scale: float) -> None:
    g = row["gates"]["CMP-02"]
    ev = json.loads(g["evidence"])
    for c in ev["probes"]["grad"]["checks"].values():
        c["max_err_over_tol"] *= scale
        c["ok"] = status == "pass"
        c["n_bad"] = 0 if status == "pass" else c["n_bad"]
    ev["probes"]["grad"]["status"] = status
    g["evidence"] = json.dumps(ev)
    g["status"] = status
    g["reason"] = "" if status == "pass" else g["reason"]


def _drop_committed_control(dst: Path) -> None:
    """Remove the control pair the committed results hold, so that a test's synthetic control is the only one."""
    for c in load(dst / RESULT)["calls"]:
        path = dst / c["folder"] / "verdicts.parquet"
        if path.exists():
            rows = read_rows(path)
            keep = [r for r in rows if r["id"] != CONTROL]
            if len(keep) != len(rows):
                if keep:
                    write_rows(keep, path)
                else:
                    path.unlink()


def _add_control(dst: Path, *, grad_status: str, grad_scale: float) -> None:
    _drop_committed_control(dst)
    path = _verdicts_path(dst)
    rows = read_rows(path)
    exp = next(r for r in rows if r["id"] == EXPOSED)
    ctl = json.loads(json.dumps(exp))
    ctl["id"] = CONTROL
    ctl["sources"] = json.dumps({**json.loads(exp["sources"]), "pair": CONTROL})
    _set_grad_evidence(ctl, grad_status, grad_scale)
    write_rows(rows + [ctl], path)


def test_outcome_compares_with_a_control_when_one_ran(tmp_path):
    # a control that fails CMP-02 just as badly: the same gates fail, nothing separates them
    dst = _copy(tmp_path)
    _add_control(dst, grad_status="fail", grad_scale=1.0)
    text = FR.outcome(load(dst / RESULT))
    assert "did not run" not in text
    assert f"Its control {CONTROL} fails the same gates (CMP-02 err/tol ×1.00 the control's)" in text
    assert "no #640 signal beyond precision" in text
    md, _ = FR.texts(dst / RESULT)
    assert f"{CONTROL}: ran" in md

    # a control whose backward passes: the exposed pair's CMP-02 failure is its own
    dst2 = _copy(tmp_path / "b")
    _add_control(dst2, grad_status="pass", grad_scale=1e-3)
    text2 = FR.outcome(load(dst2 / RESULT))
    assert f"Against its control {CONTROL} the exposed pair differs (fails only here: CMP-02)" in text2
    assert "the direct check measured no signature" in text2


def test_a_larger_gradient_error_changes_the_table(tmp_path):
    """Perturb one committed error: the cell, the ratio row, the label and the outcome all follow."""
    dst = _copy(tmp_path)
    before_md, _ = FR.texts(dst / RESULT)
    path = _direct_path(dst)
    doc = json.loads(path.read_text())
    cell = next(c for c in doc["cells"] if c["K"] == 64)
    ctl = next(c for c in doc["cells"] if c["K"] == 128 and c["op"] == cell["op"] and c["T"] == cell["T"])
    cell["bypassed"]["errors"]["dk"]["rel_fro"] = 0.5
    path.write_text(json.dumps(doc))
    md, tex = FR.texts(dst / RESULT)
    assert md != before_md
    assert "| 0.5 |" in md  # the cell itself
    ratio = 0.5 / ctl["bypassed"]["errors"]["dk"]["rel_fro"]
    assert FR.ratio_text(ratio) in md and "SIGNATURE: dk" in md
    assert "| wrong |" in md  # the cell's label, recomputed from its worst gradient
    assert "miscompile signature measured" in md and "no miscompile signature" not in md
    assert "SIGNATURE: dk" in tex


def test_a_failing_bf16_probe_changes_the_precision_reading(tmp_path):
    dst = _copy(tmp_path)
    path = _verdicts_path(dst)
    rows = read_rows(path)
    row = next(r for r in rows if r["id"] == EXPOSED)
    g = row["gates"]["PRC-01"]
    ev = json.loads(g["evidence"])
    out = ev["probes"]["prc_bf16"]["outputs"][0]
    out.update(max_err_over_tol=7.5, ok=False, n_bad=3)
    ev["probes"]["prc_bf16"]["status"] = "fail"
    g["evidence"] = json.dumps(ev)
    write_rows(rows, path)
    md, _ = FR.texts(dst / RESULT)
    assert "1 of 3 fail, err/tol 7.5" in md
    assert "precision-dominated" not in md and "Not all of it is precision" in md and "prc_bf16" in md


def test_no_cells_and_no_pairs_say_so(tmp_path):
    dst = _copy(tmp_path)
    for c in load(dst / RESULT)["calls"]:
        p = dst / c["folder"] / "direct.json"
        doc = json.loads(p.read_text())
        doc["cells"] = []
        p.write_text(json.dumps(doc))
        if (dst / c["folder"] / "verdicts.parquet").exists():
            (dst / c["folder"] / "verdicts.parquet").unlink()
    text = FR.outcome(load(dst / RESULT))
    assert "no exposed/control pair of cells was measured" in text
    assert "no exposed pair was verified" in text
