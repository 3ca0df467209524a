"""The Triton path of the fused block forward: conv1d + SiLU + selective scan + RMSNorm in one launch, no
``tl.dot``.

Grid ``(batch,)``: the RMSNorm reduces over every channel of a time step, so one program owns one sequence.
Phase 1 walks the channel blocks; for each it runs the chunked scan of C1 with its input made on the fly (the
K-row window of x times the weight, plus the bias, through SiLU), storing the pre-norm y (float32) and the
chunk checkpoints. A barrier, then phase 2 walks time blocks: the mean square over all channel blocks, r, and
``out = y r g`` in x's dtype. Without ``norm_weight`` phase 1 stores the output directly.

The channel count comes from the weight and is checked against x before launch (``_common.check_block``).
One program per sequence leaves most of a large GPU idle at small batch and walks all of time: the cost of fusing
the channel reduction into the same launch as the scan.

:func:`block_fwd_chunk_parallel` (``scan_mode="chunk_parallel"``) splits that launch instead: C1's chunk-parallel
passes with the conv + SiLU input made inside the local pass (grid batch x d-blocks x chunks), the carry (batch x
d-blocks), the fix-up (batch x d-blocks x chunks), then the norm over (batch x time blocks). The pre-norm y makes
one round trip through memory, which the single launch also makes (its phase 2 rereads it).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._triton_utils import accum_dtype, conv_window, round_to, tl_dtype
from ..forward_chunked_scan.triton_path import block_sizes, cp_carry_kernel, cp_fix_kernel, cp_local_kernel


@triton.jit
def block_fwd_kernel(x_ptr, w_ptr, bias_ptr, dt_ptr, a_ptr, b_ptr, c_ptr, d_ptr, nw_ptr, out_ptr, y_ptr, rstd_ptr,
                     ckpt_ptr, L, DM, N, eps,
                     N_CHUNKS: tl.constexpr, N_DBLK: tl.constexpr, N_TBLK: tl.constexpr, K: tl.constexpr,
                     HAS_BIAS: tl.constexpr, HAS_D: tl.constexpr, HAS_NORM: tl.constexpr, CHUNK: tl.constexpr,
                     BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_T: tl.constexpr,
                     CD: tl.constexpr):
    pid_b = tl.program_id(0).to(tl.int64)
    LIN = L + K - 1
    offs_n = tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mn = offs_n < N
    mk = offs_k < K
    xrow = pid_b * LIN
    row = pid_b * L
    for db in range(0, N_DBLK):
        offs_d = db * BLOCK_D + tl.arange(0, BLOCK_D)
        md = offs_d < DM
        m2 = md[:, None] & mn[None, :]
        dn = offs_d[:, None] * N + offs_n[None, :]
        a = tl.load(a_ptr + dn, mask=m2, other=0.0).to(CD)
        wt = tl.load(w_ptr + offs_d[:, None] * K + offs_k[None, :], mask=md[:, None] & mk[None, :],
                     other=0.0).to(CD)
        if HAS_BIAS:
            bias = tl.load(bias_ptr + offs_d, mask=md, other=0.0).to(CD)
        else:
            bias = tl.zeros([BLOCK_D], dtype=CD)  # not read (conv_window's HAS_BIAS)
        if HAS_D:
            dskip = tl.load(d_ptr + offs_d, mask=md, other=0.0).to(CD)
        h = tl.zeros([BLOCK_D, BLOCK_N], dtype=CD)
        for c in range(0, N_CHUNKS):
            tl.store(ckpt_ptr + (pid_b * N_CHUNKS + c) * DM * N + dn, h, mask=m2)
            for i in range(0, CHUNK):
                t = c * CHUNK + i
                ok = t < L
                mt = md & ok
                _, p = conv_window(x_ptr, xrow, t, offs_d, offs_k, mt, mk, wt, bias, DM, HAS_BIAS, CD)
                v = p / (1.0 + tl.exp(-p))
                dt_t = tl.load(dt_ptr + (row + t) * DM + offs_d, mask=mt, other=0.0).to(CD)
                b_t = tl.load(b_ptr + (row + t) * N + offs_n, mask=mn & ok, other=0.0).to(CD)
                c_t = tl.load(c_ptr + (row + t) * N + offs_n, mask=mn & ok, other=0.0).to(CD)
                h = tl.exp(dt_t[:, None] * a) * h + (dt_t * v)[:, None] * b_t[None, :]
                h = tl.where(m2, h, 0.0)  # padded lanes stay 0 (no inf * 0 = NaN from a masked-out B)
                y_t = tl.sum(h * c_t[None, :], axis=1)
                if HAS_D:
                    y_t += dskip * v
                if HAS_NORM:
                    tl.store(y_ptr + (row + t) * DM + offs_d, y_t, mask=mt)
                else:
                    tl.store(out_ptr + (row + t) * DM + offs_d, round_to(y_t, out_ptr.dtype.element_ty), mask=mt)
    if HAS_NORM:
        tl.debug_barrier()  # phase 2 reads y written by other threads of this program
        for tb in range(0, N_TBLK):
            norm_rows(y_ptr, nw_ptr, out_ptr, rstd_ptr, row, tb, L, DM, eps, N_DBLK, BLOCK_D, BLOCK_T, CD)


@triton.jit
def norm_rows(y_ptr, nw_ptr, out_ptr, rstd_ptr, row, tb, L, DM, eps, N_DBLK: tl.constexpr, BLOCK_D: tl.constexpr,
              BLOCK_T: tl.constexpr, CD: tl.constexpr):
    """The RMSNorm of one time block ``tb`` of a sequence whose pre-norm y (float32) is complete: r over every
    channel block, then ``out = y r g`` in out's dtype. Shared by the serial kernel (its phase 2) and the
    chunk-parallel norm launch."""
    offs_t = tb * BLOCK_T + tl.arange(0, BLOCK_T)
    mt = offs_t < L
    # r = (mean y^2 + eps)^(-1/2) with y scaled by sc = max(max|y|, 1) before squaring: y^2 overflows
    # float32 from |y| ~ 2e19 on while r and the output are still representable
    amax = tl.zeros([BLOCK_T], dtype=CD)
    for db in range(0, N_DBLK):
        offs_d = db * BLOCK_D + tl.arange(0, BLOCK_D)
        m = mt[:, None] & (offs_d < DM)[None, :]
        yt = tl.load(y_ptr + (row + offs_t[:, None]) * DM + offs_d[None, :], mask=m, other=0.0)
        amax = tl.maximum(amax, tl.max(tl.abs(yt), axis=1))
    sc = tl.maximum(amax, 1.0)
    ss = tl.zeros([BLOCK_T], dtype=CD)
    for db in range(0, N_DBLK):
        offs_d = db * BLOCK_D + tl.arange(0, BLOCK_D)
        m = mt[:, None] & (offs_d < DM)[None, :]
        yt = tl.load(y_ptr + (row + offs_t[:, None]) * DM + offs_d[None, :], mask=m, other=0.0) / sc[:, None]
        ss += tl.sum(yt * yt, axis=1)
    r = 1.0 / (sc * tl.sqrt(ss / DM + eps / (sc * sc)))
    tl.store(rstd_ptr + row + offs_t, r, mask=mt)
    for db in range(0, N_DBLK):
        offs_d = db * BLOCK_D + tl.arange(0, BLOCK_D)
        md = offs_d < DM
        m = mt[:, None] & md[None, :]
        yt = tl.load(y_ptr + (row + offs_t[:, None]) * DM + offs_d[None, :], mask=m, other=0.0)
        g = tl.load(nw_ptr + offs_d, mask=md, other=0.0).to(CD)
        o = yt * r[:, None] * g[None, :]
        tl.store(out_ptr + (row + offs_t[:, None]) * DM + offs_d[None, :],
                 round_to(o, out_ptr.dtype.element_ty), mask=m)


@triton.jit
def norm_kernel(y_ptr, nw_ptr, out_ptr, rstd_ptr, L, DM, eps, N_DBLK: tl.constexpr, BLOCK_D: tl.constexpr,
                BLOCK_T: tl.constexpr, CD: tl.constexpr):
    """The chunk-parallel forward's last launch, grid (batch, time blocks): :func:`norm_rows` per block."""
    pid_b = tl.program_id(0).to(tl.int64)
    norm_rows(y_ptr, nw_ptr, out_ptr, rstd_ptr, pid_b * L, tl.program_id(1), L, DM, eps, N_DBLK, BLOCK_D, BLOCK_T,
              CD)


def norm_block_t(d_model: int, block_d: int) -> int:
    """Time rows per norm tile: about 2048 float32 values per [BLOCK_T, BLOCK_D] tile."""
    return max(1, min(64, 2048 // block_d))


def block_fwd(x, w, conv_bias, delta, A, B, C, D, norm_weight, eps: float, chunk: int, num_warps: int = 4,
              block_d: int | None = None):
    """Returns ``(out in x's dtype, saved)``; saved as the torch path's (in accum_dtype(x))."""
    b, l_in, d = x.shape
    k = w.shape[1]
    L = l_in - k + 1
    n = A.shape[1]
    x, w, delta, A, B, C = (t.contiguous() for t in (x, w, delta, A, B, C))
    conv_bias, D, norm_weight = (None if t is None else t.contiguous() for t in (conv_bias, D, norm_weight))
    bd, bn = block_sizes(d, n, block_d)
    bt = norm_block_t(d, bd)
    n_chunks = -(-L // chunk)
    acc = dict(dtype=accum_dtype(x), device=x.device)
    out = x.new_empty(b, L, d)
    has_norm = norm_weight is not None
    y = torch.empty(b, L, d, **acc) if has_norm else out
    rstd = torch.empty(b, L, **acc) if has_norm else None
    ckpt = torch.empty(b, n_chunks, d, n, **acc)
    dummy = x
    block_fwd_kernel[(b,)](x, w, conv_bias if conv_bias is not None else dummy, delta, A, B, C,
                           D if D is not None else dummy, norm_weight if has_norm else dummy, out, y,
                           rstd if has_norm else dummy, ckpt, L, d, n, float(eps),
                           N_CHUNKS=n_chunks, N_DBLK=triton.cdiv(d, bd), N_TBLK=triton.cdiv(L, bt), K=k,
                           HAS_BIAS=conv_bias is not None, HAS_D=D is not None, HAS_NORM=has_norm, CHUNK=chunk,
                           BLOCK_D=bd, BLOCK_N=bn, BLOCK_K=triton.next_power_of_2(k), BLOCK_T=bt,
                           CD=tl_dtype(accum_dtype(x)), num_warps=num_warps)
    return out, dict(y=y if has_norm else None, rstd=rstd, ckpt=ckpt)


def block_fwd_chunk_parallel(x, w, conv_bias, delta, A, B, C, D, norm_weight, eps: float, chunk: int,
                             num_warps: int = 4, block_d: int | None = None):
    """The chunk-parallel form (same returns as :func:`block_fwd`): C1's three chunk-parallel launches with the
    input made on the fly from x (``cp_local_kernel`` with ``K > 0``: the conv is chunk-local, a chunk's first
    steps reading the K - 1 rows before it), then, with the norm, one launch over (batch, time blocks) for the
    cross-channel RMSNorm. The fix-up stores the pre-norm y in float32 (or, without the norm, the output in x's
    dtype); the checkpoints are the carry's chunk start states, the same states the serial walk stores."""
    b, l_in, d = x.shape
    k = w.shape[1]
    L = l_in - k + 1
    n = A.shape[1]
    x, w, delta, A, B, C = (t.contiguous() for t in (x, w, delta, A, B, C))
    conv_bias, D, norm_weight = (None if t is None else t.contiguous() for t in (conv_bias, D, norm_weight))
    bd, bn = block_sizes(d, n, block_d)
    bt = norm_block_t(d, bd)
    n_chunks = -(-L // chunk)
    n_dblk = triton.cdiv(d, bd)
    acc = dict(dtype=accum_dtype(x), device=x.device)
    cd = tl_dtype(accum_dtype(x))
    out = x.new_empty(b, L, d)
    has_norm = norm_weight is not None
    y = torch.empty(b, L, d, **acc) if has_norm else out
    rstd = torch.empty(b, L, **acc) if has_norm else None
    yloc = torch.empty(b, L, d, **acc)
    hend = torch.empty(b, n_chunks, d, n, **acc)
    dsum = torch.empty(b, n_chunks, d, **acc)
    ckpt = torch.empty(b, n_chunks, d, n, **acc)
    hlast = torch.empty(b, d, n, **acc)
    dummy = x
    cp_local_kernel[(b, n_dblk, n_chunks)](x, w, conv_bias if conv_bias is not None else dummy, delta, A, B, C,
                                           D if D is not None else dummy, yloc, hend, dsum, L, d, n, K=k,
                                           HAS_BIAS=conv_bias is not None, BLOCK_K=triton.next_power_of_2(k),
                                           HAS_D=D is not None, CHUNK=chunk, BLOCK_D=bd, BLOCK_N=bn, CD=cd,
                                           num_warps=num_warps)
    cp_carry_kernel[(b, n_dblk)](A, hend, dsum, ckpt, hlast, d, n, N_CHUNKS=n_chunks, BLOCK_D=bd, BLOCK_N=bn, CD=cd,
                                 REVERSE=False, num_warps=num_warps)
    cp_fix_kernel[(b, n_dblk, n_chunks)](delta, A, C, yloc, ckpt, y, L, d, n, CHUNK=chunk, BLOCK_D=bd, BLOCK_N=bn,
                                         CD=cd, num_warps=num_warps)
    if has_norm:
        norm_kernel[(b, triton.cdiv(L, bt))](y, norm_weight, out, rstd, L, d, float(eps), N_DBLK=n_dblk, BLOCK_D=bd,
                                             BLOCK_T=bt, CD=cd, num_warps=num_warps)
    return out, dict(y=y if has_norm else None, rstd=rstd, ckpt=ckpt)
