"""Triton helpers the Mamba kernels share."""

import torch
import triton
import triton.language as tl


def accum_dtype(x: torch.Tensor) -> torch.dtype:
    """The kernels' arithmetic (and saved-state) dtype: float64 for float64 inputs -- the kernels then run the
    same code in double precision, which is how their algebra is checked against the oracle to float64
    accuracy -- float32 for everything narrower."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def tl_dtype(dtype: torch.dtype):
    return {torch.float64: tl.float64, torch.float32: tl.float32}[dtype]


@triton.jit
def round_to(x, dtype: tl.constexpr):
    """float32 ``x`` rounded to ``dtype`` to nearest, ties to even, on every backend.

    A plain ``x.to(tl.bfloat16)`` rounds to nearest on the GPU but truncates under Triton 3.6's CPU interpreter
    (measured: stores one bf16 ulp off where round-to-nearest is half an ulp), so a tolerance derived for a rounded
    result would not hold there. For bf16 the rounding is done on the bits -- add half an ulp (minus one on an
    even mantissa), clear the low 16 bits -- after which the conversion is exact under either behaviour; NaNs are
    passed through untouched (the bit trick could carry a NaN's payload into an infinity)."""
    if dtype == tl.bfloat16:
        bits = x.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        r = bits.to(tl.float32, bitcast=True)
        return tl.where(x != x, x, r).to(dtype)
    else:
        return x.to(dtype)


@triton.jit
def conv_window(x_ptr, xrow, t, offs_d, offs_k, mt, mk, wt, bias, DM, HAS_BIAS: tl.constexpr, CD: tl.constexpr):
    """The fused block's causal depthwise conv at output step ``t`` for a channel block: the window of x rows
    ``t .. t + K - 1`` (``[BLOCK_D, BLOCK_K]``; x carries its K - 1 history rows first, so output step t reads them
    whatever chunk t falls in) and ``p_t = sum_j w_j x_{t+j} (+ c0)``. Returns ``(window, p)``: the backward needs
    the window again for the weight's gradient. ``bias`` is not read without ``HAS_BIAS``."""
    xw = tl.load(x_ptr + (xrow + t + offs_k[None, :]) * DM + offs_d[:, None], mask=mt[:, None] & mk[None, :],
                 other=0.0).to(CD)
    p = tl.sum(xw * wt, axis=1)
    if HAS_BIAS:
        p += bias
    return xw, p
