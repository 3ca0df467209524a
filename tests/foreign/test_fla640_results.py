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

pytestmark = pytest.mark.skipif(not (RES / R.RESULT).exists(), reason="fla640 results not committed yet")


@pytest.fixture(scope="module")
def prov():
    return json.loads((RES / R.RESULT).read_text())


def test_committed_results_follow_the_schema():
    assert R.validate(RES / R.RESULT) == []


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
        # folders are named by what they hold, never by the device call
        assert not (RES / c["call"]).exists() and not (RES / R.RUNS / c["call"]).exists()
        if c["role"] == "attempt":
            assert "folder" not in c and c["files"] == {}
            assert "attempt" in " ".join(c["notes"])
        else:
            # the bypass only means something when the guard was active and the TileLang backend off
            assert c["guard_state"]["would_refuse"] and c["fla_dispatch_disabled"]


def test_collect_rewrites_the_committed_entries(tmp_path, prov):
    """Re-collecting the committed run folders gives the same entries (the hand notes aside), the same folder names
    and provenance.json, and copies the files byte for byte, so the current result is what the collector writes,
    not a hand edit."""
    res = [c for c in prov["calls"] if c["role"] == "results"]
    doc = R.collect(tmp_path / "out", [(c["call"], RES / c["folder"]) for c in res])
    again = {c["call"]: c for c in doc["calls"]}
    for c in res:
        new = again[c["call"]]
        assert {k: v for k, v in new.items() if k != "notes"} == {k: v for k, v in c.items() if k != "notes"}
        assert c["notes"][: len(new["notes"])] == new["notes"]  # auto notes first, hand notes after
        for rel in c["files"]:
            assert (tmp_path / "out" / rel).read_bytes() == (RES / rel).read_bytes()
    assert (tmp_path / "out" / "provenance.json").read_bytes() == (RES / "provenance.json").read_bytes()
    committed = [json.loads(x) for x in (RES / "history.jsonl").read_text().splitlines()]
    assert [json.loads(x) for x in (tmp_path / "out" / "history.jsonl").read_text().splitlines()] == [
        h for h in committed if h["status"] == "current"]
    assert R.validate(tmp_path / "out" / R.RESULT) == []


def test_verdict_rows_are_the_generators_pairs():
    """The verified sources are what lethe.foreign.fla640 generates today: the renderer rebuilds each pair's probe
    plan from that generator, so a drift would make it describe a different plan."""
    for d in sorted(p for p in (RES / R.RUNS).iterdir() if (p / "verdicts.parquet").exists()):
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
    rel = next(rel for c in json.loads((dst / R.RESULT).read_text())["calls"] for rel in c["files"]
               if rel.endswith("direct.json"))
    doc = json.loads((dst / rel).read_text())
    doc["shapes"]["B"] += 1
    (dst / rel).write_text(json.dumps(doc))
    assert any("sha256" in e for e in R.validate(dst / R.RESULT))


def test_validate_rejects_an_attempt_with_files_and_a_bad_role(tmp_path):
    dst = _copy(tmp_path)
    prov = json.loads((dst / R.RESULT).read_text())
    prov["calls"][0]["role"] = "attempt"
    prov["calls"][-1]["role"] = "result"
    (dst / R.RESULT).write_text(json.dumps(prov))
    errs = R.validate(dst / R.RESULT)
    assert any("an attempt commits no files" in e for e in errs)
    assert any("role 'result'" in e for e in errs)


def test_validate_rejects_missing_verdicts_and_unordered_calls(tmp_path):
    dst = _copy(tmp_path)
    prov = json.loads((dst / R.RESULT).read_text())
    with_rows = [c for c in prov["calls"] if any(r.endswith("verdicts.parquet") for r in c["files"])]
    if not with_rows:
        pytest.skip("no committed verdicts")
    c = with_rows[0]
    (dst / c["folder"] / "verdicts.parquet").unlink()
    del c["files"][f"{c['folder']}/verdicts.parquet"]
    prov["calls"].reverse()
    (dst / R.RESULT).write_text(json.dumps(prov))
    errs = R.validate(dst / R.RESULT)
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
    doc = R.collect(dst, [(res[-1]["call"], dst / res[-1]["folder"])])  # in place, no hand note this time
    again = {c["call"]: c for c in doc["calls"]}
    assert set(again) == {c["call"] for c in prov["calls"]}
    for c in prov["calls"]:
        if c["call"] != res[-1]["call"]:
            assert again[c["call"]] == c
    assert again[res[-1]["call"]]["folder"] == res[-1]["folder"]  # the same tasks, the same folder
    assert R.validate(dst / R.RESULT) == []


def test_run_folders_are_named_by_the_tasks_they_hold():
    cell = {"op": "gdn", "dtype": "bfloat16", "T": 256}
    direct = {"cells": [{**cell, "K": 128}, {**cell, "K": 64}], "verifier": []}
    assert R.run_folder_name(direct) == "direct_gdn_K64-K128_bfloat16_T256"
    direct["verifier"] = [{"id": "fla640/sgla/K64/native/T256"}, {"id": "fla640/gdn/K128/bfloat16"}]
    assert R.run_folder_name(direct) == ("direct_gdn_K64-K128_bfloat16_T256__"
                                         "verify_gdn-sgla_K64-K128_bfloat16-native_T64-256")
    with pytest.raises(ValueError, match="attempt"):
        R.run_folder_name({"cells": [], "verifier": []})


def test_a_second_call_with_the_same_tasks_gets_its_own_folder(tmp_path, prov):
    res = [c for c in prov["calls"] if c["role"] == "results"]
    doc = R.collect(tmp_path / "out", [(c["call"], RES / c["folder"]) for c in res]
                    + [("again", RES / res[-1]["folder"])])
    folders = {c["call"]: c["folder"] for c in doc["calls"]}
    assert folders["again"] == folders[res[-1]["call"]] + "_2"
    # the newest results call's own provenance is the folder's provenance.json (utc_time ties: the last listed)
    assert R.validate(tmp_path / "out" / R.RESULT) == []


def test_validate_rejects_a_call_named_folder_strays_and_a_stale_history(tmp_path):
    dst = _copy(tmp_path)
    prov = json.loads((dst / R.RESULT).read_text())
    c = next(c for c in prov["calls"] if c["role"] == "results")
    old = c["folder"]
    (dst / old).rename(dst / R.RUNS / c["call"])
    c["folder"] = f"{R.RUNS}/{c['call']}"
    c["files"] = {rel.replace(old, c["folder"]): sha for rel, sha in c["files"].items()}
    (dst / R.RESULT).write_text(json.dumps(prov))
    errs = R.validate(dst / R.RESULT)
    assert any("is not named by what it holds" in e for e in errs)
    dst2 = _copy(tmp_path / "b")
    (dst2 / "call9").mkdir()
    (dst2 / "history.jsonl").write_text("")
    (dst2 / "provenance.json").write_text("{}")
    errs = R.validate(dst2 / R.RESULT)
    assert any("outside the layout" in e for e in errs)
    assert any("history.jsonl lists" in e for e in errs)
    assert any("newest results call's own provenance" in e for e in errs)
