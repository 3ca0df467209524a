"""The Triton path of the fused block backward (no ``tl.dot``), grid ``(batch,)`` like the forward.

1. (with the norm) ``s_t = sum_d g dout y r`` over all channel blocks, per time block, into a float32
   workspace; a barrier. The norm's backward is formed as ``dy = r (g dout - (y r) s_t / d_model)``: every factor
   is of the size of the normalised output or of dout, so nothing overflows or underflows where the gradient is
   representable (``y r^3 s`` with r ~ 1e-19 would).
2. Per channel block, the chunks from the last: recompute the chunk's states (the conv + SiLU input made on the
   fly again, the checkpoint of the forward as the start) into a per-program scratch, a barrier, then the
   reverse steps: dy from the norm's backward, the scan's reverse carry (C2's equations with input v), then
   dp = dv silu'(p), stored to a float32 workspace, with dw and dc0 accumulated in registers.
3. Per channel block, dx_s = sum_j w_j dp_{s-j} from that workspace (every row of x, history rows included).

Cross-program sums (over the batch; dB and dC over channel blocks) are partials summed by torch afterwards, so
the result does not depend on scheduling.

``scan_mode="chunk_parallel"`` runs the same kernel with ``CP`` over (batch, d-blocks, chunks), one chunk of one
channel block per program, its reverse carry started from the adjoint entering the chunk from the right; that
adjoint comes from two launches before it (each chunk's local adjoint, then C1's carry run in reverse), and steps 1
and 3 become launches of their own (:func:`block_bwd`). The parameter partials are then per (batch, chunk).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._triton_utils import accum_dtype, conv_window, round_to, tl_dtype
from ..forward_chunked_scan.triton_path import block_sizes, cp_carry_kernel
from ..fused_block_forward.triton_path import norm_block_t


@triton.jit
def block_bwd_kernel(x_ptr, w_ptr, bias_ptr, dt_ptr, a_ptr, b_ptr, c_ptr, d_ptr, nw_ptr, dout_ptr, y_ptr, rstd_ptr,
                     ckpt_ptr, s_ptr, scratch_ptr, dp_ptr, gin_ptr,
                     dx_ptr, dw_ptr, dbias_ptr, ddt_ptr, dA_ptr, dB_ptr, dC_ptr, dD_ptr, dnw_ptr, L, DM, N,
                     N_CHUNKS: tl.constexpr, N_XCHUNKS: tl.constexpr, N_DBLK: tl.constexpr, N_TBLK: tl.constexpr,
                     K: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_D: tl.constexpr, HAS_NORM: tl.constexpr,
                     CHUNK: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     BLOCK_T: tl.constexpr, CD: tl.constexpr, CP: tl.constexpr, N_DB_LOOP: tl.constexpr,
                     N_C_LOOP: tl.constexpr):
    """Serial (``CP`` false, grid ``(batch,)``): steps 1 to 3 of the module docstring in one program per sequence.

    Chunk-parallel (``CP``, grid ``(batch, d-blocks, chunks)``): one program runs step 2 for one channel block and
    one chunk, with the reverse carry G starting from the adjoint entering the chunk from its right (``gin``, the
    reversed carry's output) instead of from the chunk after it in the same program; s (step 1) and dx (step 3)
    are their own launches, before and after. The parameter sums of a program are stored per (batch, chunk)."""
    pid_b = tl.program_id(0).to(tl.int64)
    LIN = L + K - 1
    row = pid_b * L
    xrow = pid_b * LIN
    offs_n = tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mn = offs_n < N
    mk = offs_k < K
    if HAS_NORM and not CP:
        for tb in range(0, N_TBLK):
            norm_s_rows(dout_ptr, y_ptr, rstd_ptr, nw_ptr, s_ptr, row, tb, L, DM, N_DBLK, BLOCK_D, BLOCK_T, CD)
        tl.debug_barrier()  # step 2 reads s at every time step
    tile = tl.arange(0, BLOCK_D)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    # one scratch per program: (batch, d-block, chunk) in the chunk-parallel grid, batch in the serial one
    pid_lin = (pid_b * tl.num_programs(1) + tl.program_id(1)) * tl.num_programs(2) + tl.program_id(2)
    scratch = scratch_ptr + pid_lin * CHUNK * BLOCK_D * BLOCK_N
    # the loops over channel blocks and chunks run N_DBLK and N_CHUNKS times serially, once in the chunk-parallel
    # grid (whose program ids are then the block and the chunk)
    if CP:
        pidx = pid_b * N_CHUNKS + tl.program_id(2)  # the row of this program's parameter partials
    else:
        pidx = pid_b
    for dbi in range(0, N_DB_LOOP):
        db = dbi + tl.program_id(1)
        offs_d = db * BLOCK_D + tl.arange(0, BLOCK_D)
        md = offs_d < DM
        m2 = md[:, None] & mn[None, :]
        dn = offs_d[:, None] * N + offs_n[None, :]
        dk = offs_d[:, None] * K + offs_k[None, :]
        mdk = md[:, None] & mk[None, :]
        a = tl.load(a_ptr + dn, mask=m2, other=0.0).to(CD)
        wt = tl.load(w_ptr + dk, mask=mdk, other=0.0).to(CD)
        if HAS_BIAS:
            bias = tl.load(bias_ptr + offs_d, mask=md, other=0.0).to(CD)
        else:
            bias = tl.zeros([BLOCK_D], dtype=CD)  # not read (conv_window's HAS_BIAS)
        if HAS_D:
            dskip = tl.load(d_ptr + offs_d, mask=md, other=0.0).to(CD)
        if HAS_NORM:
            g = tl.load(nw_ptr + offs_d, mask=md, other=0.0).to(CD)
        part = (pid_b * N_DBLK + db) * L
        G = tl.zeros([BLOCK_D, BLOCK_N], dtype=CD)
        dA = tl.zeros([BLOCK_D, BLOCK_N], dtype=CD)
        dw = tl.zeros([BLOCK_D, BLOCK_K], dtype=CD)
        dD = tl.zeros([BLOCK_D], dtype=CD)
        dg = tl.zeros([BLOCK_D], dtype=CD)
        dc0 = tl.zeros([BLOCK_D], dtype=CD)
        for cc in range(0, N_C_LOOP):
            if CP:
                c = tl.program_id(2)
                G = tl.load(gin_ptr + (pid_b * N_CHUNKS + c) * DM * N + dn, mask=m2, other=0.0)
            else:
                c = N_CHUNKS - 1 - cc
            h0 = tl.load(ckpt_ptr + (pid_b * N_CHUNKS + c) * DM * N + dn, mask=m2, other=0.0)
            h = h0
            for i in range(0, CHUNK):
                t = c * CHUNK + i
                ok = t < L
                mt = md & ok
                xw, p = conv_window(x_ptr, xrow, t, offs_d, offs_k, mt, mk, wt, bias, DM, HAS_BIAS, CD)
                v = p / (1.0 + tl.exp(-p))
                dt_t = tl.load(dt_ptr + (row + t) * DM + offs_d, mask=mt, other=0.0).to(CD)
                b_t = tl.load(b_ptr + (row + t) * N + offs_n, mask=mn & ok, other=0.0).to(CD)
                h = tl.exp(dt_t[:, None] * a) * h + (dt_t * v)[:, None] * b_t[None, :]
                h = tl.where(m2, h, 0.0)  # padded lanes stay 0 (no inf * 0 = NaN from a masked-out B)
                tl.store(scratch + i * BLOCK_D * BLOCK_N + tile, h)
            tl.debug_barrier()
            for ii in range(0, CHUNK):
                i = CHUNK - 1 - ii
                t = c * CHUNK + i
                ok = t < L
                mt = md & ok
                xw, p = conv_window(x_ptr, xrow, t, offs_d, offs_k, mt, mk, wt, bias, DM, HAS_BIAS, CD)
                sg = 1.0 / (1.0 + tl.exp(-p))
                v = p * sg
                dt_t = tl.load(dt_ptr + (row + t) * DM + offs_d, mask=mt, other=0.0).to(CD)
                b_t = tl.load(b_ptr + (row + t) * N + offs_n, mask=mn & ok, other=0.0).to(CD)
                c_t = tl.load(c_ptr + (row + t) * N + offs_n, mask=mn & ok, other=0.0).to(CD)
                do = tl.load(dout_ptr + (row + t) * DM + offs_d, mask=mt, other=0.0).to(CD)
                if HAS_NORM:
                    y_t, r_t, dy = norm_dy(y_ptr, rstd_ptr, s_ptr, row, t, offs_d, mt, ok, g, do, DM)
                    dg += do * y_t * r_t
                else:
                    dy = do
                h = tl.load(scratch + i * BLOCK_D * BLOCK_N + tile)
                hp = tl.load(scratch + (i - 1) * BLOCK_D * BLOCK_N + tile, mask=(tile >= 0) & (i > 0), other=0.0)
                hp = tl.where(i > 0, hp, h0)
                abar = tl.exp(dt_t[:, None] * a)
                G = G + dy[:, None] * c_t[None, :]
                gb = tl.sum(G * b_t[None, :], axis=1)  # v factored out of ddelta's sum, as in C2's kernel
                dv = gb * dt_t
                if HAS_D:
                    dv += dskip * dy
                    dD += dy * v
                ddt = tl.sum(G * a * abar * hp, axis=1) + gb * v
                dA += tl.where(ok, G * dt_t[:, None] * abar * hp, 0.0)  # see C2's kernel: no 0 * inf past the end
                tl.store(ddt_ptr + (row + t) * DM + offs_d, round_to(ddt, ddt_ptr.dtype.element_ty), mask=mt)
                tl.store(dB_ptr + (part + t) * N + offs_n, tl.sum(G * (dt_t * v)[:, None], axis=0), mask=mn & ok)
                tl.store(dC_ptr + (part + t) * N + offs_n, tl.sum(h * dy[:, None], axis=0), mask=mn & ok)
                dp = dv * sg * (1.0 + p * (1.0 - sg))
                dp = tl.where(mt, dp, 0.0)
                tl.store(dp_ptr + (row + t) * DM + offs_d, dp, mask=mt)
                dw += xw * dp[:, None]
                dc0 += dp
                G = G * abar
            tl.debug_barrier()  # the scratch is rewritten next chunk; step 3 reads dp
        tl.store(dA_ptr + pidx * DM * N + dn, dA, mask=m2)
        tl.store(dw_ptr + pidx * DM * K + dk, dw, mask=mdk)
        if HAS_D:
            tl.store(dD_ptr + pidx * DM + offs_d, dD, mask=md)
        if HAS_NORM:
            tl.store(dnw_ptr + pidx * DM + offs_d, dg, mask=md)
        if HAS_BIAS:
            tl.store(dbias_ptr + pidx * DM + offs_d, dc0, mask=md)
        if not CP:
            for cx in range(0, N_XCHUNKS):
                dx_rows(dp_ptr, dx_ptr, wt, row, xrow, cx, offs_d, md, offs_k, mk, L, LIN, DM, CHUNK)


@triton.jit
def norm_s_rows(dout_ptr, y_ptr, rstd_ptr, nw_ptr, s_ptr, row, tb, L, DM, N_DBLK: tl.constexpr,
                BLOCK_D: tl.constexpr, BLOCK_T: tl.constexpr, CD: tl.constexpr):
    """Step 1 for one time block ``tb``: ``s_t = sum_d g dout (y r)`` over every channel block, into ``s``."""
    offs_t = tb * BLOCK_T + tl.arange(0, BLOCK_T)
    mt = offs_t < L
    s = tl.zeros([BLOCK_T], dtype=CD)
    for db in range(0, N_DBLK):
        offs_d = db * BLOCK_D + tl.arange(0, BLOCK_D)
        md = offs_d < DM
        m = mt[:, None] & md[None, :]
        off = (row + offs_t[:, None]) * DM + offs_d[None, :]
        do = tl.load(dout_ptr + off, mask=m, other=0.0).to(CD)
        rt = tl.load(rstd_ptr + row + offs_t, mask=mt, other=0.0)
        yt = tl.load(y_ptr + off, mask=m, other=0.0) * rt[:, None]
        g = tl.load(nw_ptr + offs_d, mask=md, other=0.0).to(CD)
        s += tl.sum(do * yt * g[None, :], axis=1)
    tl.store(s_ptr + row + offs_t, s, mask=mt)


@triton.jit
def norm_dy(y_ptr, rstd_ptr, s_ptr, row, t, offs_d, mt, ok, g, do, DM):
    """The norm's backward at step t for a channel block: ``(y_t, r_t, dy_t = r (g dout - (y r) s_t / d_model))``
    (0 past the sequence's end, where dout and r load as 0)."""
    y_t = tl.load(y_ptr + (row + t) * DM + offs_d, mask=mt, other=0.0)
    r_t = tl.load(rstd_ptr + row + t, mask=ok, other=0.0)
    s_t = tl.load(s_ptr + row + t, mask=ok, other=0.0)
    return y_t, r_t, r_t * (g * do - (y_t * r_t) * (s_t / DM))


@triton.jit
def dx_rows(dp_ptr, dx_ptr, wt, row, xrow, cx, offs_d, md, offs_k, mk, L, LIN, DM, CHUNK: tl.constexpr):
    """Step 3 for the x rows ``cx * CHUNK ..`` of a channel block: ``dx_s = sum_j w_j dp_{s-j}`` (every row of x,
    history rows included), from the complete dp workspace."""
    for i in range(0, CHUNK):
        s_row = cx * CHUNK + i
        src = s_row - offs_k[None, :]  # dx_s takes dp_{s-j} for the tap j
        m = md[:, None] & mk[None, :] & (src >= 0) & (src < L) & (s_row < LIN)
        dpw = tl.load(dp_ptr + (row + src) * DM + offs_d[:, None], mask=m, other=0.0)
        dxs = tl.sum(dpw * wt, axis=1)
        tl.store(dx_ptr + (xrow + s_row) * DM + offs_d, round_to(dxs, dx_ptr.dtype.element_ty),
                 mask=md & (s_row < LIN))


@triton.jit
def norm_s_kernel(dout_ptr, y_ptr, rstd_ptr, nw_ptr, s_ptr, L, DM, N_DBLK: tl.constexpr, BLOCK_D: tl.constexpr,
                  BLOCK_T: tl.constexpr, CD: tl.constexpr):
    """Chunk-parallel step 1, grid (batch, time blocks)."""
    pid_b = tl.program_id(0).to(tl.int64)
    norm_s_rows(dout_ptr, y_ptr, rstd_ptr, nw_ptr, s_ptr, pid_b * L, tl.program_id(1), L, DM, N_DBLK, BLOCK_D,
                BLOCK_T, CD)


@triton.jit
def cp_adjoint_local_kernel(dt_ptr, a_ptr, c_ptr, nw_ptr, dout_ptr, y_ptr, rstd_ptr, s_ptr, qloc_ptr, dsum_ptr, L, DM,
                            N, HAS_NORM: tl.constexpr, CHUNK: tl.constexpr, BLOCK_D: tl.constexpr,
                            BLOCK_N: tl.constexpr, CD: tl.constexpr):
    """Chunk-parallel pass 1 of the adjoint, grid (batch, d-blocks, chunks): the reverse carry of one chunk from a
    zero adjoint at its end, ``G <- (G + C_t dy_t) exp(dt_t A)`` from the chunk's last step to its first (the same
    updates, in the same order, as step 2's), and the chunk's sum of steps. What it leaves, ``Abar_first
    G_first``, and ``exp(A S_c)`` carried in from the right make the adjoint that flows out of the chunk to its
    left: the forward carry's recurrence run from the last chunk (``cp_carry_kernel`` with ``REVERSE``). The
    forward states are not needed here, only dy."""
    pid_b = tl.program_id(0).to(tl.int64)
    pid_d = tl.program_id(1)
    c = tl.program_id(2)
    n_chunks = tl.num_programs(2)
    offs_d = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
    offs_n = tl.arange(0, BLOCK_N)
    md = offs_d < DM
    mn = offs_n < N
    m2 = md[:, None] & mn[None, :]
    dn = offs_d[:, None] * N + offs_n[None, :]
    a = tl.load(a_ptr + dn, mask=m2, other=0.0).to(CD)
    if HAS_NORM:
        g = tl.load(nw_ptr + offs_d, mask=md, other=0.0).to(CD)
    G = tl.zeros([BLOCK_D, BLOCK_N], dtype=CD)
    S = tl.zeros([BLOCK_D], dtype=CD)
    row = pid_b * L
    for ii in range(0, CHUNK):
        t = c * CHUNK + CHUNK - 1 - ii
        ok = t < L
        mt = md & ok
        dt_t = tl.load(dt_ptr + (row + t) * DM + offs_d, mask=mt, other=0.0).to(CD)
        c_t = tl.load(c_ptr + (row + t) * N + offs_n, mask=mn & ok, other=0.0).to(CD)
        do = tl.load(dout_ptr + (row + t) * DM + offs_d, mask=mt, other=0.0).to(CD)
        if HAS_NORM:
            _, _, dy = norm_dy(y_ptr, rstd_ptr, s_ptr, row, t, offs_d, mt, ok, g, do, DM)
        else:
            dy = do
        abar = tl.exp(dt_t[:, None] * a)
        G = G + dy[:, None] * c_t[None, :]
        G = G * abar
        S += dt_t
    tl.store(qloc_ptr + (pid_b * n_chunks + c) * DM * N + dn, G, mask=m2)
    tl.store(dsum_ptr + (pid_b * n_chunks + c) * DM + offs_d, S, mask=md)


@triton.jit
def dx_kernel(dp_ptr, w_ptr, dx_ptr, L, DM, K: tl.constexpr, CHUNK: tl.constexpr, BLOCK_D: tl.constexpr,
              BLOCK_K: tl.constexpr, CD: tl.constexpr):
    """Chunk-parallel step 3, grid (batch, d-blocks, x-row chunks), after every chunk's dp is stored."""
    pid_b = tl.program_id(0).to(tl.int64)
    offs_d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    offs_k = tl.arange(0, BLOCK_K)
    md = offs_d < DM
    mk = offs_k < K
    wt = tl.load(w_ptr + offs_d[:, None] * K + offs_k[None, :], mask=md[:, None] & mk[None, :], other=0.0).to(CD)
    dx_rows(dp_ptr, dx_ptr, wt, pid_b * L, pid_b * (L + K - 1), tl.program_id(2), offs_d, md, offs_k, mk, L,
            L + K - 1, DM, CHUNK)


def block_bwd(x, w, conv_bias, delta, A, B, C, D, norm_weight, dout, saved, chunk: int, num_warps: int = 4,
              block_d: int | None = None, scan_mode: str = "serial"):
    """The nine gradients in their tensors' dtypes; ``w`` is the conv weight as [d_model, K]; ``saved`` the
    forward's (y, rstd, checkpoints), from either forward form. ``scan_mode="chunk_parallel"``: five launches,
    s over (batch, time blocks); the chunks' local adjoints; the reversed carry over chunks; step 2 over
    (batch, d-blocks, chunks) from the carried adjoints; dx over (batch, d-blocks, x-row chunks)."""
    b, l_in, d = x.shape
    k = w.shape[1]
    L = l_in - k + 1
    n = A.shape[1]
    x, w, delta, A, B, C, dout = (t.contiguous() for t in (x, w, delta, A, B, C, dout))
    conv_bias, D, norm_weight = (None if t is None else t.contiguous() for t in (conv_bias, D, norm_weight))
    bd, bn = block_sizes(d, n, block_d)
    bt = norm_block_t(d, bd)
    n_dblk = triton.cdiv(d, bd)
    ckpt = saved["ckpt"].contiguous()
    n_chunks = ckpt.shape[1]
    n_xchunks = triton.cdiv(l_in, chunk)
    cp = scan_mode == "chunk_parallel"
    has_norm = norm_weight is not None
    acc = dict(dtype=accum_dtype(x), device=x.device)
    cd = tl_dtype(accum_dtype(x))
    n_part = b * n_chunks if cp else b  # rows of the parameter partials: one per program's (batch, chunk)
    s_ws = torch.empty(b, L, **acc)
    scratch = torch.empty((b * n_dblk * n_chunks if cp else b) * chunk * bd * bn, **acc)
    dp_ws = torch.empty(b, L, d, **acc)
    dx = torch.empty_like(x)
    ddt = torch.empty_like(delta)
    dw_p = torch.empty(n_part, d, k, **acc)
    db_p, dD_p, dnw_p = (torch.empty(n_part, d, **acc) for _ in range(3))
    dA_p = torch.empty(n_part, d, n, **acc)
    dB_p = torch.empty(b, n_dblk, L, n, **acc)
    dC_p = torch.empty(b, n_dblk, L, n, **acc)
    dummy = s_ws
    y = saved["y"] if has_norm else dummy
    rstd = saved["rstd"] if has_norm else dummy
    nw = norm_weight if has_norm else dummy
    gin = dummy
    if cp:
        if has_norm:
            norm_s_kernel[(b, triton.cdiv(L, bt))](dout, y, rstd, nw, s_ws, L, d, N_DBLK=n_dblk, BLOCK_D=bd,
                                                   BLOCK_T=bt, CD=cd, num_warps=num_warps)
        qloc = torch.empty(b, n_chunks, d, n, **acc)
        dsum = torch.empty(b, n_chunks, d, **acc)
        gin = torch.empty(b, n_chunks, d, n, **acc)
        cp_adjoint_local_kernel[(b, n_dblk, n_chunks)](delta, A, C, nw, dout, y, rstd, s_ws, qloc, dsum, L, d, n,
                                                       HAS_NORM=has_norm, CHUNK=chunk, BLOCK_D=bd, BLOCK_N=bn, CD=cd,
                                                       num_warps=num_warps)
        # the adjoint leaving the first chunk to the left is not needed: a scratch takes it
        cp_carry_kernel[(b, n_dblk)](A, qloc, dsum, gin, torch.empty(b, d, n, **acc), d, n, N_CHUNKS=n_chunks,
                                     BLOCK_D=bd, BLOCK_N=bn, CD=cd, REVERSE=True, num_warps=num_warps)
    grid = (b, n_dblk, n_chunks) if cp else (b,)
    block_bwd_kernel[grid](x, w, conv_bias if conv_bias is not None else dummy, delta, A, B, C,
                           D if D is not None else dummy, nw, dout, y, rstd, ckpt,
                           s_ws, scratch, dp_ws, gin, dx, dw_p, db_p, ddt, dA_p, dB_p, dC_p, dD_p, dnw_p, L, d, n,
                           N_CHUNKS=n_chunks, N_XCHUNKS=n_xchunks, N_DBLK=n_dblk,
                           N_TBLK=triton.cdiv(L, bt), K=k, HAS_BIAS=conv_bias is not None, HAS_D=D is not None,
                           HAS_NORM=has_norm, CHUNK=chunk, BLOCK_D=bd, BLOCK_N=bn,
                           BLOCK_K=triton.next_power_of_2(k), BLOCK_T=bt, CD=cd, CP=cp,
                           N_DB_LOOP=1 if cp else n_dblk, N_C_LOOP=1 if cp else n_chunks, num_warps=num_warps)
    if cp:
        dx_kernel[(b, n_dblk, n_xchunks)](dp_ws, w, dx, L, d, K=k, CHUNK=chunk, BLOCK_D=bd,
                                          BLOCK_K=triton.next_power_of_2(k), CD=cd, num_warps=num_warps)
    cast = lambda t, ref: None if ref is None else t.to(ref.dtype)
    return (dx, dw_p.sum(0), cast(db_p.sum(0), conv_bias), ddt, dA_p.sum(0).to(A.dtype), dB_p.sum(1).to(B.dtype),
            dC_p.sum(1).to(C.dtype), cast(dD_p.sum(0), D), cast(dnw_p.sum(0), norm_weight))
