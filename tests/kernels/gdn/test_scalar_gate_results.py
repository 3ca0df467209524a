"""The current result of the scalar-gate path (results/gdn/scalar_gate/, experiments/gdn/scalar_gate_bench.py)
checked on the CPU: each run is well-formed and names its commit, our rows passed their float64 check and repeated
bit for bit before anything was timed, the newest run ran the launch table the code now has, and the tables
divide only medians of one run. A launch default changed without its measurement, or a result edited by hand,
fails here."""

from pathlib import Path

import pytest
from lethe.kernels.gdn import tables

from lethe.results import load_history, load_runs

ROOT = Path(__file__).resolve().parents[3]
FOLDER = ROOT / "results" / "gdn" / "scalar_gate"
RESULT = FOLDER / "scalar_gate_bench.json"


def _runs():
    return [{**doc, "provenance": prov, "run": name} for name, doc, prov in load_runs(RESULT)]


@pytest.mark.parametrize("i", range(len(load_runs(RESULT))))
def test_runs_are_well_formed_and_checked_before_timing(i):
    """Every current run is the bench's schema from the H200, named in the history as current, and timed only
    after our rows passed their float64 pin and repeated bit for bit."""
    doc = _runs()[i]
    prov = doc["provenance"]
    assert doc["schema"] == "lethe.gdn.scalar_gate_bench/1"
    assert prov["gpu"] == "NVIDIA H200" and prov["git_sha"]
    assert {"run": doc["run"], "status": "current", "git_sha": prov["git_sha"]}.items() <= next(
        h for h in load_history(FOLDER) if h["run"] == doc["run"]).items()
    assert doc["meta"]["ours_correct"] is True
    ours = [r for r in doc["correctness"] if r["impl"] == "ours"]
    assert ours, "a run with no correctness rows of ours"
    for r in ours:
        assert r["finite"] and r["worst"] <= doc["meta"]["pin"] and r["bitwise_repeat"]
        # the per-tensor errors are kept to 4 significant digits
        assert abs(r["worst"] - max(r["errors_vs_float64"].values())) <= 5e-4 * r["worst"]
    for r in doc["timing"]:
        if "fwd_bwd_ms" in r:
            assert 0 < r["fwd_ms"] < r["fwd_bwd_ms"] and 0 < r["bwd_ms"] < r["fwd_bwd_ms"]
            assert r["head_tokens"] == 2**20 and r["rounds"] == r["input_sets"] * 5


def test_newest_call_ran_the_current_launch_table():
    from lethe.kernels.gdn.scalar_gate import SG_LAUNCH

    assert _runs()[-1]["meta"]["sg_launch"] == SG_LAUNCH


def test_the_call_with_fla_has_every_cell_of_ours_and_fla():
    withfla = [d for d in _runs() if any(r["impl"] == "fla" for r in d["timing"])]
    assert withfla
    doc = withfla[-1]
    cells = {(r["V"], r["T"]) for r in doc["timing"]}
    for V, T in cells:
        impls = {r["impl"] for r in doc["timing"] if (r["V"], r["T"]) == (V, T) and "fwd_bwd_ms" in r}
        assert {"ours", "fla"} <= impls, (V, T)


def _doc(sha, timing, correctness=()):
    return {"provenance": {"git_sha": sha}, "meta": {"pin": 5e-3}, "timing": list(timing),
            "correctness": list(correctness)}


def _t(impl, ms, V=128, T=4096):
    return {"impl": impl, "V": V, "T": T, "B": 2**20 // (2 * T), "H": 2, "fwd_ms": ms / 3, "bwd_ms": 2 * ms / 3,
            "fwd_bwd_ms": ms}


def test_ratios_never_mix_calls():
    rows = tables.scalar_gate_timing_rows([_doc("aaaaaaa", [_t("ours", 20.0), _t("fla", 10.0)]),
                                           _doc("bbbbbbb", [_t("ours", 12.0)])], {})
    assert [r["ratio"] for r in rows] == ["2.00x", "-"]
    assert rows[1]["fla"] == "not timed" and rows[1]["commit"] == "bbbbbbb"


def test_check_rows_recompute_the_pin():
    bad = {"impl": "ours", "V": 64, "T": 1024, "worst": 6e-3, "worst_tensor": "dq", "finite": True,
           "bitwise_repeat": True}
    rows = tables.scalar_gate_check_rows([_doc("ccccccc", [], [bad])])
    assert rows[0]["within"] == "no" and rows[0]["fla"] == "-"
