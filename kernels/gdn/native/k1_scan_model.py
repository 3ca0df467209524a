"""The arithmetic of the Blackwell K1 kernel (:mod:`.k1_blackwell_scan`, compiled, not executed: no B200) replayed
in torch: same product order, same operands, the same bf16 roundings when asked. DSL-free, so the tests can check
on any machine that the kernel's products are K1 (:func:`lethe.kernels.gdn.chunked.reverse_state_scan`)."""

from __future__ import annotations


def model(P, Kend, Qg, Wm, GC, dO, dS_final=None, operand_dtype=None, split: bool = False):
    """The kernel's arithmetic in torch (float64 unless told otherwise): same product order, same operands.
    ``operand_dtype`` (e.g. torch.bfloat16) rounds what the kernel holds in bf16 -- the inputs and the per-chunk
    copies of dS and dd -- while accumulating in the input dtype: an estimate of the kernel's rounding.
    ``split`` models the Hopper kernel's split-operand mode: P and Qg as a hi/lo pair of ``operand_dtype``.
    Shapes as :func:`lethe.kernels.gdn.chunked.reverse_state_scan`'s ctx: [B,H,N,C,*]; returns (dSN, dd, dS0)."""
    import torch

    def rnd(x):
        return x if operand_dtype is None else x.to(operand_dtype).to(x.dtype)

    def pair(x):
        return rnd(x) + rnd(x - rnd(x)) if split else rnd(x)

    B, H, N, C, V = dO.shape
    K = Qg.shape[-1]
    P, Kend, Qg, dO = pair(P), rnd(Kend), pair(Qg), rnd(dO)
    Wm = None if Wm is None else rnd(Wm)
    dS = dO.new_zeros(B, H, K, V) if dS_final is None else dS_final.to(dO.dtype).clone()
    dSN, dds = [None] * N, [None] * N
    for n in reversed(range(N)):
        dSN[n] = dS.clone()
        dS_op = rnd(dS)                                                       # round 1: bf16 copy of dS
        dS = GC[:, :, n, :, None] * dS                                        # round 1: decay, in fp32
        dd = P[:, :, n].transpose(-1, -2) @ dO[:, :, n] + Kend[:, :, n] @ dS_op   # round 2: Pa, Pb
        dds[n] = dd
        dS = dS + Qg[:, :, n].transpose(-1, -2) @ dO[:, :, n]                 # round 4: Pc
        if Wm is not None:
            dS = dS + Wm[:, :, n].transpose(-1, -2) @ rnd(-dd)                # round 4: Pd, on the -dd copy
    return torch.stack(dSN, dim=2), torch.stack(dds, dim=2), dS
