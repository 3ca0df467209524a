"""The Triton path of the rotary state scan (C4), no ``tl.dot``.

Grid ``(batch * H, ceil(P / BLOCK_P))``. The state is held as two register tiles, the even rows and the odd rows
of each pair (``[BLOCK_K, BLOCK_P]`` each, BLOCK_K >= ceil(N / 2)), so the per-pair rotation is elementwise:
``e' = cos e - sin o``, ``o' = sin e + cos o``. Pairs past S load the angle 0 (no rotation), rows past N are
masked, and time runs in masked chunks, so any N, S, P and L work.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._triton_utils import accum_dtype, round_to, tl_dtype


@triton.jit
def rope_scan_fwd_kernel(x_ptr, dt_ptr, a_ptr, b_ptr, c_ptr, th_ptr, y_ptr, L, H, P, N, S,
                         N_CHUNKS: tl.constexpr, CHUNK: tl.constexpr, BLOCK_K: tl.constexpr,
                         BLOCK_P: tl.constexpr, CD: tl.constexpr):
    bh = tl.program_id(0).to(tl.int64)
    pid_p = tl.program_id(1)
    bi = bh // H
    hi = bh % H
    offs_k = tl.arange(0, BLOCK_K)
    offs_p = pid_p * BLOCK_P + tl.arange(0, BLOCK_P)
    mp = offs_p < P
    me = 2 * offs_k < N
    mo = 2 * offs_k + 1 < N
    ma = offs_k < S
    a = tl.load(a_ptr + hi).to(CD)
    he = tl.zeros([BLOCK_K, BLOCK_P], dtype=CD)
    ho = tl.zeros([BLOCK_K, BLOCK_P], dtype=CD)
    for c in range(0, N_CHUNKS):
        for i in range(0, CHUNK):
            t = c * CHUNK + i
            ok = t < L
            r = (bi * L + t) * H + hi  # this (batch, t, head) row
            x_t = tl.load(x_ptr + r * P + offs_p, mask=mp & ok, other=0.0).to(CD)
            dt_t = tl.load(dt_ptr + r, mask=ok, other=0.0).to(CD)
            be = tl.load(b_ptr + r * N + 2 * offs_k, mask=me & ok, other=0.0).to(CD)
            bo = tl.load(b_ptr + r * N + 2 * offs_k + 1, mask=mo & ok, other=0.0).to(CD)
            ce = tl.load(c_ptr + r * N + 2 * offs_k, mask=me & ok, other=0.0).to(CD)
            co = tl.load(c_ptr + r * N + 2 * offs_k + 1, mask=mo & ok, other=0.0).to(CD)
            th = tl.load(th_ptr + r * S + offs_k, mask=ma & ok, other=0.0).to(CD)
            alpha = tl.exp(dt_t * a)
            cs = tl.cos(th)[:, None]
            sn = tl.sin(th)[:, None]
            # a masked step has dt = 0 and theta = 0: alpha = 1, no rotation, no input -- the state is unchanged
            ne = alpha * (cs * he - sn * ho) + (dt_t * be)[:, None] * x_t[None, :]
            no = alpha * (sn * he + cs * ho) + (dt_t * bo)[:, None] * x_t[None, :]
            # padded rows / columns stay 0: an infinite x times a masked-out B would leave inf * 0 = NaN there
            he = tl.where(me[:, None] & mp[None, :], ne, 0.0)
            ho = tl.where(mo[:, None] & mp[None, :], no, 0.0)
            y_t = tl.sum(he * ce[:, None], axis=0) + tl.sum(ho * co[:, None], axis=0)
            tl.store(y_ptr + r * P + offs_p, round_to(y_t, y_ptr.dtype.element_ty), mask=mp & ok)


def rope_scan_fwd(x, dt, A, B, C, theta, chunk: int = 64, num_warps: int = 4, block_p: int | None = None):
    b, L, H, P = x.shape
    N = B.shape[-1]
    S = theta.shape[-1]
    x, dt, A, B, C, theta = (t.contiguous() for t in (x, dt, A, B, C, theta))
    bk = triton.next_power_of_2(-(-N // 2))
    bp = block_p or max(1, min(triton.next_power_of_2(P), 2048 // bk))
    y = torch.empty_like(x)
    grid = (b * H, triton.cdiv(P, bp))
    rope_scan_fwd_kernel[grid](x, dt, A, B, C, theta, y, L, H, P, N, S, N_CHUNKS=-(-L // chunk), CHUNK=chunk,
                               BLOCK_K=bk, BLOCK_P=bp, CD=tl_dtype(accum_dtype(x)), num_warps=num_warps)
    return y
