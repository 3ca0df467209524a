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
