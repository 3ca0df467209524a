"""lethe.kernels.gdn.native.bench on the CPU: the run context (progress, budget, save, the timing runner rotated
over input sets), the counts and floors, the synthetic operands, and the SIMT K2 stages in dry-run mode (the
torch code standing in for the native kernels). The driver end to end: test_k2_bench_render.py."""

import json
import re
import time

import pytest
import torch

from lethe.kernels.gdn.native import bench
from lethe.perf.roofline import roofline_ms


def cpu_run(tmp_path=None, **kw):
    return bench.BenchRun(out_dir=tmp_path, device="cpu", **kw)


def test_run_context_progress_budget_and_save(tmp_path, capsys):
    run = cpu_run(tmp_path)
    assert not run.cuda and bench.BenchRun().cuda
    run.progress("hello")
    assert re.fullmatch(r"\[t= *\d+\.\ds\] hello\n", capsys.readouterr().out)
    assert not run.over_budget()  # no budget
    assert cpu_run(budget_s=-1).over_budget() and not cpu_run(budget_s=1e9).over_budget()
    run.save({"b": 1, "a": _StrOnly()})
    saved = (tmp_path / "bench.json").read_text()
    assert json.loads(saved) == {"a": "P", "b": 1} and saved.index('"a"') < saved.index('"b"')  # sorted, str()
    cpu_run(None).save({"x": 1})  # no folder: nothing written, no error


class _StrOnly:
    def __str__(self):
        return "P"


def test_run_time_rotates_over_the_input_sets_after_the_warmup():
    calls = []
    med, lo, hi = cpu_run().time(calls.append, ["s0", "s1", "s2"], reps=4, warm=2)
    assert calls == ["s0", "s1", "s0", "s1", "s2", "s0"]  # 2 warm-up calls, then 4 timed ones, index mod sets
    assert 0 <= lo <= med <= hi
    calls.clear()
    cpu_run().time(calls.append, [0])  # defaults: 2 warm-up, 10 timed
    assert len(calls) == 12


def test_counts_and_floors():
    flops, nbytes = bench.k1_counts(2, 3, 64)
    C, K, V = bench.C, bench.K, 64
    assert flops == 2 * 3 * (2 * (C * C * V + 3 * C * K * V) + K * V)
    assert nbytes == 4 * 2 * (3 * (C * C + 3 * C * K + K + C * V) + K * V + 3 * (K * V + C * V) + K * V)
    f_ne, b_ne = bench.k1_counts(2, 3, 64, erase=False)
    assert f_ne < flops and b_ne < nbytes
    f2, b2 = bench.k2_counts(5, 128)
    assert b2 == 4 * 5 * ((2 * C * 128 + K * 128 + C * C + C * K) + (C * K + C * 128 + C * C)) and f2 > 0
    ceil = {"copy_GBps": 4000.0, "fp32_matmul_TFLOPs": 50.0}
    # the floors the script computed before they came from lethe.perf.roofline
    old = max(nbytes / (4000.0 * 1e9), flops / (50.0 * 1e12)) * 1e3
    assert bench.fp32_floor_ms(flops, nbytes, ceil) == pytest.approx(old, rel=1e-12)
    assert bench.fp32_floor_ms(flops, nbytes, ceil) == roofline_ms(flops, nbytes, 50.0, 4.0)
    assert bench.bytes_floor_ms(nbytes / 2, ceil) == pytest.approx(nbytes / 2 / (4000.0 * 1e9) * 1e3, rel=1e-12)


def test_synthetic_operands_have_the_kernel_shapes_and_are_seeded():
    run = cpu_run()
    P, Kend, Qg, Wm, GC, dO, dSF = bench.synth_k1(run, 2, 3, 64, seed=1)
    assert P.shape == (2, 3, 64, 64) and torch.equal(P, torch.tril(P)) and dO.shape == (2, 3, 64, 64)
    assert Kend.shape == Qg.shape == Wm.shape == (2, 3, 64, 128) and GC.shape == (2, 3, 128)
    assert dSF.shape == (2, 128, 64) and bool((GC >= 0.9).all()) and bool((GC <= 1.0).all())
    assert torch.equal(bench.synth_k1(run, 2, 3, 64, seed=1)[0], P)
    dd, Hs, Tm, Xe, uc = bench.synth_k2(run, 4, 64, seed=2)
    assert Tm.shape == (4, 64, 64) and torch.equal(torch.diagonal(Tm, dim1=-2, dim2=-1), torch.ones(4, 64))
    assert torch.equal(torch.triu(Tm, 1), torch.zeros_like(Tm))
    q, k, gam, W, dO_t, dSF_t = bench.synth_triton(run, 2, 3, 64, seed=3)
    assert q.shape == (1, 2, 192, 128) and dO_t.shape == (1, 2, 192, 64) and dSF_t.shape == (1, 2, 128, 64)
    q_, k_, v_, g_, b_, w_, do_, dS_ = bench.gdn_inputs(run, 1, 2, 70, 64, torch.bfloat16, seed=5, erase=False)
    assert b_ is None and q_.dtype == torch.bfloat16 and dS_.dtype == torch.float32 and bool((g_ <= 0).all())


def test_dry_run_k2_stages_in_process(tmp_path):
    run = cpu_run(tmp_path)
    out = {"ceilings": bench.ceilings(run)}
    assert set(out["ceilings"]) == {"copy_GBps", "fp32_matmul_TFLOPs"}
    bench.check_k2_correctness(run, out)
    assert [r["V"] for r in out["k2_correctness"]] == [64, 128] and all(r["passed"] for r in out["k2_correctness"])
    bench.time_k2(run, out, quick=False)
    rows = out["k2_timing"]
    assert [(r["T"], r["V"], r["BH"]) for r in rows] == [(128, 64, 2), (256, 64, 2), (128, 128, 2), (256, 128, 2)]
    assert all(r["native_ms"] > 0 and r["floor_ms"] > 0 and r["native_vs_torch_rel_dA"] == 0.0 for r in rows)
    assert json.loads((tmp_path / "bench.json").read_text())["k2_timing"] == json.loads(json.dumps(rows))


def test_budget_skips_timing_rows(tmp_path):
    run = cpu_run(tmp_path, budget_s=0.0, start=time.perf_counter() - 1)
    out = {}
    bench.time_backward(run, out, quick=False)
    assert all(r["skipped"] == "budget" for r in out["backward_timing"]) and len(out["backward_timing"]) == 4
