"""lethe.perf on the CPU: roofline floors, the quantile, the one timing runner's bookkeeping (wall clock
without CUDA), and the fla autotune policy's patch of Triton's Autotuner (fla itself cannot run here)."""

import time

import pytest

from lethe.perf import fla_autotune, roofline, timing


def test_roofline_and_quantile():
    assert roofline.roofline_ms(1e12, 1e9, 1000.0, 1.0) == pytest.approx(1.0)  # compute-bound: 1 ms
    assert roofline.roofline_ms(1e9, 4e12, 1000.0, 4.0) == pytest.approx(1000.0)  # memory-bound: 1 s
    xs = [5.0, 1.0, 3.0, 2.0, 4.0]
    assert timing.quantile(xs, 0.5) == 3.0 and timing.quantile(xs, 0.0) == 1.0 and timing.quantile(xs, 1.0) == 5.0
    assert timing.quantile(xs, 0.1) == pytest.approx(1.4)  # numpy's linear interpolation
    assert roofline.memory_ms(4e12, 4.0) == pytest.approx(1000.0)
    assert roofline.memory_ms(4e9, 4.0) == roofline.roofline_ms(0, 4e9, 1.0, 4.0)


def test_fp32_ceilings_on_the_cpu_restore_tf32():
    import torch

    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        c = roofline.measure_fp32_ceilings("cpu", copy_elems=1 << 10, m=16)
        assert set(c) == {"copy_GBps", "fp32_matmul_TFLOPs"} and c["copy_GBps"] > 0 and c["fp32_matmul_TFLOPs"] > 0
        assert torch.backends.cuda.matmul.allow_tf32 is True
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev



def test_select_configs():
    cfgs = list(range(10))
    assert fla_autotune.select_configs(cfgs, 0) == cfgs and fla_autotune.select_configs(cfgs, 20) == cfgs
    assert fla_autotune.select_configs(cfgs, 3, "first") == [0, 1, 2]
    assert fla_autotune.select_configs(cfgs, 2) == [0, 9]
    assert fla_autotune.select_configs(cfgs, 4) == [0, 3, 6, 9]
    assert fla_autotune.select_configs(cfgs, 1) == [0]
    with pytest.raises(ValueError):
        fla_autotune.select_configs(cfgs, 2, "best")


def test_autotune_policy_registers_only_fla_tuners_and_resets():
    import triton
    from triton.runtime.autotuner import Autotuner

    orig = (Autotuner.__init__, Autotuner.prune_configs, Autotuner.run)
    events = []
    policy = fla_autotune.FlaAutotunePolicy(sink=events.append)
    policy.install()
    try:
        tuned = triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (16, 32, 64)], key=["x_ptr"])(
            triton.jit(_fake_fla_kernel))
        mine = triton.autotune(configs=[triton.Config({"BLOCK": 16})], key=[])(triton.jit(_not_fla_kernel))
        assert policy.tuners == [tuned] and mine not in policy.tuners
        tuned.cache[("k",)] = tuned.configs[0]
        tuned.cache_results = True
        assert policy.reset("test") == 1 and tuned.cache == {} and tuned.cache_results is False
        assert events[-1]["kind"] == "autotune_reset"
        # the cap is applied inside prune_configs, to fla's tuners only
        policy.set_max_configs(2, "test")
        tuned.nargs = {}
        policy.parallel = False
        assert [c.kwargs["BLOCK"] for c in tuned.prune_configs({})] == [16, 64]
        assert tuned._lethe_event["declared"] == 3 and tuned._lethe_event["benchmarked"] == 2
        assert len(mine.prune_configs({})) == 1
        assert events[-1]["kind"] == "autotune_policy_change" and policy.describe()["max_configs"] == 2
    finally:
        policy.uninstall()
    assert (Autotuner.__init__, Autotuner.prune_configs, Autotuner.run) == orig


def _not_fla_kernel(x_ptr, BLOCK: "tl.constexpr"):  # noqa: F821 - annotation only, never compiled
    pass


def _fake_fla_kernel(x_ptr, BLOCK: "tl.constexpr"):  # noqa: F821
    pass


_fake_fla_kernel.__module__ = "fla.ops.fake"  # what the policy keys on: kernels defined in fla.* modules


def test_time_stages_times_only_the_stages_and_chains_them():
    """The setup is outside the timed region, each stage receives the previous one's result, the iteration index
    reaches every call (warm-up first), and the total of an iteration is the sum of its stages."""
    seen = []

    def setup(i):
        time.sleep(0.2)
        return 10 * i

    def first(i, x):
        seen.append(("first", i, x))
        time.sleep(0.002)
        return x + 1

    def second(i, x):
        seen.append(("second", i, x))
        return x

    t = timing.time_stages([first, second], 3, cuda=False, warmup=1, setup=setup)
    assert seen == [("first", 0, 0), ("second", 0, 1), ("first", 0, 0), ("second", 0, 1), ("first", 1, 10),
                    ("second", 1, 11), ("first", 2, 20), ("second", 2, 21)]
    assert len(t.total) == 3 and [len(s) for s in t.stages] == [3, 3]
    assert all(ms < 150 for ms in t.total)  # the 200 ms setup is not in the timed region
    assert all(ms >= 2 for ms in t.stages[0])
    assert all(tot == pytest.approx(a + b) for tot, a, b in zip(t.total, *t.stages, strict=True))
    assert t.median() == pytest.approx(sorted(t.total)[1])


def test_time_ms_runs_warmup_then_the_timed_calls():
    """Warm-up calls are not samples; one sample per timed call; a setup's value reaches the timed call."""
    calls = []
    ms = timing.time_ms(calls.append, 4, cuda=False, warmup=2)
    assert calls == [0, 1, 0, 1, 2, 3] and len(ms) == 4 and all(x >= 0 for x in ms)
    got = []
    timing.time_ms(lambda i, x: got.append((i, x)), 2, cuda=False, setup=lambda i: -i)
    assert got == [(0, 0), (1, -1)]
    s = timing.summary_ms([3.0, 1.0, 2.0])
    assert s == {"median_ms": 2.0, "spread_ms": [1.0, 3.0]}
    assert timing.summary_ms([1 / 3, 1.0]) == {"median_ms": 0.6667, "spread_ms": [0.3333, 1.0]}
    assert timing.summary_ms([1 / 3, 1.0], digits=None) == {"median_ms": (1 / 3 + 1.0) / 2, "spread_ms": [1 / 3, 1.0]}


def test_warm_runs_untimed_calls_and_wall_s_times_one_call():
    seen = []
    assert timing.warm(seen.append, 3, cuda=False) is None
    assert seen == [0, 1, 2]
    assert timing.wall_s(lambda: time.sleep(0.01), cuda=False) >= 0.01
