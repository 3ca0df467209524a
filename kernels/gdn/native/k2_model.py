"""Float64 NumPy model of exactly what the Blackwell K2 kernel (:mod:`.k2_blackwell`) computes.

The kernel is compiled, not executed (no B200), so its arithmetic is checked through this model instead: the
same seven products in the same orientation and order (P1 .. P6, each reduction accumulated 16 wide at a time
as the ``tcgen05.mma`` instructions issue it), the same sign handling (G = S0 dd^T is negated when written as
the bf16 operand dW^T) and the same epilogue (dA = -Z masked strictly lower). The tests compare it with
:func:`lethe.kernels.gdn.chunked.chunk_bwd` in float64 (~1e-12).

``operand_round="bf16"`` additionally rounds what the kernel holds in bf16 (the inputs and the three
intermediates dW, dT, Y written to shared memory) with round-to-nearest-even, accumulating in float64: an
estimate of the kernel's input/intermediate rounding, not a simulation of its fp32 accumulation order.
Pure NumPy; does not import the CuTe DSL.
"""

from __future__ import annotations

import numpy as np

MMA_K = 16


def round_bf16(x: np.ndarray) -> np.ndarray:
    """Round to bfloat16 (nearest even) through float32, returned as float64."""
    f = np.ascontiguousarray(x, dtype=np.float32)
    u = f.view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32).astype(np.float64)


def mma(a: np.ndarray, b: np.ndarray, acc: np.ndarray | None = None) -> np.ndarray:
    """D (M x N) = [acc +] A (M x R) B^T (B given N x R), accumulated one 16-wide reduction slice at a time."""
    R = a.shape[1]
    assert b.shape[1] == R and R % MMA_K == 0
    d = np.zeros((a.shape[0], b.shape[0])) if acc is None else acc.copy()
    for k0 in range(0, R, MMA_K):
        d += a[:, k0:k0 + MMA_K] @ b[:, k0:k0 + MMA_K].T
    return d


def k2_chunk(dd, S0, T, Xe, U, operand_round: str | None = None):
    """One chunk, the kernel's products. dd [C,V], S0 [K,V], T [C,C], Xe [C,K], U [C,V] ->
    (dXe [C,K], du [C,V], dA [C,C]). Operands are given in their natural row-major orientation; each MMA
    below names A (M x R) and B (N x R) exactly as the kernel's shared-memory views present them."""
    rnd = round_bf16 if operand_round == "bf16" else (lambda x: np.asarray(x, dtype=np.float64))
    dd, S0, T, Xe, U = (rnd(x) for x in (dd, S0, T, Xe, U))
    C = T.shape[0]
    G = mma(S0, dd)                    # P1: A = S0 (K x V), B = dd (C x V)            -> G = -dW^T [K, C]
    dWt = rnd(-G)                      # written to SMEM as P2's A (bf16)
    dW = rnd(-G.T)                     # ... and transposed as P4a's A
    dXt = mma(dWt, T.T)                # P2: A = dW^T (K x C), B[t, r] = T[r, t]         -> dXe^T [K, C]
    dUt = mma(dd.T, T.T)               # P3: A = dd^T (V x C), B[t, r] = T[r, t]         -> du^T [V, C]
    dT = mma(dd, U)                    # P4b: A = dd (C x V), B = U (C x V)
    dT = mma(dW, Xe, acc=dT)           # P4a: A = dW (C x K), B = Xe (C x K)            -> dT [C, C]
    Y = mma(T.T, rnd(dT).T)            # P5: A[r, t] = T[t, r], B[s, t] = dT[t, s]      -> Y = T^T dT
    Z = mma(rnd(Y), T)                 # P6: A = Y, B[c, s] = T[c, s]                   -> Z = Y T^T
    strict = np.tril(np.ones((C, C), dtype=bool), -1)
    dA = np.where(strict, -Z, 0.0)     # epilogue: negate, strictly lower
    return dXt.T, dUt.T, dA


def k2_batched(dd, S0, T, Xe, U, operand_round: str | None = None):
    """All chunks: inputs with leading dims [..., C, .] (e.g. [B, H, N, C, V]); one kernel CTA per chunk."""
    lead = dd.shape[:-2]
    outs = ([], [], [])
    for idx in np.ndindex(*lead):
        for o, r in zip(outs, k2_chunk(dd[idx], S0[idx], T[idx], Xe[idx], U[idx], operand_round), strict=True):
            o.append(r)
    return tuple(np.stack(o).reshape(*lead, *o[0].shape) for o in outs)
