"""Roofline floors: the time a kernel cannot beat at given compute and memory ceilings, the ceilings measured
on the device, and the spec-sheet ceilings (always labelled as such where they are used)."""

from __future__ import annotations

import statistics

from .timing import time_ms

#: NVIDIA H200 SXM datasheet: dense tensor-core rates (half the sparse figures) and HBM3e bandwidth. Spec, not
#: measured: every row that uses it says so.
SPEC_H200 = {"bf16_dense_tflops": 989.0, "tf32_dense_tflops": 494.0, "hbm_tbps": 4.8,
             "source": "NVIDIA H200 SXM datasheet (dense tensor-core rates; spec, not measured)"}

CEILINGS_METHOD = ("median of 10 CUDA-event timings: 8192^3 matmul (bf16; fp32 with TF32 allowed), copy of 2 GiB "
                   "counted as read + write")


def roofline_ms(flops: float, nbytes: float, tflops: float, tbps: float) -> float:
    """max(compute time, memory time) in ms at the given ceilings (TFLOP/s, TB/s)."""
    return max(flops / (tflops * 1e12), nbytes / (tbps * 1e12)) * 1e3


def memory_ms(nbytes: float, tbps: float) -> float:
    """The memory time alone in ms (moving ``nbytes`` at ``tbps`` TB/s): the floor of a kernel whose compute
    ceiling was not measured."""
    return nbytes / (tbps * 1e12) * 1e3


def measure_fp32_ceilings(device: str = "cuda", copy_elems: int = 1 << 28, m: int = 8192) -> dict:
    """Copy bandwidth (GB/s, ``copy_elems`` float32 each way, counted as read + write; median of 10 timings) and
    the true float32 matmul rate (TFLOP/s, m^3, TF32 off; median of 5) on ``device``, 2 warm-up calls each, from
    the one runner (:func:`lethe.perf.timing.time_ms`): the ceilings of the float32 native kernels' floors
    (:mod:`lethe.kernels.gdn.native.bench`). On ``"cpu"`` the runner's wall clock stands in (a dry run's
    plumbing, no numbers). TF32 is off while the matmul is timed and restored after."""
    import torch

    cuda = device != "cpu"

    def median(fn, reps):
        return statistics.median(time_ms(lambda i: fn(), reps, cuda=cuda, warmup=2))

    x = torch.randn(copy_elems, device=device)
    y = torch.empty_like(x)
    bw = 2 * copy_elems * 4 / (median(lambda: y.copy_(x), 10) * 1e-3)
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        a = torch.randn(m, m, device=device)
        b = torch.randn(m, m, device=device)
        mm = median(lambda: a @ b, 5)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev
    return {"copy_GBps": bw / 1e9, "fp32_matmul_TFLOPs": 2 * m**3 / (mm * 1e-3) / 1e12}


def measure_ceilings(n: int = 8192, copy_bytes: int = 2**31, reps: int = 10, warmup: int = 3) -> dict:
    """bf16 and TF32 dense matmul rates and device-to-device copy bandwidth on the current CUDA device, each the
    median of ``reps`` timings of the one runner (:func:`lethe.perf.timing.time_ms`). Needs CUDA."""
    import torch

    def rate(fn):
        return statistics.median(time_ms(lambda i: fn(), reps, cuda=True, warmup=warmup))

    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    bf16 = 2 * n**3 / (rate(lambda: a @ b) * 1e-3) / 1e12
    a, b = a.float(), b.float()
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        tf32 = 2 * n**3 / (rate(lambda: a @ b) * 1e-3) / 1e12
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev
    a = b = None  # free before the copy buffers
    x = torch.empty(copy_bytes, device="cuda", dtype=torch.uint8)
    y = torch.empty_like(x)
    copy = 2 * x.numel() / (rate(lambda: y.copy_(x)) * 1e-3) / 1e12  # read + write
    x = y = None
    torch.cuda.empty_cache()
    return {"measured": True, "bf16_matmul_tflops": bf16, "tf32_matmul_tflops": tf32, "copy_tbps": copy,
            "method": CEILINGS_METHOD}
