import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, sam, sak, sbk, sbn, scm, scn,
                   K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        a = tl.load(a_ptr + rm[:, None] * sam + kk[None, :] * sak,
                    mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + kk[:, None] * sbk + rn[None, :] * sbn,
                    mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b, input_precision="ieee")
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


class ModelNew(nn.Module):
    """fp32 Triton matmul with a 128x1024 accumulator tile held by 4 warps ("one block per row panel").

    Numerically exact, but the fp32 accumulator alone is 1024 values per thread against a 255-register limit:
    compiled ahead of time it uses all 255 registers and spills ~11 KB (sm_90a) / ~37 KB (sm_100a) per thread
    to local memory. (The IEEE fp32 dot does not use tensor memory, so TMEM is not the limit here.)
    """

    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        af = a.float().contiguous()
        bf = b.float().contiguous()
        M, K = af.shape
        N = bf.shape[1]
        c = torch.empty(M, N, dtype=torch.float32, device=a.device)
        BM, BN, BK = 128, 1024, 32
        grid = (triton.cdiv(M, BM), triton.cdiv(N, BN))
        _matmul_kernel[grid](af, bf, c, M, N, af.stride(0), af.stride(1), bf.stride(0), bf.stride(1),
                             c.stride(0), c.stride(1), K=K, BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK,
                             num_warps=4, num_stages=2)
        return c.to(a.dtype)
