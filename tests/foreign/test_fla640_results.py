"""The committed fla #640 results (results/foreign/fla640/): their schema, that collect() writes exactly them, and
that the checker rejects results that break the schema."""

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from lethe.foreign import fla640 as F
from lethe.foreign import fla640_results as R
from lethe.verifier.records import read_rows

ROOT = Path(__file__).resolve().parents[2]
RES = ROOT / "results" / "foreign" / "fla640"

pytestmark = pytest.mark.skipif(not (RES / "provenance.json").exists(), reason="fla640 results not committed yet")


@pytest.fixture(scope="module")
def prov():
    return json.loads((RES / "provenance.json").read_text())


def test_committed_results_follow_the_schema():
    assert R.validate(RES) == []


def test_files_are_small():
    for p in RES.rglob("*"):
        if p.is_file():
            assert p.stat().st_size < 200_000, p


def test_every_call_is_recorded_with_its_device(prov):
    calls = prov["calls"]
    assert [c["role"] for c in calls].count("results") >= 1
    for c in calls:
        assert c["gpu"] != "cpu" and c["driver"] and c["triton"] and c["torch"] and c["fla"] == F.FLA_VERSION
        assert len(c["git_sha"]) == 40 and c["date"] == c["utc_time"][:10]
        assert c["notes"], c["call"]
    for c in calls:
        if c["role"] == "attempt":
            assert not (RES / c["call"]).exists() and c["files"] == {}
            assert "attempt" in " ".join(c["notes"])
        else:
            # the bypass only means something when the guard was active and the TileLang backend off
            assert c["guard_state"]["would_refuse"] and c["fla_dispatch_disabled"]


def test_collect_rewrites_the_committed_entries(tmp_path, prov):
    """Re-collecting the committed call folders gives the same entries (the hand notes aside) and copies the files
    byte for byte, so provenance.json is what the collector writes, not a hand edit."""
    res = [c for c in prov["calls"] if c["role"] == "results"]
    doc = R.collect(tmp_path / "out", [(c["call"], RES / c["call"]) for c in res])
    again = {c["call"]: c for c in doc["calls"]}
    for c in res:
        new = again[c["call"]]
        assert {k: v for k, v in new.items() if k != "notes"} == {k: v for k, v in c.items() if k != "notes"}
        assert c["notes"][: len(new["notes"])] == new["notes"]  # auto notes first, hand notes after
        for rel in c["files"]:
            assert (tmp_path / "out" / rel).read_bytes() == (RES / rel).read_bytes()
    assert R.validate(tmp_path / "out") == []


def test_verdict_rows_are_the_generators_pairs():
    """The verified sources are what lethe.foreign.fla640 generates today: the renderer rebuilds each pair's probe
    plan from that generator, so a drift would make it describe a different plan."""
    for d in sorted(p for p in RES.iterdir() if (p / "verdicts.parquet").exists()):
        for row in read_rows(d / "verdicts.parquet"):
            from lethe.foreign.fla640_render import parse_pair

            ref, cand = parse_pair(row["id"]).sources()
            src = json.loads(row["sources"])
            assert src["generator"] == "lethe.foreign.fla640" and src["pair"] == row["id"]
            assert hashlib.sha256(ref.encode()).hexdigest() == src["ref_sha256"]
            assert hashlib.sha256(cand.encode()).hexdigest() == src["cand_sha256"]


def _copy(tmp_path):
    dst = tmp_path / "res"
    shutil.copytree(RES, dst)
    return dst


def test_validate_rejects_a_changed_file(tmp_path):
    dst = _copy(tmp_path)
    rel = next(rel for c in json.loads((dst / "provenance.json").read_text())["calls"] for rel in c["files"]
               if rel.endswith("direct.json"))
    doc = json.loads((dst / rel).read_text())
    doc["shapes"]["B"] += 1
    (dst / rel).write_text(json.dumps(doc))
    assert any("sha256" in e for e in R.validate(dst))


def test_validate_rejects_an_attempt_with_files_and_a_bad_role(tmp_path):
    dst = _copy(tmp_path)
    prov = json.loads((dst / "provenance.json").read_text())
    prov["calls"][0]["role"] = "attempt"
    prov["calls"][-1]["role"] = "result"
    (dst / "provenance.json").write_text(json.dumps(prov))
    errs = R.validate(dst)
    assert any("an attempt commits no files" in e for e in errs)
    assert any("role 'result'" in e for e in errs)


def test_validate_rejects_missing_verdicts_and_unordered_calls(tmp_path):
    dst = _copy(tmp_path)
    prov = json.loads((dst / "provenance.json").read_text())
    with_rows = [c for c in prov["calls"] if any(r.endswith("verdicts.parquet") for r in c["files"])]
    if not with_rows:
        pytest.skip("no committed verdicts")
    c = with_rows[0]
    (dst / c["call"] / "verdicts.parquet").unlink()
    del c["files"][f"{c['call']}/verdicts.parquet"]
    prov["calls"].reverse()
    (dst / "provenance.json").write_text(json.dumps(prov))
    errs = R.validate(dst)
    assert any("no verdicts.parquet" in e for e in errs)
    assert any("device-time order" in e for e in errs)


def test_command_flags_and_auto_notes():
    cmd = "experiments/fla640/run.py --quick --only-verifier --max-tasks 1 --budget-s 150 --out /x"
    assert R.command_flag(cmd, "--max-tasks") == "1" and R.command_flag(cmd, "--only-verifier") == ""
    assert R.command_flag(cmd, "--skip-verifier") is None and R.command_flag("a --budget-s=9", "--budget-s") == "9"
    direct = {"cells": [], "verifier": [{"id": "fla640/gdn/K64/bfloat16"}], "skipped": []}
    notes = R.auto_notes("results", {"command": cmd, "budget_s": 150.0}, direct)
    assert notes == ["--only-verifier: the plan held its verifier pairs only (no direct cells).",
                     "--max-tasks 1: the plan was cut to its first 1 task(s) before the run.",
                     "1 task(s) ran, 0 skipped."]
    skipped = {"cells": [], "verifier": [], "skipped": [{"task": "t", "left_s": 4.0, "estimate_s": 20.0}]}
    att = R.auto_notes("attempt", {"command": "run.py", "budget_s": 10.0}, skipped)
    assert att[0].startswith("0 task(s) ran, 1 skipped by the time budget (10.0 s; 4 s left")
    assert "attempt only" in att[1]


def test_collect_keeps_the_entries_of_calls_it_is_not_given(tmp_path, prov):
    dst = _copy(tmp_path)
    res = [c for c in prov["calls"] if c["role"] == "results"]
    doc = R.collect(dst, [(res[-1]["call"], dst / res[-1]["call"])])  # in place, no hand note this time
    again = {c["call"]: c for c in doc["calls"]}
    assert set(again) == {c["call"] for c in prov["calls"]}
    for c in prov["calls"]:
        if c["call"] != res[-1]["call"]:
            assert again[c["call"]] == c
    assert R.validate(dst) == []
