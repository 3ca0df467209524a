"""Small Triton kernels the AOT tests compile (kept apart from the tests: Triton reads a kernel's source file)."""

import triton
import triton.language as tl


@triton.jit
def matmul(a_ptr, b_ptr, c_ptr, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
           BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * stride_am + (k + rk)[None, :] * stride_ak)
        b = tl.load(b_ptr + (k + rk)[:, None] * stride_bk + rn[None, :] * stride_bn)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc.to(tl.bfloat16))


@triton.jit
def three_accumulators(a_ptr, b_ptr, c_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    # Three BM x BN fp32 accumulators live across the K loop: on sm_100 each takes BN columns of tensor memory.
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc1 = tl.zeros((BM, BN), dtype=tl.float32)
    acc2 = tl.zeros((BM, BN), dtype=tl.float32)
    acc3 = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b1 = tl.load(b_ptr + (k + rk)[:, None] * BN + rn[None, :])
        b2 = tl.load(b_ptr + K * BN + (k + rk)[:, None] * BN + rn[None, :])
        b3 = tl.load(b_ptr + 2 * K * BN + (k + rk)[:, None] * BN + rn[None, :])
        acc1 = tl.dot(a, b1, acc1)
        acc2 = tl.dot(a, b2, acc2)
        acc3 = tl.dot(a, b3, acc3)
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], (acc1 + acc2 * acc3).to(tl.bfloat16))


@triton.jit
def add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.autotune(
    configs=[triton.Config({"BLOCK": 256}, num_warps=2, num_stages=1),
             triton.Config({"BLOCK": 1024}, num_warps=4, num_stages=2)],
    key=["n"],
)
@triton.jit
def add_tuned(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def never_launched(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs) * 2)


def launch_add(x, y, out):
    """A candidate-style host wrapper: the launches the recorder must see."""
    n = x.numel()
    add[(triton.cdiv(n, 256),)](x, y, out, n, BLOCK=256)
    add_tuned[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, out, n)
    return out


def launch_matmul(a, b, c, BM, BN, BK, num_warps, num_stages):
    """Host wrapper for ``matmul`` (contiguous bf16 operands); the tile and pipeline depth are the caller's."""
    M, K = a.shape
    N = b.shape[1]
    matmul[(triton.cdiv(M, BM), triton.cdiv(N, BN))](a, b, c, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                                     c.stride(0), c.stride(1), BM=BM, BN=BN, BK=BK,
                                                     num_warps=num_warps, num_stages=num_stages)
    return c


def launch_three_accumulators(a, b, c, K, BM=128, BN=256, BK=32):
    three_accumulators[(1,)](a, b, c, K, BM=BM, BN=BN, BK=BK, num_warps=4, num_stages=1)
    return c
