"""The float64 replay of the Blackwell K1 kernel (compiled, not executed: no B200) against chunked.reverse_state_scan.

:mod:`lethe.kernels.gdn.native.k1_scan_model` replays the kernel's product order (the bf16 copy of dS taken before the
decay, the decay applied to the fp32 accumulator, Pa + Pb into dd, then Pc and Pd on the negated dd copy onto dS).
Without rounding it must be K1 exactly (to float64 rounding), with and without erase and dS_final. Pure torch.
"""

import pytest
import torch
from k2_problem import k2_problem
from lethe.kernels.gdn import chunked
from lethe.kernels.gdn.native.k1_scan_model import model


def _rel(x, ref):
    return float((x - ref).abs().max() / ref.abs().max().clamp_min(1e-300))


@pytest.mark.parametrize("erase", [True, False])
@pytest.mark.parametrize("final", [True, False])
def test_model_is_reverse_state_scan(erase, final):
    ctx, do, dS = k2_problem(T=200, V=64, seed=4)
    if not erase:
        ctx = dict(ctx, Wm=None)
    do_c = chunked._to_chunks(do, ctx["C"], torch.float64)
    dSF = dS if final else None
    ref = chunked.reverse_state_scan(do_c, ctx, dSF)
    got = model(ctx["P"], ctx["Kend"], ctx["Qg"], ctx["Wm"], ctx["GC"], do_c, dSF)
    for name, a, r in zip(("dS_next", "dd", "dS0"), got, ref, strict=True):
        assert a.shape == r.shape, name
        assert _rel(a, r) < 1e-12, name


def test_bf16_operands_move_the_result_by_bf16_rounding_only():
    # the kernel's bf16 operands, emulated: an estimate of its rounding, not a measurement (it cannot run here)
    ctx, do, dS = k2_problem(T=256, V=128, seed=5)
    do_c = chunked._to_chunks(do, ctx["C"], torch.float64)
    ref = chunked.reverse_state_scan(do_c, ctx, dS)
    got = model(ctx["P"], ctx["Kend"], ctx["Qg"], ctx["Wm"], ctx["GC"], do_c, dS, operand_dtype=torch.bfloat16)
    errs = [_rel(a, r) for a, r in zip(got, ref, strict=True)]
    assert all(e < 2 ** -6 for e in errs), errs        # a few bf16 ulps (2^-8), not a wrong product
    assert max(errs) > 2 ** -12                          # and the rounding is really applied
