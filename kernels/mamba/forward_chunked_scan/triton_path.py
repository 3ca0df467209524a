"""The Triton path of the chunked selective-scan forward (no ``tl.dot``: the scan is elementwise work per channel
and state, so it never reaches the MMA lowering behind state-spaces/mamba#904).

Grid ``(batch, ceil(d_model / BLOCK_D))``. Each program holds the state ``h[BLOCK_D, BLOCK_N]`` in float32
registers and walks time in chunks of ``CHUNK`` steps: at a chunk's start it stores h (the checkpoint the backward
restarts from), then runs the chunk's steps, a step past the sequence's end masked out (so any L works, and any
d_model / N through the channel and state masks). Inputs are loaded in their own dtype and widened to float32 (float64
inputs: float64 throughout); y is stored in u's dtype.

The chunk count is a compile-time constant: Triton 3.6's interpreter cannot take a runtime loop bound (numpy 2
hands it a one-element array), and the CPU tests run there. A new chunk count compiles a new binary.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._triton_utils import accum_dtype, conv_window, round_to, tl_dtype


@triton.jit
def scan_fwd_kernel(u_ptr, dt_ptr, a_ptr, b_ptr, c_ptr, d_ptr, y_ptr, ckpt_ptr, hlast_ptr, L, DM, N,
                    N_CHUNKS: tl.constexpr,
                    HAS_D: tl.constexpr, CHUNK: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr,
                    CD: tl.constexpr):
    pid_b = tl.program_id(0).to(tl.int64)
    pid_d = tl.program_id(1)
    offs_d = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
    offs_n = tl.arange(0, BLOCK_N)
    md = offs_d < DM
    mn = offs_n < N
    m2 = md[:, None] & mn[None, :]
    dn = offs_d[:, None] * N + offs_n[None, :]
    a = tl.load(a_ptr + dn, mask=m2, other=0.0).to(CD)
    if HAS_D:
        dskip = tl.load(d_ptr + offs_d, mask=md, other=0.0).to(CD)
    h = tl.zeros([BLOCK_D, BLOCK_N], dtype=CD)
    row = pid_b * L  # first time row of this batch element
    for c in range(0, N_CHUNKS):
        tl.store(ckpt_ptr + (pid_b * N_CHUNKS + c) * DM * N + dn, h, mask=m2)
        for i in range(0, CHUNK):
            t = c * CHUNK + i
            ok = t < L
            mt = md & ok
            u_t = tl.load(u_ptr + (row + t) * DM + offs_d, mask=mt, other=0.0).to(CD)
            dt_t = tl.load(dt_ptr + (row + t) * DM + offs_d, mask=mt, other=0.0).to(CD)
            b_t = tl.load(b_ptr + (row + t) * N + offs_n, mask=mn & ok, other=0.0).to(CD)
            c_t = tl.load(c_ptr + (row + t) * N + offs_n, mask=mn & ok, other=0.0).to(CD)
            # a masked step has dt = 0 and B = 0: exp(0) * h + 0 leaves h as it was
            h = tl.exp(dt_t[:, None] * a) * h + (dt_t * u_t)[:, None] * b_t[None, :]
            h = tl.where(m2, h, 0.0)  # padded lanes stay 0: an infinite input times a masked-out B would leave inf * 0 = NaN there
            y_t = tl.sum(h * c_t[None, :], axis=1)
            if HAS_D:
                y_t += dskip * u_t
            tl.store(y_ptr + (row + t) * DM + offs_d, round_to(y_t, y_ptr.dtype.element_ty), mask=mt)
    tl.store(hlast_ptr + pid_b * DM * N + dn, h, mask=m2)


def block_sizes(d_model: int, n: int, block_d: int | None = None) -> tuple[int, int]:
    """(BLOCK_D, BLOCK_N): all states of a channel in one program (N is at most a few hundred in Mamba), and
    channels grouped so a program holds about 2048 float32 state values -- the register budget of 4 warps."""
    bn = triton.next_power_of_2(n)
    if block_d is None:
        block_d = max(1, min(triton.next_power_of_2(d_model), 2048 // bn))
    return block_d, bn


def scan_fwd(u, delta, A, B, C, D, chunk: int, num_warps: int = 4, block_d: int | None = None):
    """Returns ``(y in u's dtype, checkpoints [batch, n_chunks, d_model, N], final state)``, states in
    accum_dtype(u)``."""
    b, L, d = u.shape
    n = A.shape[1]
    u, delta, A, B, C = (x.contiguous() for x in (u, delta, A, B, C))
    D = None if D is None else D.contiguous()
    n_chunks = -(-L // chunk)
    bd, bn = block_sizes(d, n, block_d)
    y = torch.empty_like(u)
    ckpt = u.new_empty(b, n_chunks, d, n, dtype=accum_dtype(u))
    hlast = u.new_empty(b, d, n, dtype=accum_dtype(u))
    grid = (b, triton.cdiv(d, bd))
    scan_fwd_kernel[grid](u, delta, A, B, C, D if D is not None else u, y, ckpt, hlast, L, d, n, n_chunks,
                          HAS_D=D is not None, CHUNK=chunk, BLOCK_D=bd, BLOCK_N=bn, CD=tl_dtype(accum_dtype(u)),
                          num_warps=num_warps)
    return y, ckpt, hlast


@triton.jit
def cp_local_kernel(u_ptr, w_ptr, bias_ptr, dt_ptr, a_ptr, b_ptr, c_ptr, d_ptr, yloc_ptr, hend_ptr, dsum_ptr, L,
                    DM, N, K: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK_K: tl.constexpr,
                    HAS_D: tl.constexpr, CHUNK: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr,
                    CD: tl.constexpr):
    """Chunk-parallel pass 1, grid (batch, d-blocks, chunks): each chunk's scan from a zero state -- its local
    outputs, its end state and the sum of its steps (the chunk's decay is exp(A times that sum)).

    ``K = 0``: the scan's input is ``u`` itself (C1). ``K > 0``: ``u_ptr`` is the fused block's x
    ``[batch, L + K - 1, d_model]`` and the input is made on the fly, silu of the causal conv with weight ``w``
    ``[d_model, K]`` (and bias), exactly as the fused forward's serial kernel makes it (C5); a chunk's first steps
    read the K - 1 rows before it, which is what makes the conv chunk-local."""
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
    if HAS_D:
        dskip = tl.load(d_ptr + offs_d, mask=md, other=0.0).to(CD)
    if K > 0:
        offs_k = tl.arange(0, BLOCK_K)
        mk = offs_k < K
        wt = tl.load(w_ptr + offs_d[:, None] * K + offs_k[None, :], mask=md[:, None] & mk[None, :],
                     other=0.0).to(CD)
        if HAS_BIAS:
            bias = tl.load(bias_ptr + offs_d, mask=md, other=0.0).to(CD)
        else:
            bias = tl.zeros([BLOCK_D], dtype=CD)  # not read (conv_window's HAS_BIAS)
        xrow = pid_b * (L + K - 1)
    h = tl.zeros([BLOCK_D, BLOCK_N], dtype=CD)
    s = tl.zeros([BLOCK_D], dtype=CD)
    row = pid_b * L
    for i in range(0, CHUNK):
        t = c * CHUNK + i
        ok = t < L
        mt = md & ok
        if K > 0:
            _, p = conv_window(u_ptr, xrow, t, offs_d, offs_k, mt, mk, wt, bias, DM, HAS_BIAS, CD)
            u_t = p / (1.0 + tl.exp(-p))
        else:
            u_t = tl.load(u_ptr + (row + t) * DM + offs_d, mask=mt, other=0.0).to(CD)
        dt_t = tl.load(dt_ptr + (row + t) * DM + offs_d, mask=mt, other=0.0).to(CD)
        b_t = tl.load(b_ptr + (row + t) * N + offs_n, mask=mn & ok, other=0.0).to(CD)
        c_t = tl.load(c_ptr + (row + t) * N + offs_n, mask=mn & ok, other=0.0).to(CD)
        h = tl.exp(dt_t[:, None] * a) * h + (dt_t * u_t)[:, None] * b_t[None, :]
        h = tl.where(m2, h, 0.0)  # padded lanes stay 0 (see scan_fwd_kernel)
        s += dt_t
        y_t = tl.sum(h * c_t[None, :], axis=1)
        if HAS_D:
            y_t += dskip * u_t
        tl.store(yloc_ptr + (row + t) * DM + offs_d, y_t, mask=mt)
    tl.store(hend_ptr + (pid_b * n_chunks + c) * DM * N + dn, h, mask=m2)
    tl.store(dsum_ptr + (pid_b * n_chunks + c) * DM + offs_d, s, mask=md)


@triton.jit
def cp_carry_kernel(a_ptr, hend_ptr, dsum_ptr, ckpt_ptr, hlast_ptr, DM, N, N_CHUNKS: tl.constexpr,
                    BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr, CD: tl.constexpr, REVERSE: tl.constexpr):
    """Chunk-parallel pass 2, grid (batch, d-blocks): the carry across chunks, H_c = exp(A S_c) H_{c-1} + the
    chunk's local end state; stores each chunk's start state (the checkpoints) and the last state.

    ``REVERSE``: the same recurrence from the last chunk to the first, for an adjoint that runs backwards in time
    (the fused backward's G: there ``hend`` is a chunk's local adjoint after its first step and each stored value
    is the adjoint entering the chunk from its right)."""
    pid_b = tl.program_id(0).to(tl.int64)
    pid_d = tl.program_id(1)
    offs_d = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
    offs_n = tl.arange(0, BLOCK_N)
    md = offs_d < DM
    m2 = md[:, None] & (offs_n < N)[None, :]
    dn = offs_d[:, None] * N + offs_n[None, :]
    a = tl.load(a_ptr + dn, mask=m2, other=0.0).to(CD)
    H = tl.zeros([BLOCK_D, BLOCK_N], dtype=CD)
    for cc in range(0, N_CHUNKS):
        if REVERSE:
            c = N_CHUNKS - 1 - cc
        else:
            c = cc
        base = pid_b * N_CHUNKS + c
        tl.store(ckpt_ptr + base * DM * N + dn, H, mask=m2)
        s = tl.load(dsum_ptr + base * DM + offs_d, mask=md, other=0.0)
        H = tl.exp(s[:, None] * a) * H + tl.load(hend_ptr + base * DM * N + dn, mask=m2, other=0.0)
    tl.store(hlast_ptr + pid_b * DM * N + dn, H, mask=m2)


@triton.jit
def cp_fix_kernel(dt_ptr, a_ptr, c_ptr, yloc_ptr, ckpt_ptr, y_ptr, L, DM, N, CHUNK: tl.constexpr,
                  BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr, CD: tl.constexpr):
    """Chunk-parallel pass 3, grid (batch, d-blocks, chunks): add the carried-in state's contribution,
    y_t += sum_n C_t exp(A sum_{chunk start..t} delta) H_start, and store y in its dtype."""
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
    H = tl.load(ckpt_ptr + (pid_b * n_chunks + c) * DM * N + dn, mask=m2, other=0.0)
    s = tl.zeros([BLOCK_D], dtype=CD)
    row = pid_b * L
    for i in range(0, CHUNK):
        t = c * CHUNK + i
        ok = t < L
        mt = md & ok
        s += tl.load(dt_ptr + (row + t) * DM + offs_d, mask=mt, other=0.0).to(CD)
        c_t = tl.load(c_ptr + (row + t) * N + offs_n, mask=mn & ok, other=0.0).to(CD)
        y_t = tl.load(yloc_ptr + (row + t) * DM + offs_d, mask=mt, other=0.0)
        y_t += tl.sum(tl.exp(s[:, None] * a) * H * c_t[None, :], axis=1)
        tl.store(y_ptr + (row + t) * DM + offs_d, round_to(y_t, y_ptr.dtype.element_ty), mask=mt)


def scan_fwd_chunk_parallel(u, delta, A, B, C, D, chunk: int, num_warps: int = 4, block_d: int | None = None):
    """The chunk-parallel forward (three launches: local scans, the carry, the fix-up); same returns as
    :func:`scan_fwd`. The chunks' scans run side by side, so a long sequence keeps more of the GPU busy than the
    serial walk; the carry is one short sequential pass over the chunks."""
    b, L, d = u.shape
    n = A.shape[1]
    u, delta, A, B, C = (x.contiguous() for x in (u, delta, A, B, C))
    D = None if D is None else D.contiguous()
    n_chunks = -(-L // chunk)
    bd, bn = block_sizes(d, n, block_d)
    n_dblk = triton.cdiv(d, bd)
    acc = dict(dtype=accum_dtype(u), device=u.device)
    yloc = torch.empty(b, L, d, **acc)
    hend = torch.empty(b, n_chunks, d, n, **acc)
    dsum = torch.empty(b, n_chunks, d, **acc)
    ckpt = torch.empty(b, n_chunks, d, n, **acc)
    hlast = torch.empty(b, d, n, **acc)
    y = torch.empty_like(u)
    cd = tl_dtype(accum_dtype(u))
    cp_local_kernel[(b, n_dblk, n_chunks)](u, u, u, delta, A, B, C, D if D is not None else u, yloc, hend, dsum, L,
                                           d, n, K=0, HAS_BIAS=False, BLOCK_K=1, HAS_D=D is not None, CHUNK=chunk,
                                           BLOCK_D=bd, BLOCK_N=bn, CD=cd, num_warps=num_warps)
    cp_carry_kernel[(b, n_dblk)](A, hend, dsum, ckpt, hlast, d, n, N_CHUNKS=n_chunks, BLOCK_D=bd, BLOCK_N=bn, CD=cd,
                                 REVERSE=False, num_warps=num_warps)
    cp_fix_kernel[(b, n_dblk, n_chunks)](delta, A, C, yloc, ckpt, y, L, d, n, CHUNK=chunk, BLOCK_D=bd, BLOCK_N=bn,
                                         CD=cd, num_warps=num_warps)
    return y, ckpt, hlast
