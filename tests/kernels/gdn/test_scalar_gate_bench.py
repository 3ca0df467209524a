"""The scalar-gate benchmark's steps (lethe.kernels.gdn.scalar_gate_bench) on the CPU: the GPU run is
experiments/gdn/scalar_gate_bench.py on the H200; here the implementations are the torch chunked path, so the
check, the timing through lethe.perf.timing and the variant plumbing run in seconds."""

import argparse

import pytest

from lethe.kernels.gdn import scalar_gate_bench as SG
from lethe.kernels.gdn.bench import ours_fn

CFG = SG.BenchConfig(H=1, K=16, seed=0, head_tokens=64, check_head_tokens=32, sets=2, reps=2, warmup=1,
                     device="cpu")


@pytest.fixture
def torch_impls(monkeypatch):
    monkeypatch.setattr(SG, "impl_fn", lambda impl: (ours_fn("sgdn", "torch", 16), False))


def test_config_from_the_driver_flags():
    args = argparse.Namespace(H=2, K=128, seed=1, head_tokens=2**20, check_head_tokens=2**14, sets=3, reps=5,
                              warmup=3, variant_rel=1e-2, out="x", budget_s=400)
    cfg = SG.BenchConfig.from_args(args)
    assert cfg == SG.BenchConfig(H=2, K=128, seed=1, check_head_tokens=2**14) and cfg.device == "cuda"


def test_impl_names():
    with pytest.raises(ValueError):
        SG.impl_fn("nope")
    assert SG.impl_fn("ours")[1] is False and SG.impl_fn("general")[1] is False


def test_correctness_rows(torch_impls):
    logs = []
    rows = SG.correctness(["ours", "general"], 16, 32, CFG, logs.append)
    assert [r["impl"] for r in rows] == ["ours", "general"] and len(logs) == 2
    ours = rows[0]
    assert ours["B"] == 1 and ours["finite"] and ours["bitwise_repeat"] is True and "bitwise_repeat" not in rows[1]
    assert set(ours["errors_vs_float64"]) == {"o", "dq", "dk", "dv", "dg", "dbeta"}
    assert ours["within_pin"] == (ours["worst"] <= SG.PIN)


def test_time_impl_runs_through_the_timing_runner(torch_impls, monkeypatch):
    from lethe.perf import timing

    calls = []
    real = timing.time_stages

    def spy(stages, iterations, **kw):
        calls.append((iterations, kw.get("warmup", 0), kw["cuda"]))
        return real(stages, iterations, **kw)

    monkeypatch.setattr(timing, "time_stages", spy)
    row = SG.time_impl("ours", 16, 32, CFG)
    assert row["B"] == 2 and row["head_tokens"] == 64 and row["rounds"] == 4 and row["input_sets"] == 2
    for region in ("fwd", "bwd", "fwd_bwd"):
        assert row[f"{region}_ms"] > 0 and len(row[f"{region}_spread_ms"]) == 2
    # one shared warm-up, then three timed regions of reps * sets rounds each
    assert calls == [(0, 1, False), (4, 0, False), (4, 0, False), (4, 0, False)]


def test_variants_are_checked_against_the_default_then_timed(torch_impls):
    logs = []
    rows = SG.variants(["w8=sg_state_fwd_kernel:num_warps=8"], 16, 32, CFG, logs.append)
    (row,) = rows
    assert row["variant"] == "w8" and row["overrides"] == {"sg_state_fwd_kernel": {"num_warps": 8}}
    # the torch path ignores the launch table: bitwise the default, so it is timed
    assert row["bitwise"] and row["max_rel_vs_default"] == 0.0 and "fwd_bwd_ms" in row
    with pytest.raises(SystemExit, match="--variant"):
        SG.variants(["bad=no_such_kernel:BV=8"], 16, 32, CFG, logs.append)
