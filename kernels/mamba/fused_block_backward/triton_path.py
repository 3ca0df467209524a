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
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._triton_utils import accum_dtype, round_to, tl_dtype
from ..forward_chunked_scan.triton_path import block_sizes
from ..fused_block_forward.triton_path import norm_block_t


@triton.jit
def block_bwd_kernel(x_ptr, w_ptr, bias_ptr, dt_ptr, a_ptr, b_ptr, c_ptr, d_ptr, nw_ptr, dout_ptr, y_ptr, rstd_ptr,
                     ckpt_ptr, s_ptr, scratch_ptr, dp_ptr,
                     dx_ptr, dw_ptr, dbias_ptr, ddt_ptr, dA_ptr, dB_ptr, dC_ptr, dD_ptr, dnw_ptr, L, DM, N,
                     N_CHUNKS: tl.constexpr, N_XCHUNKS: tl.constexpr, N_DBLK: tl.constexpr, N_TBLK: tl.constexpr,
                     K: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_D: tl.constexpr, HAS_NORM: tl.constexpr,
                     CHUNK: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     BLOCK_T: tl.constexpr, CD: tl.constexpr):
    pid_b = tl.program_id(0).to(tl.int64)
    LIN = L + K - 1
    row = pid_b * L
    xrow = pid_b * LIN
    offs_n = tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mn = offs_n < N
    mk = offs_k < K
    if HAS_NORM:
        for tb in range(0, N_TBLK):
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
        tl.debug_barrier()  # step 2 reads s at every time step
    tile = tl.arange(0, BLOCK_D)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    scratch = scratch_ptr + pid_b * CHUNK * BLOCK_D * BLOCK_N
    for db in range(0, N_DBLK):
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
        for cc in range(0, N_CHUNKS):
            c = N_CHUNKS - 1 - cc
            h0 = tl.load(ckpt_ptr + (pid_b * N_CHUNKS + c) * DM * N + dn, mask=m2, other=0.0)
            h = h0
            for i in range(0, CHUNK):
                t = c * CHUNK + i
                ok = t < L
                mt = md & ok
                xw = tl.load(x_ptr + (xrow + t + offs_k[None, :]) * DM + offs_d[:, None],
                             mask=mt[:, None] & mk[None, :], other=0.0).to(CD)
                p = tl.sum(xw * wt, axis=1)
                if HAS_BIAS:
                    p += bias
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
                xw = tl.load(x_ptr + (xrow + t + offs_k[None, :]) * DM + offs_d[:, None],
                             mask=mt[:, None] & mk[None, :], other=0.0).to(CD)
                p = tl.sum(xw * wt, axis=1)
                if HAS_BIAS:
                    p += bias
                sg = 1.0 / (1.0 + tl.exp(-p))
                v = p * sg
                dt_t = tl.load(dt_ptr + (row + t) * DM + offs_d, mask=mt, other=0.0).to(CD)
                b_t = tl.load(b_ptr + (row + t) * N + offs_n, mask=mn & ok, other=0.0).to(CD)
                c_t = tl.load(c_ptr + (row + t) * N + offs_n, mask=mn & ok, other=0.0).to(CD)
                do = tl.load(dout_ptr + (row + t) * DM + offs_d, mask=mt, other=0.0).to(CD)
                if HAS_NORM:
                    y_t = tl.load(y_ptr + (row + t) * DM + offs_d, mask=mt, other=0.0)
                    r_t = tl.load(rstd_ptr + row + t, mask=ok, other=0.0)
                    s_t = tl.load(s_ptr + row + t, mask=ok, other=0.0)
                    dy = r_t * (g * do - (y_t * r_t) * (s_t / DM))
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
        tl.store(dA_ptr + pid_b * DM * N + dn, dA, mask=m2)
        tl.store(dw_ptr + pid_b * DM * K + dk, dw, mask=mdk)
        if HAS_D:
            tl.store(dD_ptr + pid_b * DM + offs_d, dD, mask=md)
        if HAS_NORM:
            tl.store(dnw_ptr + pid_b * DM + offs_d, dg, mask=md)
        if HAS_BIAS:
            tl.store(dbias_ptr + pid_b * DM + offs_d, dc0, mask=md)
        for cx in range(0, N_XCHUNKS):
            for i in range(0, CHUNK):
                s_row = cx * CHUNK + i
                src = s_row - offs_k[None, :]  # dx_s takes dp_{s-j} for the tap j
                m = md[:, None] & mk[None, :] & (src >= 0) & (src < L) & (s_row < LIN)
                dpw = tl.load(dp_ptr + (row + src) * DM + offs_d[:, None], mask=m, other=0.0)
                dxs = tl.sum(dpw * wt, axis=1)
                tl.store(dx_ptr + (xrow + s_row) * DM + offs_d, round_to(dxs, dx_ptr.dtype.element_ty),
                         mask=md & (s_row < LIN))


def block_bwd(x, w, conv_bias, delta, A, B, C, D, norm_weight, dout, saved, chunk: int, num_warps: int = 4,
              block_d: int | None = None):
    """The nine gradients in their tensors' dtypes; ``w`` is the conv weight as [d_model, K]; ``saved`` the
    forward's (y, rstd, checkpoints)."""
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
    has_norm = norm_weight is not None
    acc = dict(dtype=accum_dtype(x), device=x.device)
    s_ws = torch.empty(b, L, **acc)
    scratch = torch.empty(b * chunk * bd * bn, **acc)
    dp_ws = torch.empty(b, L, d, **acc)
    dx = torch.empty_like(x)
    ddt = torch.empty_like(delta)
    dw_p = torch.empty(b, d, k, **acc)
    db_p, dD_p, dnw_p = (torch.empty(b, d, **acc) for _ in range(3))
    dA_p = torch.empty(b, d, n, **acc)
    dB_p = torch.empty(b, n_dblk, L, n, **acc)
    dC_p = torch.empty(b, n_dblk, L, n, **acc)
    dummy = s_ws
    y = saved["y"] if has_norm else dummy
    rstd = saved["rstd"] if has_norm else dummy
    block_bwd_kernel[(b,)](x, w, conv_bias if conv_bias is not None else dummy, delta, A, B, C,
                           D if D is not None else dummy, norm_weight if has_norm else dummy, dout, y, rstd, ckpt,
                           s_ws, scratch, dp_ws, dx, dw_p, db_p, ddt, dA_p, dB_p, dC_p, dD_p, dnw_p, L, d, n,
                           N_CHUNKS=n_chunks, N_XCHUNKS=triton.cdiv(l_in, chunk), N_DBLK=n_dblk,
                           N_TBLK=triton.cdiv(L, bt), K=k, HAS_BIAS=conv_bias is not None, HAS_D=D is not None,
                           HAS_NORM=has_norm, CHUNK=chunk, BLOCK_D=bd, BLOCK_N=bn,
                           BLOCK_K=triton.next_power_of_2(k), BLOCK_T=bt,
                           CD=tl_dtype(accum_dtype(x)), num_warps=num_warps)
    cast = lambda t, ref: None if ref is None else t.to(ref.dtype)
    return (dx, dw_p.sum(0), cast(db_p.sum(0), conv_bias), ddt, dA_p.sum(0).to(A.dtype), dB_p.sum(1).to(B.dtype),
            dC_p.sum(1).to(C.dtype), cast(dD_p.sum(0), D), cast(dnw_p.sum(0), norm_weight))
