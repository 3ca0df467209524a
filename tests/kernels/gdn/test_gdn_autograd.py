"""The autograd entry (kernels/gdn/autograd.py): gradients of the members' own gate tensors.

A gate that a member broadcasts (SSD's scalar decay, KDA's beta into both b and w, a per-head decay of KDA or GDN)
gets the sum of the broadcast gradient. With 16-bit inputs that sum must be taken in float32 and rounded once:
summing gradients already rounded to bf16 adds one rounding per summed term.
"""

import pytest
import torch
from gdn_helpers import make_inputs, rel_err
from lethe.kernels.gdn import reference as R
from lethe.kernels.gdn.autograd import chunk_family

DEV = "cuda" if torch.cuda.is_available() else "cpu"  # the Triton tests: a GPU, or the interpreter (conftest.py)


def _case(member, scalar_g):
    q, k, v, g, b, w, beta = make_inputs(T=64, K=32, V=32, scalar_g=scalar_g, seed=7)
    leaves = dict(q=q, k=k, v=v, g=g)
    if member == "kda":
        leaves["b"] = beta
    do = torch.randn(1, 64, 2, 32, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    return leaves, do


def _grads(member, leaves, do, dtype, backend="torch", expand_outside=False, device="cpu", **options):
    lv = {n: t.to(dtype).to(device).requires_grad_() for n, t in leaves.items()}
    args = dict(lv)
    if expand_outside:  # what a caller broadcasting the gate itself gets: autograd sums in the leaves' dtype
        K = lv["q"].shape[-1]
        if args["g"].dim() == 3 and member != "ssd":
            args["g"] = args["g"].unsqueeze(-1).expand(*args["g"].shape, K)
    o, _ = chunk_family(**args, member=member, chunk=16, backend=backend, **options)
    grads = torch.autograd.grad(o, list(lv.values()), do.to(dtype).to(device))
    return {n: gr.cpu() for n, gr in zip(lv, grads, strict=True)}


def _oracle(member, leaves, do, dtype=torch.float64):
    """float64 gradients on the inputs as rounded to ``dtype`` (what the candidate received)."""
    lv = {n: t.to(dtype).double().requires_grad_() for n, t in leaves.items()}
    g = lv["g"]
    if member == "kda" and g.dim() == 3:
        g = g.unsqueeze(-1).expand(*g.shape, lv["q"].shape[-1])
    o = R.member_reference(member, lv["q"], lv["k"], lv["v"], g, lv.get("b"), None)
    return dict(zip(lv, torch.autograd.grad(o, list(lv.values()), do.to(dtype).double()), strict=True))


@pytest.mark.parametrize("member,scalar_g,gate", [("kda", False, "b"), ("kda", True, "g"), ("kda", True, "b"),
                                                  ("ssd", True, "g")])
def test_broadcast_gate_gradient_is_rounded_once(member, scalar_g, gate):
    leaves, do = _case(member, scalar_g)
    ref = _oracle(member, leaves, do, torch.bfloat16)[gate]
    got = _grads(member, leaves, do, torch.bfloat16)[gate]
    assert got.dtype == torch.bfloat16 and got.shape == leaves[gate].shape
    # float32 arithmetic and one rounding: almost every element is the float64 value rounded to bf16
    same = (got == ref.to(torch.bfloat16)).double().mean().item()
    assert same > 0.97, same


def test_kda_takes_a_per_head_decay_like_its_broadcast():
    leaves, do = _case("kda", True)
    a = _grads("kda", leaves, do, torch.float32)
    b = _grads("kda", leaves, do, torch.float32, expand_outside=True)
    for n in a:
        assert a[n].shape == b[n].shape == leaves[n].shape
        assert rel_err(a[n], b[n]) < 1e-6, n
    ref = _oracle("kda", leaves, do)
    for n in a:
        assert rel_err(a[n], ref[n]) < 2e-5, n


@pytest.mark.parametrize("member,scalar_g", [("gla", False), ("gdn", False)])
def test_members_without_a_broadcast_keep_their_gradient_dtype_and_values(member, scalar_g):
    q, k, v, g, b, w, _ = make_inputs(T=32, K=16, V=16, scalar_g=scalar_g, seed=3)
    leaves = dict(q=q, k=k, v=v, g=g) | (dict(b=b, w=w) if member == "gdn" else {})
    do = torch.randn(1, 32, 2, 16, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    lv = {n: t.to(torch.bfloat16).requires_grad_() for n, t in leaves.items()}
    o, _ = chunk_family(**lv, member=member, chunk=16, backend="torch")
    grads = torch.autograd.grad(o, list(lv.values()), do.to(torch.bfloat16))
    assert all(gr.dtype == torch.bfloat16 and gr.shape == lv[n].shape for n, gr in zip(lv, grads, strict=True))
    ref = _oracle(member, leaves, do, torch.bfloat16) if member != "gdn" else None
    if ref is not None:
        for n, gr in zip(lv, grads, strict=True):
            assert rel_err(gr, ref[n]) < 1e-2, n


def test_rounding_before_the_sum_is_what_the_check_above_catches(monkeypatch):
    # the same check with the float32 sum switched off (gradients rounded to bf16, then summed): it fails
    from lethe.kernels.gdn import autograd

    monkeypatch.setattr(autograd, "summed_gradients", lambda member, own: ())
    leaves, do = _case("kda", False)
    ref = _oracle("kda", leaves, do, torch.bfloat16)["b"]
    got = _grads("kda", leaves, do, torch.bfloat16)["b"]
    assert (got == ref.to(torch.bfloat16)).double().mean().item() < 0.9


def test_triton_backend_sums_the_broadcast_in_float32_too():
    # fp16 (bf16 is not trustworthy under the CPU interpreter): the Triton path's torch tail casts to grad_dtype.
    # float32 products throughout ("ieee"), so that the one rounding is the only error worth counting
    leaves, do = _case("kda", False)
    ref = _oracle("kda", leaves, do, torch.float16)["b"]
    got = _grads("kda", leaves, do, torch.float16, backend="triton", device=DEV, dot_precision="ieee")["b"]
    assert got.dtype == torch.float16
    assert (got == ref.to(torch.float16)).double().mean().item() > 0.97


def test_fused_tail_writes_the_requested_gradient_dtype():
    # hybrid-tc finishes with the fused tail kernel: it must honour grad_dtypes as the torch tail does
    from lethe.kernels.gdn.reference import gates_for_member
    from lethe.kernels.gdn.triton_bwd import triton_chunk_bwd
    from lethe.kernels.gdn.triton_fwd import triton_chunk_fwd

    leaves, do = _case("kda", False)
    x = {n: t.to(torch.float16).to(DEV) for n, t in leaves.items()}
    g, b, w = gates_for_member("kda", x["q"], x["v"], x["g"], x["b"], None)
    _, _, ctx = triton_chunk_fwd(x["q"], x["k"], x["v"], g.contiguous(), b.contiguous(), w.contiguous(), chunk=16)
    ctx["grad_dtypes"] = {"db": torch.float32, "dw": torch.float32}
    tail = triton_chunk_bwd(do.to(torch.float16).to(DEV), ctx, fused_tail=False)
    fused = triton_chunk_bwd(do.to(torch.float16).to(DEV), ctx, fused_tail=True)
    for name, a, c in zip(("dq", "dk", "dv", "dg", "db", "dw"), tail, fused, strict=False):
        want = torch.float32 if name in ("db", "dw") else torch.float16
        assert a.dtype == c.dtype == want, name
        assert rel_err(c, a) < (1e-6 if want == torch.float32 else 1e-3), name


def test_only_the_summed_gradients_travel_in_float32():
    from lethe.kernels.gdn.autograd import summed_gradients

    four, three = (4, torch.bfloat16), (3, torch.bfloat16)
    assert summed_gradients("kda", [four, three, None]) == ("db", "dw")
    assert summed_gradients("kda", [three, three, None]) == ("dg", "db", "dw")
    assert summed_gradients("ssd", [three, None, None]) == ("dg",)
    assert summed_gradients("gdn", [three, four, four]) == ("dg",)
    assert summed_gradients("gdn", [four, four, four]) == summed_gradients("gla", [four, None, None]) == ()
    assert summed_gradients("la", [None, None, None]) == ()
