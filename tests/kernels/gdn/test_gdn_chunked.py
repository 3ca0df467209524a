"""The PyTorch chunked WY form and its explicit backward against the float64 oracle (autograd through the loop)."""

import pytest
import torch
from gdn_helpers import make_inputs, rel_err
from lethe.kernels.gdn import chunked
from lethe.kernels.gdn import reference as R
from lethe.kernels.gdn.autograd import chunk_family


def _oracle_grads(q, k, v, g, b, w, S0, do, dS):
    args = [x.clone().requires_grad_() for x in (q, k, v, g, b, w, S0)]
    o, S = R.recurrent_gdn(*args[:6], initial_state=args[6], output_final_state=True)
    grads = torch.autograd.grad((o * do).sum() + (S * dS).sum(), args)
    return o.detach(), S.detach(), grads


@pytest.mark.parametrize("chunk,T,K,V", [(64, 128, 16, 32), (16, 128, 32, 16), (64, 100, 16, 16)])
def test_chunked_matches_oracle_float64(chunk, T, K, V):
    """Forward, final state and all seven gradients agree with the oracle to ~1e-12 (T=100: padded tail)."""
    q, k, v, g, b, w, _ = make_inputs(T=T, K=K, V=V)
    gen = torch.Generator().manual_seed(1)
    S0 = torch.randn(1, 2, K, V, generator=gen, dtype=torch.float64)
    do = torch.randn(1, T, 2, V, generator=gen, dtype=torch.float64)
    dS = torch.randn(1, 2, K, V, generator=gen, dtype=torch.float64)
    o_ref, S_ref, g_ref = _oracle_grads(q, k, v, g, b, w, S0, do, dS)
    o, S, ctx = chunked.chunk_fwd(q, k, v, g, b, w, chunk=chunk, initial_state=S0)
    assert rel_err(o, o_ref) < 1e-12
    assert rel_err(S, S_ref) < 1e-12
    grads = chunked.chunk_bwd(do, ctx, dS)
    for name, got, ref in zip(("dq", "dk", "dv", "dg", "db", "dw", "dS0"), grads, g_ref, strict=True):
        assert rel_err(got, ref) < 1e-12, name


def test_reverse_scan_carries_float32_for_low_precision():
    """dS is carried in float32 (not the input dtype) when the inputs are bfloat16."""
    q, k, v, g, b, w, _ = make_inputs(T=64, K=16, V=16, dtype=torch.bfloat16)
    o, S, ctx = chunked.chunk_fwd(q, k, v, g, b, w, chunk=16)
    assert o.dtype == torch.bfloat16 and S.dtype == torch.float32
    do_c = chunked._to_chunks(torch.ones_like(o), 16, torch.float32)
    dSn, dd, dinit = chunked.reverse_state_scan(do_c, ctx)
    assert dSn.dtype == dd.dtype == dinit.dtype == torch.float32


@pytest.mark.parametrize("member", R.MEMBERS)
def test_chunk_family_torch_member_vs_own_reference(member):
    """Each member through the one autograd.Function: output vs its own definition, grads vs that definition's autograd."""
    q, k, v, g, b, w, beta = make_inputs(T=96, K=16, V=16, scalar_g=(member == "ssd"))
    gb = beta if member == "kda" else b
    inputs = {"q": q, "k": k, "v": v}
    if member != "la":
        inputs["g"] = g
    if member in ("kda", "gdn"):
        inputs["b"] = gb
    if member == "gdn":
        inputs["w"] = w
    leaves = {n: x.clone().requires_grad_() for n, x in inputs.items()}
    ref = R.member_reference(member, leaves["q"], leaves["k"], leaves["v"], leaves.get("g"), leaves.get("b"),
                             leaves.get("w"))
    do = torch.randn_like(ref)
    ref_grads = torch.autograd.grad((ref * do).sum(), list(leaves.values()))
    leaves2 = {n: x.clone().requires_grad_() for n, x in inputs.items()}
    o, _ = chunk_family(member=member, backend="torch", chunk=32, **leaves2)
    assert rel_err(o, ref) < 1e-12
    got = torch.autograd.grad((o * do).sum(), list(leaves2.values()))
    for name, a, r in zip(leaves, got, ref_grads, strict=True):
        assert rel_err(a, r) < 1e-11, f"{member}: d{name}"


def test_native_backend_off_gpu_is_the_torch_path_exactly():
    """The native K1 is a CUDA float32 kernel; elsewhere (CPU, float64) backend="native" must fall back to the
    torch scan bit for bit rather than run something else."""
    q, k, v, g, b, w, _ = make_inputs(T=16, K=16, V=16)
    outs = {}
    for backend in ("torch", "native"):
        leaves = [t.clone().requires_grad_(True) for t in (q, k, v, g, b, w)]
        o, _ = chunk_family(*leaves, member="gdn", backend=backend)
        o.sum().backward()
        outs[backend] = [o.detach()] + [t.grad for t in leaves]
    for a, c in zip(outs["torch"], outs["native"], strict=True):
        assert torch.equal(a, c)


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_chunk_family_initial_and_final_state_grads(backend):
    """Initial-state gradient and final-state output through the autograd.Function (both backends)."""
    q, k, v, g, b, w, _ = make_inputs(T=48, K=16, V=16)
    S0 = torch.randn(1, 2, 16, 16, dtype=torch.float64)
    dS = torch.randn(1, 2, 16, 16, dtype=torch.float64)
    ref_in = [x.clone().requires_grad_() for x in (q, k, v, g, b, w, S0)]
    o_r, S_r = R.recurrent_gdn(*ref_in[:6], initial_state=ref_in[6], output_final_state=True)
    do = torch.randn_like(o_r)
    ref_grads = torch.autograd.grad((o_r * do).sum() + (S_r * dS).sum(), ref_in)
    dt = torch.float64 if backend == "torch" else torch.float32
    tol = 1e-12 if backend == "torch" else 2e-5
    ins = [x.to(dt).clone().requires_grad_() for x in (q, k, v, g, b, w, S0)]
    o, S = chunk_family(*ins[:6], member="gdn", initial_state=ins[6], output_final_state=True, chunk=16,
                        backend=backend)
    assert rel_err(o, o_r) < tol and rel_err(S, S_r) < tol
    grads = torch.autograd.grad((o * do.to(dt)).sum() + (S * dS.to(S.dtype)).sum(), ins)
    for name, a, r in zip(("dq", "dk", "dv", "dg", "db", "dw", "dS0"), grads, ref_grads, strict=True):
        assert rel_err(a, r) < tol, name


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("with_init", [False, True])
def test_chunked_nonfinite_query_lands_like_the_recurrence(dtype, with_init):
    """NaN and +-inf in q give exactly the recurrence's non-finite pattern (o_t = S_t^T q_t: one infinite product
    per output, so +-inf with the sign of q_tc * S_t[c, v]), not the NaN of inf * 0 and inf - inf that the
    distributed form (q Gamma) S_0 + P delta produces. Every finite output row is bit-identical to the run with
    the non-finite steps' queries set to zero (those rows do not read them)."""
    q, k, v, g, b, w, _ = make_inputs(T=40, K=16, V=16)
    S0 = torch.randn(1, 2, 16, 16, generator=torch.Generator().manual_seed(3), dtype=torch.float64) if with_init \
        else None
    # chunk 16: t=0 (first step, zero initial state when with_init is False), t=19 (inside chunk 1), t=39 (padded tail)
    spots = [(0, 1, 3, float("inf")), (19, 0, 7, float("-inf")), (39, 1, 0, float("inf")), (25, 0, 2, float("nan"))]
    qb = q.clone()
    for t, h, c, val in spots:
        qb[0, t, h, c] = val
    o_ref, _ = R.recurrent_gdn(qb, k, v, g, b, w, initial_state=S0)
    cast = [x.to(dtype) for x in (qb, k, v, g, b, w)]
    o, _, _ = chunked.chunk_fwd(*cast, chunk=16, initial_state=None if S0 is None else S0.to(dtype))
    o, o_ref = o.double(), o_ref
    for f in (torch.isnan, torch.isposinf, torch.isneginf):
        assert torch.equal(f(o), f(o_ref)), f.__name__
    assert int((~torch.isfinite(o_ref)).sum()) == 4 * 16  # every output of the four poisoned (step, head) rows
    fin = torch.isfinite(o_ref)
    tol = 1e-12 if dtype == torch.float64 else 2e-5
    assert float((o[fin] - o_ref[fin]).abs().max() / o_ref[fin].abs().max()) < tol
    q0 = qb.clone()
    q0[~torch.isfinite(q0)] = 0.0
    o0, _, _ = chunked.chunk_fwd(*([q0.to(dtype)] + cast[1:]), chunk=16,
                                 initial_state=None if S0 is None else S0.to(dtype))
    rows = torch.isfinite(o_ref).all(-1)
    assert torch.equal(o[rows], o0.double()[rows])
