"""lethe.foreign.ingest: the experiment's append-only logs -> the small committed files (CPU, synthetic rows)."""

import json
from pathlib import Path

import pandas as pd
import pytest

from lethe.foreign import ingest
from lethe.verifier.records import make_row, read_rows

ROOT = Path(__file__).resolve().parents[2]
SUBSET = ROOT / "data" / "sakana_subset" / "subset.jsonl"

LOG = """[sakana] 3 rows, device=cuda
[lethe-ext] sakana_aaaa via load_inline in 83.14 s
[compile] L2-T1-dup: True 83.1s
[lethe-ext] sakana_bbbb via load_inline in 59.03 s
[compile] L2-T1-dup: True 59.0s
[sakana] compile phase: 2/3 built (3 this run) in 315.8 s wall
"""
LOG2 = "[sakana] compile phase: 2/3 built (1 this run) in 0.0 s wall\n"


def _item(pos, i, ext, correct=True, err=""):
    return {"position": pos, "id": i, "level": 2, "task": 1, "op_name": "op", "op_class": "conv",
            "sakana_correct": correct, "ext_name": ext, "extract_error": err}


def test_selection_args_read_the_command_line():
    cmd = "python3 experiments/foreign/sakana_h200.py --out /x --levels 1,2 --limit 50 --phases kb"
    assert ingest.selection_args(cmd) == {"levels": "1,2", "limit": 50}
    assert ingest.selection_args("python3 sakana_h200.py --out /x") == {"levels": "1,2,3", "limit": 0}


def test_parse_logs_takes_the_call_that_built():
    parsed = ingest.parse_logs([LOG, LOG2])
    assert parsed["compile_wall_s"] == 315.8 and parsed["builds_this_run"] == 3
    assert parsed["load_inline_s"] == {"sakana_aaaa": 83.14, "sakana_bbbb": 59.03}
    assert ingest.parse_logs([LOG2])["compile_wall_s"] is None


def test_compile_table_tells_kernels_with_one_id_apart_and_keeps_every_kernel():
    items = [_item(0, "L2-T1-dup", "sakana_bbbb"), _item(1, "L2-T1-x", None, correct=False, err="ConversionError: e"),
             _item(2, "L2-T1-dup", "sakana_aaaa"), _item(3, "L2-T1-retry", "sakana_cccc"),
             _item(4, "L2-T1-broken", "sakana_dddd")]
    attempts = [{"id": "L2-T1-dup", "compiled": True, "compile_seconds": 83.8, "error": ""},
                {"id": "L2-T1-dup", "compiled": True, "compile_seconds": 59.1, "error": ""},
                {"id": "L2-T1-retry", "compiled": False, "compile_seconds": 5.0, "error": "nvcc died"},
                {"id": "L2-T1-retry", "compiled": True, "compile_seconds": 70.0, "error": ""},
                {"id": "L2-T1-broken", "compiled": False, "compile_seconds": 61.5, "error": "x" * 5000}]
    table = ingest.compile_table(items, attempts, ingest.parse_logs([LOG])["load_inline_s"])
    assert [r["position"] for r in table] == [0, 1, 2, 3, 4]
    assert table[0]["compile_seconds"] == 59.1 and table[2]["compile_seconds"] == 83.8
    assert table[1] == {**{k: table[1][k] for k in table[1]}, "candidate_extracted": False,
                        "build_attempted": False, "compiled": False, "compile_seconds": None,
                        "error": "ConversionError: e", "sakana_correct": False}
    assert table[3]["compiled"] and table[3]["compile_seconds"] == 70.0  # the successful retry wins
    assert not table[4]["compiled"] and len(table[4]["error"]) == 1500


@pytest.mark.skipif(not SUBSET.exists(), reason="data/sakana_subset not present")
def test_select_items_follows_the_experiment_order():
    from lethe.corpora import sakana

    rows = sakana.load_rows(SUBSET)
    items = ingest.select_items(rows, "1,2", 50)
    assert len(items) == 50 and [i["position"] for i in items] == list(range(50))
    assert {i["level"] for i in items} == {1, 2}
    assert items[0]["id"] == "L1-T1-block_size_optimized_base" and items[0]["sakana_correct"]
    assert sum(i["ext_name"] is None for i in items) == 1  # one source has no PYBIND11_MODULE block
    assert len(ingest.select_items(rows, "3", 0)) == sum(str(r["Level_ID"]) == "3" for r in rows)


@pytest.mark.skipif(not SUBSET.exists(), reason="data/sakana_subset not present")
def test_ingest_end_to_end(tmp_path):
    src, dest = tmp_path / "src", tmp_path / "dest"
    src.mkdir()
    ids = ["L1-T1-block_size_optimized_base", "L1-T1-stride_loop_matmul_base"]
    cmd = "python3 experiments/foreign/sakana_h200.py --out /o --levels 1 --limit 3 --workers 4"
    (src / "provenance.json").write_text(json.dumps({"gpu": "NVIDIA H200", "command": cmd, "git_sha": "0" * 40}))
    (src / "compile.jsonl").write_text("".join(
        json.dumps({"id": i, "compiled": True, "compile_seconds": 90.0 + k, "error": ""}) + "\n"
        for k, i in enumerate(ids)))
    rows = [make_row(id=i, profile=p, corpus="sakana-subset", seconds=1.0) for i in ids
            for p in ("strict", "cuda-default", "fast-math")]
    (src / "rows.checkpoint.jsonl").write_text("".join(json.dumps({**r, "sakana_correct": True}) + "\n"
                                                       for r in rows))
    (src / "timings.jsonl").write_text(
        json.dumps({"id": ids[0], "status": "gated", "reference_s": 28.0, "candidate_s": 9.0, "grade_s": 3.0,
                    "seconds": 39.0, "slowest_probes": [["rand0", 0.2]]}) + "\n"
        + json.dumps({"id": ids[1], "status": "gated", "reference_s": 0.02, "candidate_s": 4.0, "grade_s": 2.0,
                      "seconds": 5.0}) + "\n")
    (src / "kb.jsonl").write_text("".join(json.dumps({"id": i, "outcome": "correct", "correct": True,
                                                      "seconds": 1.0}) + "\n" for i in ids))
    (src / "gpu.txt").write_text("name\nNVIDIA H200\n")
    log = tmp_path / "run1.log"
    log.write_text("[sakana] compile phase: 2/3 built (2 this run) in 120.5 s wall\n")
    tp = ingest.ingest(src, dest, logs=[log], subset=SUBSET, published_rows=None, scaling_note="not measured (x)",
                       notes=["n1"])
    assert tp["per_kernel_s"]["n"] == 2 and tp["per_kernel_cold_s"]["ids"] == [ids[0]]
    assert tp["compile_s"]["wall_parallel"] == 120.5 and tp["compile_s"]["workers"] == 4
    assert tp["selected"] == 3 and tp["scaling"] == "not measured (x)" and tp["goal"]["met"] is False
    assert len(read_rows(dest / "rows.parquet")) == 6
    comp = pd.read_parquet(dest / "compile.parquet")
    assert comp["position"].tolist() == [0, 1, 2] and comp["compiled"].tolist() == [True, True, False]
    tim = pd.read_parquet(dest / "timings.parquet")
    assert tim["battery_s"].tolist() == [40.0, 6.02] and tim["cold_reference"].tolist() == [True, False]
    prov = json.loads((dest / "provenance.json").read_text())
    assert prov["gpu"] == "NVIDIA H200" and prov["ingest"]["notes"] == ["n1"]
    assert set(prov["ingest"]["source_sha256"]) == {"compile.jsonl", "kb.jsonl", "rows.checkpoint.jsonl",
                                                    "timings.jsonl"}
    assert (dest / "run1.log").exists() and (dest / "gpu.txt").exists()


@pytest.mark.skipif(not SUBSET.exists(), reason="data/sakana_subset not present")
def test_kernels_sharing_a_slice_id_get_distinct_committed_ids():
    """Two level-2 sources of the slice share one id; committed rows are keyed by id, so each gets its own
    (slice id + source-hash digits), and the experiment's records (carrying uid) follow their kernel."""
    from collections import Counter

    from lethe.corpora import sakana

    items = ingest.select_items(sakana.load_rows(SUBSET), "2", 0)
    slice_dups = [k for k, n in Counter(i["slice_id"] for i in items).items() if n > 1]
    assert slice_dups, "the slice is known to hold a shared level-2 id"
    assert len({i["id"] for i in items}) == len(items)
    twins = [i for i in items if i["slice_id"] == slice_dups[0]]
    assert all(i["id"].startswith(slice_dups[0] + "~") for i in twins)
    assert all(i["id"] == i["slice_id"] for i in items if i["slice_id"] not in slice_dups)
    recs = [{"id": t["slice_id"], "uid": t["uid"], "n": k} for k, t in enumerate(twins)]
    assert [r["id"] for r in ingest.unique_ids(recs, items)] == [t["id"] for t in twins]
    # build attempts carrying uid match exactly, whatever their order or times
    attempts = [{"id": t["slice_id"], "uid": t["uid"], "compiled": True, "compile_seconds": 50.0 + k, "error": ""}
                for k, t in reversed(list(enumerate(twins)))]
    table = {r["id"]: r for r in ingest.compile_table(twins, attempts)}
    assert [table[t["id"]]["compile_seconds"] for t in twins] == [50.0 + k for k in range(len(twins))]


def test_an_attempt_with_a_uid_is_never_given_to_its_twin():
    """Twins share a slice id; an attempt recorded with one twin's uid must not make the other look built."""
    twins = [{**_item(0, "X~aaa", "sakana_aaa"), "slice_id": "X", "uid": "X#a"},
             {**_item(1, "X~bbb", "sakana_bbb"), "slice_id": "X", "uid": "X#b"}]
    table = ingest.compile_table(twins, [{"id": "X", "uid": "X#a", "compiled": True, "compile_seconds": 12.0,
                                          "error": ""}])
    assert table[0]["compiled"] and not table[1]["build_attempted"] and not table[1]["compiled"]


def test_a_record_of_a_shared_slice_id_without_a_matching_uid_is_refused():
    items = [{"id": "X~aaa", "slice_id": "X", "uid": "X#a"}, {"id": "X~bbb", "slice_id": "X", "uid": "X#b"},
             {"id": "Y", "slice_id": "Y", "uid": "Y#c"}]
    assert ingest.unique_ids([{"id": "Y", "uid": "Y#old"}], items) == [{"id": "Y", "uid": "Y#old"}]
    with pytest.raises(ValueError, match="matches no selected kernel's uid"):
        ingest.unique_ids([{"id": "X", "uid": "X#old"}], items)
