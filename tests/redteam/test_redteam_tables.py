"""Table builders: caught / extra / missed / convincing are computed from rows, and rendering is deterministic."""

from __future__ import annotations

from lethe.redteam import tables as T
from lethe.redteam.manifest import GATE_IDS, load_suite


def _row(name: str, failing: dict[str, str], status: str = "gated") -> dict:
    gates = {g: {"status": failing.get(g, "pass"), "reason": f"{g} reason", "evidence": "{}", "seed": 1}
             for g in GATE_IDS}
    return {"id": name, "status": status, "gates": gates}


def _loose(name: str, correct: bool | None, variant: str = "paper") -> dict:
    return {"id": name, "variant": variant, "correct": correct, "outcome": "correct" if correct else "output_mismatch"}


def test_red_team_records_caught_extra_missed():
    kernels = load_suite("red_team")[:3]
    a, b, c = kernels
    rows = [
        _row(a.name, {t: "fail" for t in a.targets} | {"RES-01": "fail"}),   # caught, one extra (unless target)
        _row(b.name, {}),                                                    # nothing fired: missed
        _row(c.name, {}, status="crash"),                                    # never graded
    ]
    loose = [_loose(a.name, True), _loose(b.name, False), _loose(c.name, True)]
    recs = T.build_records("red_team", kernels, rows, loose)
    assert recs[0]["caught"] and recs[0]["convincing"]
    assert ("RES-01" in recs[0]["extra"]) == ("RES-01" not in a.targets)
    assert not recs[1]["caught"] and recs[1]["missed"] == list(b.targets) and not recs[1]["convincing"]
    assert not recs[2]["caught"] and recs[2]["row_status"] == "crash"
    s = T.summarise("red_team", kernels, rows, loose)
    assert s["n_caught"] == 1 and s["uncaught"] == [b.name, c.name] and s["not_convincing"] == [b.name]


def test_error_is_not_a_catch():
    k = load_suite("red_team")[0]
    rec = T.build_records("red_team", [k], [_row(k.name, {t: "error" for t in k.targets})], [])[0]
    assert not rec["caught"] and rec["fired"] == list(k.targets) and rec["loose_paper"] == "not run"


def test_positive_records_and_verdict():
    kernels = load_suite("positive_control")[:2]
    rows = [_row(kernels[0].name, {"CMP-02": "na"}), _row(kernels[1].name, {"EXC-01": "fail"})]
    recs = T.build_records("positive_control", kernels, rows, [])
    assert recs[0]["verdict"] == "pass" and recs[0]["CMP-02"] == "na"
    assert recs[1]["verdict"] == "fail" and recs[1]["failed"] == ["EXC-01"]
    s = T.summarise("positive_control", kernels, rows, [])
    assert not s["all_pass"] and s["gate_fails"] == [[kernels[1].name, "EXC-01"]]


def test_render_is_deterministic(tmp_path):
    kernels = load_suite("red_team")
    rows = [_row(k.name, {t: "fail" for t in k.targets}) for k in kernels]
    loose = [_loose(k.name, True) for k in kernels]
    outs = []
    for i in range(2):
        md, tex = tmp_path / f"t{i}.md", tmp_path / f"t{i}.tex"
        T.render("red_team", kernels, rows, loose, md, tex, run_info={"device": "cpu", "seed": 1})
        outs.append((md.read_bytes(), tex.read_bytes()))
    assert outs[0] == outs[1]
    text = outs[0][0].decode()
    assert f"{len(kernels)}/{len(kernels)} deliberately broken kernels caught" in text
    for k in kernels:
        assert k.name.replace("_", "\\_") in text or k.name in text


def test_committed_results_match_their_rows():
    """summary.json is what the table builders derive from the committed rows, loose rows and manifests."""
    import json
    from pathlib import Path

    import pytest

    from lethe.redteam.manifest import REPO_ROOT
    from lethe.redteam.run import read_loose

    records = pytest.importorskip("lethe.verifier.records")
    checked = 0
    for suite in ("red_team", "positive_control"):
        base = Path(REPO_ROOT) / "results" / suite
        if not (base / "rows.parquet").exists():
            continue
        kernels = load_suite(suite)
        rows, loose = records.read_rows(base / "rows.parquet"), read_loose(base / "loose.parquet")
        assert sorted(r["id"] for r in rows) == sorted(k.name for k in kernels), "results are stale: re-run"
        summary = json.loads((base / "summary.json").read_text())
        assert summary["kernels"] == T.summarise(suite, kernels, rows, loose)["kernels"]
        checked += 1
    if not checked:
        pytest.skip("no committed results yet")
