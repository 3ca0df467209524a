"""lethe.kernels.gdn.native.bench_wgmma in dry-run mode: the tensor-core K1 stage with the kernel's float64 bf16
replay standing in for it (correctness rows first, a timing row only once they pass, the floor from the bytes);
the tensor-core K2 stage, which has no CPU stand-in, records that it did not run."""

import torch

from lethe.kernels.gdn.native import bench, bench_wgmma


def test_k1_wgmma_stage_checks_then_times(tmp_path):
    run = bench.BenchRun(out_dir=tmp_path, device="cpu")
    out = {"ceilings": {"copy_GBps": 100.0, "fp32_matmul_TFLOPs": 1.0}}
    bench_wgmma.k1_wgmma_stage(run, out, quick=True)
    rows = out["k1_wgmma_correctness"]
    assert [(r["V"], r["erase"], r["split"], r["T"], r["B"], r["H"]) for r in rows] == [
        (128, True, False, 200, 1, 2), (64, False, False, 200, 1, 2), (128, True, True, 200, 1, 2),
        (64, False, True, 200, 1, 2)]
    assert all(r["passed"] and r["finite"] and r["bitwise_3runs"] for r in rows)
    (t,) = out["k1_wgmma_timing"]
    flops, nbytes = bench.k1_counts(2, 2, 64)
    assert (t["T"], t["V"], t["BH"], t["flops"], t["bytes_bf16_operands"]) == (128, 64, 2, flops, nbytes // 2)
    assert t["floor_bytes_ms"] == bench.bytes_floor_ms(nbytes / 2, out["ceilings"])
    assert t["wgmma_over_floor"] == t["wgmma_ms"] / t["floor_bytes_ms"] and "simt_ms" not in t  # no SIMT K1 on a CPU
    assert "k1_wgmma_timing" in (tmp_path / "bench.json").read_text()


def test_k1_wgmma_stand_in_is_the_bf16_replay():
    launch = bench_wgmma.k1_wgmma_impl(bench.BenchRun(device="cpu"))
    sets = bench.synth_k1(bench.BenchRun(device="cpu"), 2, 3, 64, seed=1)
    flat = [x.reshape(6, *x.shape[2:]).double() for x in sets[:6]]
    dSN, dd, dS0 = launch(*flat, sets[6].double(), 3)
    assert dSN.shape == (6, 128, 64) and dd.shape == (6, 64, 64) and dS0.shape == (2, 128, 64)
    assert all(bool(torch.isfinite(x).all()) for x in (dSN, dd, dS0))


def test_k2_wgmma_stage_has_no_dry_run():
    out = {}
    bench_wgmma.k2_wgmma_stage(bench.BenchRun(device="cpu"), out, quick=False)
    assert out == {"k2_wgmma_skipped": "dry run: the tensor-core K2 has no CPU stand-in"}
