"""The float64 model of the Blackwell K2 kernel (compiled, not executed: no B200) against chunked.chunk_bwd.

The kernel's arithmetic cannot be run here, so :mod:`lethe.kernels.gdn.native.k2_model` replays its exact products
(orientation, order, 16-wide reduction slices, signs, epilogue mask) in float64. These tests check that this
computation is K2 of :func:`lethe.kernels.gdn.chunked.chunk_bwd`: du through chunk_bwd's dv = du*w and dw = du*v,
dXe and dA through its db = (pairVJP(dA) + dXe*Gamma) * k, all at ~1e-12. Pure NumPy/torch, no CuTe DSL.
"""

import numpy as np
import pytest
import torch
from k2_problem import k2_problem
from lethe.kernels.gdn import chunked
from lethe.kernels.gdn.native import k2_model


def _rel(x, ref):
    x, ref = np.asarray(x, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    return float(np.abs(x - ref).max() / max(np.abs(ref).max(), 1e-300))


def _model_outputs(ctx, do, dS, operand_round=None):
    do_c = chunked._to_chunks(do, ctx["C"], torch.float64)
    _, dd, _ = chunked.reverse_state_scan(do_c, ctx, dS)
    ins = [x.numpy() for x in (dd, ctx["Hs"], ctx["Tm"], ctx["Xe"], ctx["uc"])]
    return k2_model.k2_batched(*ins, operand_round=operand_round)


@pytest.mark.parametrize("V", [64, 128])
def test_k2_model_equals_chunk_bwd(V):
    ctx, do, dS = k2_problem(V=V)
    dXe, du, dA = (torch.from_numpy(x) for x in _model_outputs(ctx, do, dS))
    dq, dk, dv, dg, db, dw, dS0 = chunked.chunk_bwd(do, ctx, dS)
    T, C = ctx["T"], ctx["C"]
    # du: chunk_bwd's only uses of du are dv = du * w and dw = du * v
    assert _rel(chunked._from_chunks(du * ctx["wc"], T), dv) < 1e-12
    assert _rel(chunked._from_chunks(du * ctx["vc"], T), dw) < 1e-12
    # dXe and dA: chunk_bwd's db = de * k with de = pairVJP(dA) + dXe * Gamma
    strict, _ = chunked._masks(C, "cpu")
    de, _, _ = chunked._pair_bwd(dA, ctx["ec"], ctx["kc"], ctx["Ei"] * strict[..., None])
    db_model = chunked._from_chunks((de + dXe * ctx["Gam"]) * ctx["kc"], T)
    assert _rel(db_model, db) < 1e-12
    # structure the kernel's epilogue guarantees: dA strictly lower triangular
    assert torch.all(torch.triu(dA) == 0)


def test_k2_model_products_match_chunk_bwd_formulas():
    """Each output against chunk_bwd's own expressions (dXe = T^T dW, du = T^T dd, dA = -(T^T dT T^T)*strict)."""
    ctx, do, dS = k2_problem(V=128, seed=3)
    do_c = chunked._to_chunks(do, ctx["C"], torch.float64)
    _, dd, _ = chunked.reverse_state_scan(do_c, ctx, dS)
    Tm, HsT = ctx["Tm"], ctx["Hs"].transpose(-1, -2)
    dW = -(dd @ HsT)
    TmT = Tm.transpose(-1, -2)
    dT = dW @ ctx["Xe"].transpose(-1, -2) + dd @ ctx["uc"].transpose(-1, -2)
    strict, _ = chunked._masks(ctx["C"], "cpu")
    ref = (TmT @ dW, TmT @ dd, -(TmT @ dT @ TmT) * strict)
    for got, r in zip(_model_outputs(ctx, do, dS), ref, strict=True):
        assert _rel(got, r.numpy()) < 1e-12


def test_bf16_operand_rounding_estimate():
    """With the kernel's bf16 operands/intermediates (fp64 accumulation) the error is bf16-sized, not larger."""
    ctx, do, dS = k2_problem(V=64, seed=5)
    exact = _model_outputs(ctx, do, dS)
    rounded = _model_outputs(ctx, do, dS, operand_round="bf16")
    for a, b in zip(rounded, exact, strict=True):
        assert 0 < _rel(a, b) < 3e-2
    assert k2_model.round_bf16(np.array([1.0 + 2.0**-8]))[0] == 1.0  # ties to even
    assert k2_model.round_bf16(np.array([1.0 + 3 * 2.0**-9]))[0] == 1.0 + 2.0**-7
