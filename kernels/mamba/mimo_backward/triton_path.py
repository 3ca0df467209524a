"""The Triton path of the MIMO scan's backward (C3), no ``tl.dot``: the rank-R products are R elementwise
outer products (R is small), the contractions over N and P are reductions.

Grid ``(batch * H, ceil(P / BLOCK_P))``; each program owns the state columns of one P-block (the recurrence never
mixes columns). It first runs the forward over the whole sequence, storing the state at every chunk start to a
program-private buffer; then the chunks from the last: recompute the chunk's states into a scratch, a barrier,
the reverse steps carrying G. Sums across P-blocks (dB, dC, ddt, dalpha) and over the batch (dalpha, mimo_x,
mimo_o) are partials summed by torch afterwards, so the result does not depend on scheduling.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._triton_utils import accum_dtype, round_to, tl_dtype


@triton.jit
def mimo_bwd_kernel(x_ptr, dt_ptr, al_ptr, b_ptr, c_ptr, wx_ptr, wo_ptr, dy_ptr, ckpt_ptr, scratch_ptr,
                    dx_ptr, ddt_ptr, dal_ptr, dB_ptr, dC_ptr, dwx_ptr, dwo_ptr, L, H, P, N,
                    R: tl.constexpr, N_CHUNKS: tl.constexpr, CHUNK: tl.constexpr, BLOCK_N: tl.constexpr,
                    BLOCK_P: tl.constexpr, BLOCK_R: tl.constexpr, CD: tl.constexpr):
    bh = tl.program_id(0).to(tl.int64)
    pid_p = tl.program_id(1)
    n_pblk = tl.num_programs(1)
    bi = bh // H
    hi = bh % H
    prog = bh * n_pblk + pid_p
    offs_n = tl.arange(0, BLOCK_N)
    offs_p = pid_p * BLOCK_P + tl.arange(0, BLOCK_P)
    offs_r = tl.arange(0, BLOCK_R)
    mn = offs_n < N
    mp = offs_p < P
    m2 = mn[:, None] & mp[None, :]
    tile = tl.arange(0, BLOCK_N)[:, None] * BLOCK_P + tl.arange(0, BLOCK_P)[None, :]
    TS = BLOCK_N * BLOCK_P
    ckpt = ckpt_ptr + prog * N_CHUNKS * TS
    scratch = scratch_ptr + prog * CHUNK * TS
    al = tl.load(al_ptr + hi).to(CD)
    # forward: the state at every chunk start
    h = tl.zeros([BLOCK_N, BLOCK_P], dtype=CD)
    for c in range(0, N_CHUNKS):
        tl.store(ckpt + c * TS + tile, h)
        for i in range(0, CHUNK):
            t = c * CHUNK + i
            ok = t < L
            row = (bi * L + t) * H + hi
            x_t = tl.load(x_ptr + row * P + offs_p, mask=mp & ok, other=0.0).to(CD)
            dt_t = tl.load(dt_ptr + row, mask=ok, other=0.0).to(CD)
            u = tl.zeros([BLOCK_N, BLOCK_P], dtype=CD)
            for r in range(0, R):
                b_r = tl.load(b_ptr + (row * R + r) * N + offs_n, mask=mn & ok, other=0.0).to(CD)
                wx_r = tl.load(wx_ptr + (hi * R + r) * P + offs_p, mask=mp, other=0.0).to(CD)
                u += b_r[:, None] * (wx_r * x_t)[None, :]
            h = tl.exp(dt_t * al) * h + dt_t * u
            h = tl.where(m2, h, 0.0)  # padded lanes stay 0 (no inf * 0 = NaN from masked-out B or weights)
    tl.debug_barrier()
    G = tl.zeros([BLOCK_N, BLOCK_P], dtype=CD)
    dal = tl.zeros([BLOCK_N, BLOCK_P], dtype=CD)
    dwx = tl.zeros([BLOCK_R, BLOCK_P], dtype=CD)
    dwo = tl.zeros([BLOCK_R, BLOCK_P], dtype=CD)
    for cc in range(0, N_CHUNKS):
        c = N_CHUNKS - 1 - cc
        h0 = tl.load(ckpt + c * TS + tile)
        h = h0
        for i in range(0, CHUNK):
            t = c * CHUNK + i
            ok = t < L
            row = (bi * L + t) * H + hi
            x_t = tl.load(x_ptr + row * P + offs_p, mask=mp & ok, other=0.0).to(CD)
            dt_t = tl.load(dt_ptr + row, mask=ok, other=0.0).to(CD)
            u = tl.zeros([BLOCK_N, BLOCK_P], dtype=CD)
            for r in range(0, R):
                b_r = tl.load(b_ptr + (row * R + r) * N + offs_n, mask=mn & ok, other=0.0).to(CD)
                wx_r = tl.load(wx_ptr + (hi * R + r) * P + offs_p, mask=mp, other=0.0).to(CD)
                u += b_r[:, None] * (wx_r * x_t)[None, :]
            h = tl.exp(dt_t * al) * h + dt_t * u
            h = tl.where(m2, h, 0.0)  # padded lanes stay 0 (no inf * 0 = NaN from masked-out B or weights)
            tl.store(scratch + i * TS + tile, h)
        tl.debug_barrier()
        for ii in range(0, CHUNK):
            i = CHUNK - 1 - ii
            t = c * CHUNK + i
            ok = t < L
            row = (bi * L + t) * H + hi
            part = row * n_pblk + pid_p  # this (batch, t, head, P-block) partial
            x_t = tl.load(x_ptr + row * P + offs_p, mask=mp & ok, other=0.0).to(CD)
            dt_t = tl.load(dt_ptr + row, mask=ok, other=0.0).to(CD)
            dy_t = tl.load(dy_ptr + row * P + offs_p, mask=mp & ok, other=0.0).to(CD)
            h = tl.load(scratch + i * TS + tile)
            hp = tl.load(scratch + (i - 1) * TS + tile, mask=(tile >= 0) & (i > 0), other=0.0)
            hp = tl.where(i > 0, hp, h0)
            a = tl.exp(dt_t * al)
            for r in range(0, R):  # G_t = sum_r C_r^T dYr_r + the carry
                c_r = tl.load(c_ptr + (row * R + r) * N + offs_n, mask=mn & ok, other=0.0).to(CD)
                wo_r = tl.load(wo_ptr + (hi * R + r) * P + offs_p, mask=mp, other=0.0).to(CD)
                G += c_r[:, None] * (wo_r * dy_t)[None, :]
            u = tl.zeros([BLOCK_N, BLOCK_P], dtype=CD)
            dx = tl.zeros([BLOCK_P], dtype=CD)
            for r in range(0, R):
                b_r = tl.load(b_ptr + (row * R + r) * N + offs_n, mask=mn & ok, other=0.0).to(CD)
                c_r = tl.load(c_ptr + (row * R + r) * N + offs_n, mask=mn & ok, other=0.0).to(CD)
                wx_r = tl.load(wx_ptr + (hi * R + r) * P + offs_p, mask=mp, other=0.0).to(CD)
                wo_r = tl.load(wo_ptr + (hi * R + r) * P + offs_p, mask=mp, other=0.0).to(CD)
                X_r = wx_r * x_t
                u += b_r[:, None] * X_r[None, :]
                dYr = wo_r * dy_t
                tl.store(dC_ptr + (part * R + r) * N + offs_n, tl.sum(h * dYr[None, :], axis=1), mask=mn & ok)
                tl.store(dB_ptr + (part * R + r) * N + offs_n, dt_t * tl.sum(G * X_r[None, :], axis=1),
                         mask=mn & ok)
                dX = dt_t * tl.sum(G * b_r[:, None], axis=0)
                dx += wx_r * dX
                sel = offs_r[:, None] == r
                # past the end (ok false) nothing is added: the state there may be infinite and 0 * inf is NaN
                dwx = tl.where(sel & ok, dwx + (x_t * dX)[None, :], dwx)
                dwo = tl.where(sel & ok, dwo + (tl.sum(h * c_r[:, None], axis=0) * dy_t)[None, :], dwo)
            tl.store(dx_ptr + row * P + offs_p, round_to(dx, dx_ptr.dtype.element_ty), mask=mp & ok)
            ddt = tl.sum(tl.sum(G * (al * a * hp + u), axis=1), axis=0)
            tl.store(ddt_ptr + part, ddt, mask=ok)
            dal += tl.where(ok, dt_t * a * G * hp, 0.0)
            G = G * a
        tl.debug_barrier()  # the next chunk rewrites the scratch
    tl.store(dal_ptr + prog, tl.sum(tl.sum(dal, axis=1), axis=0))
    mrp = (offs_r[:, None] < R) & mp[None, :]
    rp = (bh * R + offs_r[:, None]) * P + offs_p[None, :]
    tl.store(dwx_ptr + rp, dwx, mask=mrp)
    tl.store(dwo_ptr + rp, dwo, mask=mrp)


def mimo_bwd(x, dt, alpha, B, C, mimo_x, mimo_o, dy, chunk: int = 64, num_warps: int = 4,
             block_p: int | None = None):
    """The seven gradients (dx, ddt, dalpha, dB, dC, dmimo_x, dmimo_o) in their tensors' dtypes."""
    b, L, H, P = x.shape
    R, N = B.shape[-2], B.shape[-1]
    x, dt, alpha, B, C, mimo_x, mimo_o, dy = (t.contiguous() for t in (x, dt, alpha, B, C, mimo_x, mimo_o, dy))
    bn = triton.next_power_of_2(N)
    bp = block_p or max(1, min(triton.next_power_of_2(P), 4096 // bn))
    n_pblk = triton.cdiv(P, bp)
    n_chunks = -(-L // chunk)
    acc = dict(dtype=accum_dtype(x), device=x.device)
    progs = b * H * n_pblk
    ckpt = torch.empty(progs * n_chunks * bn * bp, **acc)
    scratch = torch.empty(progs * chunk * bn * bp, **acc)
    dx = torch.empty_like(x)
    ddt_p = torch.empty(b, L, H, n_pblk, **acc)
    dal_p = torch.empty(b, H, n_pblk, **acc)
    dB_p = torch.empty(b, L, H, n_pblk, R, N, **acc)
    dC_p = torch.empty(b, L, H, n_pblk, R, N, **acc)
    dwx_p = torch.empty(b, H, R, P, **acc)
    dwo_p = torch.empty(b, H, R, P, **acc)
    mimo_bwd_kernel[(b * H, n_pblk)](x, dt, alpha, B, C, mimo_x, mimo_o, dy, ckpt, scratch, dx, ddt_p, dal_p, dB_p,
                                     dC_p, dwx_p, dwo_p, L, H, P, N, R=R, N_CHUNKS=n_chunks, CHUNK=chunk,
                                     BLOCK_N=bn, BLOCK_P=bp, BLOCK_R=triton.next_power_of_2(R),
                                     CD=tl_dtype(accum_dtype(x)), num_warps=num_warps)
    return (dx, ddt_p.sum(-1).to(dt.dtype), dal_p.sum((0, 2)).to(alpha.dtype), dB_p.sum(3).to(B.dtype),
            dC_p.sum(3).to(C.dtype), dwx_p.sum(0).to(mimo_x.dtype), dwo_p.sum(0).to(mimo_o.dtype))
