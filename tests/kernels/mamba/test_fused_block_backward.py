"""C6 fused_block_backward: the oracle and the hand-derived backward against finite differences, the torch and
Triton paths against autograd through the oracle within derived bounds."""

import pytest
import torch
from lethe.kernels.mamba import MambaShapeError, fused_block, fused_block_backward, fused_block_forward
from lethe.kernels.mamba.fused_block_backward.reference import (
    GRAD_NAMES,
    fused_block_grads_magnitude,
    fused_block_grads_ref,
)
from lethe.kernels.mamba.fused_block_forward.reference import fused_block_ref
from mamba_helpers import (
    UNIT_ROUNDOFF,
    assert_within,
    block_backward_steps,
    chunk_carry_steps,
    f64,
    gamma,
    make_block_inputs,
)

SHAPES = [(2, 9, 5, 3, 4, 4, 2), (1, 1, 3, 4, 4, 4, None), (1, 6, 4, 2, 3, 16, 4)]


def _dout(b, L, d, dtype=torch.float64, seed=3):
    return torch.randn(b, L, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(dtype)


def _check(got, ins, dout, b, L, n, d, k, dtype, cp_chunk=None):
    """Every gradient within gamma_m(u_arith) S + u_out |ref|: m from block_backward_steps, S the magnitude
    backward, u_out the stored gradient's rounding (0 when it is stored at the arithmetic's precision).
    ``cp_chunk``: the chunk-parallel order at that chunk, whose m adds chunk_carry_steps twice (the forward's
    checkpoints and the adjoint's carry; lethe.kernels.mamba.error_bounds)."""
    ref = fused_block_grads_ref(*f64(*ins, dout))
    mag = fused_block_grads_magnitude(*f64(*ins, dout))
    u_arith = UNIT_ROUNDOFF[torch.float64 if dtype == torch.float64 else torch.float32]
    u_out = 0.0 if dtype in (torch.float32, torch.float64) else UNIT_ROUNDOFF[dtype]
    m = block_backward_steps(b, L, n, d, k) + (0 if cp_chunk is None else 2 * chunk_carry_steps(L, cp_chunk))
    g = gamma(m, u_arith)
    for name, a, r, m, inp in zip(GRAD_NAMES, got, ref, mag, ins, strict=True):
        if inp is None:
            assert a is None, name
            continue
        assert a.dtype == inp.dtype and a.shape == inp.shape, name
        assert_within(name, a, r, g * m + u_out * r.abs())
    return ref, mag, g


def test_gradcheck_of_the_oracle():
    """Autograd through the oracle agrees with finite differences for all nine inputs."""
    ins = [t.requires_grad_(True) for t in make_block_inputs(1, 4, 3, 2, 3)]
    assert torch.autograd.gradcheck(fused_block_ref, tuple(ins), eps=1e-6, atol=1e-7, rtol=1e-5)


def test_gradcheck_of_the_hand_derived_backward():
    """The Function running the hand-derived backward (torch path, float64, chunk 2 so checkpoints restart)
    agrees with finite differences for all nine inputs."""
    ins = [t.requires_grad_(True) for t in make_block_inputs(1, 4, 3, 2, 3)]
    f = lambda *a: fused_block(*a, chunk=2, backend="torch")
    assert torch.autograd.gradcheck(f, tuple(ins), eps=1e-6, atol=1e-7, rtol=1e-5)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.slow
def test_float64_paths_match_autograd_of_oracle(shape, backend):
    """Both paths in float64 (the Triton kernels take their arithmetic dtype from the inputs): the algebra of each
    backward against autograd through the definition to float64 accuracy."""
    b, L, d, n, k, chunk, block_d = shape
    ins = make_block_inputs(b, L, d, n, k)
    dout = _dout(b, L, d)
    kw = dict(block_d=block_d) if backend == "triton" else {}
    got = fused_block_backward(*ins, dout, chunk=chunk, backend=backend, **kw)
    _check(got, ins, dout, b, L, n, d, k, torch.float64)


@pytest.mark.parametrize("shape", SHAPES[:2])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("coherent", [True, False], ids=["coherent", "signed"])
@pytest.mark.parametrize("exact_norm", [False, True], ids=["f32_arith", "exact_norm"])
@pytest.mark.slow
def test_triton_matches_oracle(shape, dtype, coherent, exact_norm):
    """Triton on ``dtype`` inputs, with float32 arithmetic (exact_norm=False) or the default float64 evaluation,
    within the float32 arithmetic's derived bound of every gradient (the float64 one lies inside it); in the
    coherent draw the bound is also small against the gradients (median below 1%), so the test can see errors of
    that size."""
    b, L, d, n, k, chunk, block_d = shape
    ins = make_block_inputs(b, L, d, n, k, dtype=dtype, coherent=coherent)
    dout = _dout(b, L, d, dtype)
    got = fused_block_backward(*ins, dout, chunk=chunk, backend="triton", block_d=block_d, exact_norm=exact_norm)
    ref, mag, g = _check(got, ins, dout, b, L, n, d, k, dtype)
    if coherent and dtype == torch.float32 and L > 1:
        for name, r, m in zip(GRAD_NAMES, ref, mag, strict=True):
            assert float((g * m / r.abs()).median()) < 1e-2, name


@pytest.mark.parametrize("drop", [2, 7, 8], ids=["conv_bias", "D", "norm_weight"])
@pytest.mark.slow
def test_optional_inputs(drop):
    """With an optional input absent its gradient is None and the others still match."""
    ins = list(make_block_inputs(2, 7, 4, 3, 4, dtype=torch.float32, coherent=True))
    ins[drop] = None
    dout = _dout(2, 7, 4, torch.float32)
    got = fused_block_backward(*ins, dout, chunk=4, backend="triton", block_d=2)
    _check(got, ins, dout, 2, 7, 3, 4, 4, torch.float32)


def test_autograd_function_matches_direct_backward():
    """fused_block's autograd wiring returns exactly the direct C6 call's gradients (same saved forward state)."""
    ins = [t.requires_grad_(True) for t in make_block_inputs(1, 6, 3, 2, 4, dtype=torch.float32)]
    dout = _dout(1, 6, 3, torch.float32)
    fused_block(*ins, chunk=4, backend="triton").backward(dout)
    direct = fused_block_backward(*(t.detach() for t in ins), dout, chunk=4, backend="triton")
    for name, t, r in zip(GRAD_NAMES, ins, direct, strict=True):
        assert torch.equal(t.grad, r), name


@pytest.mark.parametrize("exact_norm", [False, True], ids=["f32_arith", "exact_norm"])
@pytest.mark.slow
def test_backward_is_deterministic(exact_norm):
    """Two runs, the same bits (no atomics; partial sums reduced by torch in a fixed order)."""
    ins = make_block_inputs(2, 5, 4, 2, 4, dtype=torch.float32)
    dout = _dout(2, 5, 4, torch.float32)
    a = fused_block_backward(*ins, dout, chunk=4, backend="triton", block_d=2, exact_norm=exact_norm)
    b = fused_block_backward(*ins, dout, chunk=4, backend="triton", block_d=2, exact_norm=exact_norm)
    assert all(torch.equal(p, q) for p, q in zip(a, b, strict=True))


def test_guards():
    """The backward refuses what the forward refuses (the channel check), a dout of the wrong shape, and saved
    state from another chunk size."""
    x, w, bias, delta, A, B, C, D, nw = ins = make_block_inputs(1, 6, 4, 3, 4, dtype=torch.float32)
    dout = _dout(1, 6, 4, torch.float32)
    with pytest.raises(MambaShapeError, match="x has 5 channels but conv_weight has 4"):
        fused_block_backward(torch.cat([x, x[..., :1]], -1), w, bias, delta, A, B, C, D, nw, dout, backend="triton")
    with pytest.raises(MambaShapeError, match="dout has shape"):
        fused_block_backward(*ins, dout[:, :5], backend="triton")
    saved = fused_block_forward(*ins, chunk=4, backend="torch", return_saved=True)[1]
    with pytest.raises(MambaShapeError, match="saved checkpoints"):
        fused_block_backward(*ins, dout, chunk=2, saved=saved, backend="torch")


def _classes(t):
    return torch.stack([torch.isnan(t), torch.isposinf(t), torch.isneginf(t)])


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy under the interpreter warns on inf arithmetic
def test_non_finite_inputs_give_the_oracles_non_finite_pattern():
    """One +inf in x of a sign-coherent block without the norm, and dout >= 0: the infinity reaches the state and
    every later state, G >= 0, so the oracle's dA is +inf there (not NaN) -- and the kernel must match it element
    by element (NaN, +inf, -inf told apart), which it only does if the past-the-end steps of the last chunk (G = 0,
    state infinite) add nothing rather than 0 * inf."""
    ins = list(make_block_inputs(1, 9, 4, 3, 4, coherent=True, with_norm=False))
    x = ins[0].clone()
    x[0, 5, 2] = float("inf")
    ins[0] = x
    dout = _dout(1, 9, 4).abs()
    ref = fused_block_grads_ref(*ins, dout)
    assert torch.isposinf(ref[4]).any()  # the case the test is about: an infinite, not NaN, dA
    for backend, dtype in (("torch", torch.float64), ("triton", torch.float32)):
        got = fused_block_backward(*(t if t is None else t.to(dtype) for t in ins), dout.to(dtype), chunk=4,
                                   backend=backend)
        for name, a, r in zip(GRAD_NAMES, got, ref, strict=True):
            if r is not None:
                assert torch.equal(_classes(a), _classes(r)), (backend, name)


def test_norm_backward_of_a_huge_y_does_not_underflow():
    """|y| near 1e20: r^3 ~ 1e-60 underflows float32 where every gradient is representable. The backward forms the
    norm's part as r (g dout - (y r) s / d_model), each factor of order one or of dout, so every gradient stays
    within its bound. Float32 arithmetic (exact_norm=False), where the underflow would happen."""
    ins = list(make_block_inputs(1, 6, 4, 3, 4, dtype=torch.float32, coherent=True))
    ins[0] = ins[0] * 1e19
    dout = _dout(1, 6, 4, torch.float32)
    got = fused_block_backward(*ins, dout, chunk=4, backend="triton", exact_norm=False)
    _check(got, ins, dout, 1, 6, 3, 4, 4, torch.float32)


def _scale_invariant_block(b=1, L=6, d=4, n=3, k=4):
    """Inputs for which the direction of y does not depend on delta, A, B, C or D: x constant in time (so are p
    and v), delta the same for every channel, A's rows equal and D one value. Then y_t = v f_t for a scalar f_t
    and the norm's output depends on those parameters only through eps / f_t^2: their exact gradients are sums
    over channels that cancel to almost nothing."""
    x, w, bias, delta, A, B, C, D, nw = make_block_inputs(b, L, d, n, k)
    x = x[:, :1].expand_as(x).contiguous()
    delta = delta[..., :1].expand_as(delta).contiguous()
    A = A[:1].expand_as(A).contiguous()
    D = torch.full_like(D, 1.0)
    return tuple(t.to(torch.float32) for t in (x, w, bias, delta, A, B, C, D, nw))


def test_norm_backward_is_exact_at_the_scale_invariance():
    """At the RMSNorm's scale invariance (see _scale_invariant_block) each float32 gradient must be within its own
    rounding, u_32 |ref|, plus gamma_m(u_64) S: the float64 evaluation the chooser makes by default. Float32
    arithmetic (exact_norm=False) leaves rounding of the size of the terms, gamma_m(u_32) S, which this bound does
    not admit for dB -- the case the verifier's battery charged."""
    b, L, d, n, k = 1, 6, 4, 3, 4
    ins = _scale_invariant_block(b, L, d, n, k)
    dout = _dout(b, L, d, torch.float32)
    ref = fused_block_grads_ref(*f64(*ins, dout))
    mag = fused_block_grads_magnitude(*f64(*ins, dout))
    g64 = gamma(block_backward_steps(b, L, n, d, k), UNIT_ROUNDOFF[torch.float64])
    i_db = GRAD_NAMES.index("dB")
    # the case the test is about: the exact dB is below the float32 rounding of its terms
    assert float(ref[i_db].abs().max()) < UNIT_ROUNDOFF[torch.float32] * float(mag[i_db].max())
    bound = lambda r, m: UNIT_ROUNDOFF[torch.float32] * r.abs() + g64 * m
    got = fused_block_backward(*ins, dout, chunk=4, backend="triton", block_d=2)
    for name, a, r, m in zip(GRAD_NAMES, got, ref, mag, strict=True):
        assert a.dtype == torch.float32, name
        assert_within(name, a, r, bound(r, m))
    loose = fused_block_backward(*ins, dout, chunk=4, backend="triton", block_d=2, exact_norm=False)
    err = (loose[i_db].double() - ref[i_db]).abs()
    assert bool((err > bound(ref[i_db], mag[i_db])).any())


def test_exact_norm_applies_to_the_torch_path_and_keeps_the_autograd_wiring():
    """The torch path takes the same float64 evaluation (its float32 arithmetic has the same cancellation), and
    fused_block's backward, which hands over a float32 saved state, returns the direct call's gradients."""
    b, L, d, n, k = 1, 6, 4, 3, 4
    ins = _scale_invariant_block(b, L, d, n, k)
    dout = _dout(b, L, d, torch.float32)
    ref = fused_block_grads_ref(*f64(*ins, dout))
    mag = fused_block_grads_magnitude(*f64(*ins, dout))
    g64 = gamma(block_backward_steps(b, L, n, d, k), UNIT_ROUNDOFF[torch.float64])
    got = fused_block_backward(*ins, dout, chunk=4, backend="torch")
    for name, a, r, m in zip(GRAD_NAMES, got, ref, mag, strict=True):
        assert_within(name, a, r, UNIT_ROUNDOFF[torch.float32] * r.abs() + g64 * m)
    leaves = [t.clone().requires_grad_(True) for t in ins]
    fused_block(*leaves, chunk=4, backend="torch").backward(dout)
    for name, t, r in zip(GRAD_NAMES, leaves, got, strict=True):
        assert torch.equal(t.grad, r), name


# as the forward's: L not a multiple of the chunk over channel blocks with a partial one; chunk 1; chunk >= L
CP_SHAPES = [(2, 9, 5, 3, 4, 4, 2), (1, 6, 4, 2, 3, 1, 4), (1, 5, 3, 4, 4, 16, None)]


@pytest.mark.parametrize("shape", CP_SHAPES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("with_norm", [True, False], ids=["norm", "no_norm"])
@pytest.mark.slow
def test_chunk_parallel_matches_autograd_of_oracle(shape, dtype, with_norm):
    """scan_mode="chunk_parallel" (its forward's checkpoints, the chunks' local adjoints, the reversed carry, the
    per-(block, chunk) gradients, dx) against autograd through the oracle, all nine gradients, within the
    chunk-parallel bound; float32 with float32 arithmetic (exact_norm=False), where the kernels' own rounding is
    what is measured."""
    b, L, d, n, k, chunk, block_d = shape
    ins = make_block_inputs(b, L, d, n, k, dtype=dtype, with_norm=with_norm)
    dout = _dout(b, L, d, dtype)
    got = fused_block_backward(*ins, dout, chunk=chunk, backend="triton", block_d=block_d, exact_norm=False,
                               scan_mode="chunk_parallel")
    _check(got, ins, dout, b, L, n, d, k, dtype, cp_chunk=chunk)


@pytest.mark.parametrize("shape", CP_SHAPES)
@pytest.mark.slow
def test_chunk_parallel_matches_serial(shape):
    """Both launch shapes on float32 inputs (coherent draw, float32 arithmetic) agree gradient by gradient within
    the sum of their bounds, and the sum is small against the gradients (median below 1%) where L > 1, so a wrong
    carry would show."""
    b, L, d, n, k, chunk, block_d = shape
    ins = make_block_inputs(b, L, d, n, k, dtype=torch.float32, coherent=True)
    dout = _dout(b, L, d, torch.float32)
    got = {mode: fused_block_backward(*ins, dout, chunk=chunk, backend="triton", block_d=block_d, exact_norm=False,
                                      scan_mode=mode) for mode in ("serial", "chunk_parallel")}
    ref = fused_block_grads_ref(*f64(*ins, dout))
    mag = fused_block_grads_magnitude(*f64(*ins, dout))
    u = UNIT_ROUNDOFF[torch.float32]
    g = (gamma(block_backward_steps(b, L, n, d, k), u)
         + gamma(block_backward_steps(b, L, n, d, k) + 2 * chunk_carry_steps(L, chunk), u))
    for name, a, s_, r, m in zip(GRAD_NAMES, got["chunk_parallel"], got["serial"], ref, mag, strict=True):
        assert_within(name, a, s_, g * m)
        assert float((g * m / r.abs()).median()) < 1e-2, name


def test_chunk_parallel_autograd_wiring_and_default_call():
    """fused_block(scan_mode="chunk_parallel") returns exactly the direct chunk-parallel backward's gradients (the
    same saved forward state), and the default call (exact_norm: the float64 evaluation, its forward rerun in the
    same mode) is within the float32 bound of every gradient."""
    b, L, d, n, k, chunk = 1, 6, 3, 2, 4, 4
    ins = make_block_inputs(b, L, d, n, k, dtype=torch.float32)
    dout = _dout(b, L, d, torch.float32)
    leaves = [t.clone().requires_grad_(True) for t in ins]
    fused_block(*leaves, chunk=chunk, backend="triton", scan_mode="chunk_parallel").backward(dout)
    direct = fused_block_backward(*ins, dout, chunk=chunk, backend="triton", scan_mode="chunk_parallel")
    for name, t, r in zip(GRAD_NAMES, leaves, direct, strict=True):
        assert torch.equal(t.grad, r), name
    _check(direct, ins, dout, b, L, n, d, k, torch.float32, cp_chunk=chunk)
    with pytest.raises(ValueError, match="scan_mode must be one of"):
        fused_block_backward(*ins, dout, backend="triton", scan_mode="auto")


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy under the interpreter warns on inf arithmetic
def test_chunk_parallel_non_finite_pattern():
    """The non-finite case above through the chunk-parallel launches: an infinite state carried across chunks into
    the fix-up and the gradient programs must give the oracle's classes element by element."""
    ins = list(make_block_inputs(1, 9, 4, 3, 4, coherent=True, with_norm=False))
    x = ins[0].clone()
    x[0, 5, 2] = float("inf")
    ins[0] = x
    dout = _dout(1, 9, 4).abs()
    ref = fused_block_grads_ref(*ins, dout)
    assert torch.isposinf(ref[4]).any()
    got = fused_block_backward(*(t if t is None else t.float() for t in ins), dout.float(), chunk=4,
                               backend="triton", scan_mode="chunk_parallel")
    for name, a, r in zip(GRAD_NAMES, got, ref, strict=True):
        if r is not None:
            assert torch.equal(_classes(a), _classes(r)), name
