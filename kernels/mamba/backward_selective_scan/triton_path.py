"""The Triton path of the selective-scan backward (no ``tl.dot``).

Grid ``(batch, ceil(d_model / BLOCK_D))``, the forward's tiling. Each program walks the chunks from the last:

1. restart from the chunk's checkpoint and recompute its ``CHUNK`` states into a per-program float32 scratch
   (global memory; a barrier separates these stores from the loads of step 2, which other threads may make);
2. walk the chunk in reverse carrying ``G`` (dL/dh_t, float32 registers), writing du_t and ddelta_t, adding the
   chunk's terms into dA and dD (registers), and writing this channel block's partial dB_t and dC_t.

Sums across programs -- dB and dC over channel blocks, dA and dD over the batch -- are not done with atomics but
written as partials and summed by torch afterwards: the order of a float sum then never depends on scheduling,
so the backward is bit-for-bit deterministic.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._triton_utils import accum_dtype, round_to, tl_dtype
from ..forward_chunked_scan.triton_path import block_sizes


@triton.jit
def scan_bwd_kernel(u_ptr, dt_ptr, a_ptr, b_ptr, c_ptr, d_ptr, dy_ptr, ckpt_ptr, scratch_ptr,
                    du_ptr, ddt_ptr, dA_ptr, dD_ptr, dB_ptr, dC_ptr, L, DM, N,
                    N_CHUNKS: tl.constexpr, HAS_D: tl.constexpr, CHUNK: tl.constexpr,
                    BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr, CD: tl.constexpr):
    pid_b = tl.program_id(0).to(tl.int64)
    pid_d = tl.program_id(1)
    n_dblk = tl.num_programs(1)
    offs_d = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
    offs_n = tl.arange(0, BLOCK_N)
    md = offs_d < DM
    mn = offs_n < N
    m2 = md[:, None] & mn[None, :]
    dn = offs_d[:, None] * N + offs_n[None, :]
    tile = tl.arange(0, BLOCK_D)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    scratch = scratch_ptr + (pid_b * n_dblk + pid_d) * CHUNK * BLOCK_D * BLOCK_N
    a = tl.load(a_ptr + dn, mask=m2, other=0.0).to(CD)
    if HAS_D:
        dskip = tl.load(d_ptr + offs_d, mask=md, other=0.0).to(CD)
    row = pid_b * L
    part = (pid_b * n_dblk + pid_d) * L  # first row of this program's dB / dC partials
    G = tl.zeros([BLOCK_D, BLOCK_N], dtype=CD)
    dA = tl.zeros([BLOCK_D, BLOCK_N], dtype=CD)
    dD = tl.zeros([BLOCK_D], dtype=CD)
    for cc in range(0, N_CHUNKS):
        c = N_CHUNKS - 1 - cc
        h0 = tl.load(ckpt_ptr + (pid_b * N_CHUNKS + c) * DM * N + dn, mask=m2, other=0.0)
        h = h0
        for i in range(0, CHUNK):
            t = c * CHUNK + i
            ok = t < L
            u_t = tl.load(u_ptr + (row + t) * DM + offs_d, mask=md & ok, other=0.0).to(CD)
            dt_t = tl.load(dt_ptr + (row + t) * DM + offs_d, mask=md & ok, other=0.0).to(CD)
            b_t = tl.load(b_ptr + (row + t) * N + offs_n, mask=mn & ok, other=0.0).to(CD)
            h = tl.exp(dt_t[:, None] * a) * h + (dt_t * u_t)[:, None] * b_t[None, :]
            h = tl.where(m2, h, 0.0)  # padded lanes stay 0, as in the forward (no inf * 0 = NaN there)
            tl.store(scratch + i * BLOCK_D * BLOCK_N + tile, h)
        tl.debug_barrier()
        for ii in range(0, CHUNK):
            i = CHUNK - 1 - ii
            t = c * CHUNK + i
            ok = t < L
            mt = md & ok
            u_t = tl.load(u_ptr + (row + t) * DM + offs_d, mask=mt, other=0.0).to(CD)
            dt_t = tl.load(dt_ptr + (row + t) * DM + offs_d, mask=mt, other=0.0).to(CD)
            dy_t = tl.load(dy_ptr + (row + t) * DM + offs_d, mask=mt, other=0.0).to(CD)
            b_t = tl.load(b_ptr + (row + t) * N + offs_n, mask=mn & ok, other=0.0).to(CD)
            c_t = tl.load(c_ptr + (row + t) * N + offs_n, mask=mn & ok, other=0.0).to(CD)
            h = tl.load(scratch + i * BLOCK_D * BLOCK_N + tile)
            hp = tl.load(scratch + (i - 1) * BLOCK_D * BLOCK_N + tile, mask=(tile >= 0) & (i > 0), other=0.0)
            hp = tl.where(i > 0, hp, h0)
            abar = tl.exp(dt_t[:, None] * a)
            # past the sequence's end dy = 0, so G stays 0 there; masked channels / states load zeros throughout
            G = G + dy_t[:, None] * c_t[None, :]
            # sum_n G B_t, shared by du (times delta) and ddelta (times u): u factored out of the sum, as the
            # algebra has it, so an infinite u gives the signed infinity of (sum_n G B) u, not inf - inf
            gb = tl.sum(G * b_t[None, :], axis=1)
            du_t = gb * dt_t
            if HAS_D:
                du_t += dskip * dy_t
                dD += dy_t * u_t
            ddt_t = tl.sum(G * a * abar * hp, axis=1) + gb * u_t
            # a step past the end has G = 0 but may see an infinite state: 0 * inf would put a NaN into dA
            dA += tl.where(ok, G * dt_t[:, None] * abar * hp, 0.0)
            tl.store(du_ptr + (row + t) * DM + offs_d, round_to(du_t, du_ptr.dtype.element_ty), mask=mt)
            tl.store(ddt_ptr + (row + t) * DM + offs_d, round_to(ddt_t, ddt_ptr.dtype.element_ty), mask=mt)
            dB_t = tl.sum(G * (dt_t * u_t)[:, None], axis=0)
            dC_t = tl.sum(h * dy_t[:, None], axis=0)
            tl.store(dB_ptr + (part + t) * N + offs_n, dB_t, mask=mn & ok)
            tl.store(dC_ptr + (part + t) * N + offs_n, dC_t, mask=mn & ok)
            G = G * abar
        tl.debug_barrier()  # the next chunk overwrites the scratch these loads read
    tl.store(dA_ptr + pid_b * DM * N + dn, dA, mask=m2)
    if HAS_D:
        tl.store(dD_ptr + pid_b * DM + offs_d, dD, mask=md)


def scan_bwd(u, delta, A, B, C, D, dy, ckpt, chunk: int, num_warps: int = 4, block_d: int | None = None):
    """(du, ddelta, dA, dB, dC, dD) in their tensors' dtypes (dD None without D). ``ckpt`` is the forward's."""
    b, L, d = u.shape
    n = A.shape[1]
    u, delta, A, B, C, dy = (x.contiguous() for x in (u, delta, A, B, C, dy))
    D = None if D is None else D.contiguous()
    n_chunks = ckpt.shape[1]
    if n_chunks != -(-L // chunk):
        raise ValueError(f"checkpoints for {n_chunks} chunks, but L={L} at chunk={chunk} needs {-(-L // chunk)}")
    bd, bn = block_sizes(d, n, block_d)
    n_dblk = triton.cdiv(d, bd)
    acc = dict(dtype=accum_dtype(u), device=u.device)
    scratch = torch.empty(b * n_dblk * chunk * bd * bn, **acc)
    du, ddt = torch.empty_like(u), torch.empty_like(delta)
    dA_p = torch.empty(b, d, n, **acc)
    dD_p = torch.empty(b, d, **acc) if D is not None else dA_p
    dB_p = torch.empty(b, n_dblk, L, n, **acc)
    dC_p = torch.empty(b, n_dblk, L, n, **acc)
    scan_bwd_kernel[(b, n_dblk)](u, delta, A, B, C, D if D is not None else u, dy, ckpt.contiguous(), scratch,
                                 du, ddt, dA_p, dD_p, dB_p, dC_p, L, d, n, N_CHUNKS=n_chunks, HAS_D=D is not None,
                                 CHUNK=chunk, BLOCK_D=bd, BLOCK_N=bn, CD=tl_dtype(accum_dtype(u)), num_warps=num_warps)
    dD = dD_p.sum(0).to(D.dtype) if D is not None else None
    return du, ddt, dA_p.sum(0).to(A.dtype), dB_p.sum(1).to(B.dtype), dC_p.sum(1).to(C.dtype), dD
