"""NumPy replay of the Hopper K2 kernel's arithmetic (:mod:`.k2_hopper`), in the kernel's order.

The kernel accumulates every output sequentially over its reduction index, one multiply-add per term, in a
fixed order that differs from ``chunk_bwd``'s matmuls in two places:

* phase 1 walks V in tiles of :func:`.k2_hopper.v_tile` columns; within the walk, dT starts as dd u^T
  (over v), and dW = -(dd Hs^T) is formed by negating the accumulated dd Hs^T;
* phase 2 continues the same dT accumulator with dW Xe^T (over k), i.e. dT = dd u^T + dW Xe^T summed as
  one running sum (chunk_bwd adds two separately reduced products, in the other order);
* Y = T^T dT, then Z = Y T^T, and dA = -Z where s < t, exactly 0 elsewhere (no multiplication by the mask).

In float64 (the default) this checks that the kernel's formulas ARE chunk_bwd's K2 (~1e-12, see
tests/kernels/gdn_native/test_k2_hopper_model.py). ``dtype=np.float32`` replays the same order with float32
rounding after every multiply and every add (the kernel fuses them into one FMA, so that replay is an
estimate of the kernel's float32 error, not a bit-exact simulation). Pure NumPy; does not import the CuTe DSL.
"""

from __future__ import annotations

import numpy as np

from .k2_hopper_plan import v_tile


def _seq(acc, a_cols, b_cols):
    """acc[..., m, n] += sum_r a_cols(r)[..., m] * b_cols(r)[..., n], one r at a time in increasing order."""
    for a, b in zip(a_cols, b_cols, strict=True):
        acc += a[..., :, None] * b[..., None, :]
    return acc


def k2_hopper(dd, Hs, T, Xe, u, dtype=np.float64):
    """(dXe, du, dA) for operands with any leading dims: dd [..., C, V], Hs [..., K, V], T [..., C, C],
    Xe [..., C, K], u [..., C, V]; the kernel's accumulation order, in ``dtype``."""
    dd, Hs, T, Xe, u = (np.asarray(x, dtype=dtype) for x in (dd, Hs, T, Xe, u))
    C, V = dd.shape[-2:]
    K = Hs.shape[-2]
    lead = dd.shape[:-2]
    BV = v_tile(V)
    z = lambda *s: np.zeros(lead + s, dtype=dtype)  # noqa: E731
    acc1, dT, du = z(C, K), z(C, C), z(C, V)
    for v0 in range(0, V, BV):
        tile = range(v0, v0 + BV)
        # P4: du[t, v] = sum_r T[r, t] dd[r, v]
        du[..., v0:v0 + BV] = _seq(z(C, BV), (T[..., r, :] for r in range(C)),
                                   (dd[..., r, v0:v0 + BV] for r in range(C)))
        # P2 (first part) and P1, over this tile's v
        _seq(dT, (dd[..., :, v] for v in tile), (u[..., :, v] for v in tile))
        _seq(acc1, (dd[..., :, v] for v in tile), (Hs[..., :, v] for v in tile))
    dW = -acc1
    _seq(dT, (dW[..., :, k] for k in range(K)), (Xe[..., :, k] for k in range(K)))   # P2, second part
    dXe = _seq(z(C, K), (T[..., r, :] for r in range(C)), (dW[..., r, :] for r in range(C)))   # P3
    Y = _seq(z(C, C), (T[..., r, :] for r in range(C)), (dT[..., r, :] for r in range(C)))    # P5
    Z = _seq(z(C, C), (Y[..., :, r] for r in range(C)), (T[..., :, r] for r in range(C)))    # P6
    strict = np.tril(np.ones((C, C), dtype=bool), -1)
    dA = np.where(strict, -Z, np.zeros((), dtype=dtype))
    return dXe, du, dA
