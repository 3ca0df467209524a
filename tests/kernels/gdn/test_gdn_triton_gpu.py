"""The Triton forward's launch options on a GPU (skip without CUDA): options that only move work between programs
or kernels must give bitwise the same results there too, and the WY variants must agree within float32 rounding
of their reordered sums. The CPU interpreter checks the same properties in test_gdn_triton.py, but it ignores
warps and compiles nothing, so only a GPU can catch a code-generation difference."""

import pytest
import torch
from gdn_helpers import make_inputs, rel_err

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def _inputs(V: int, erase: bool = True):
    q, k, v, g, b, w, _ = make_inputs(B=2, T=1000, H=4, K=128, V=V, seed=11)
    x = [t.to("cuda", torch.bfloat16) for t in (q, k, v, g, b, w)]
    if not erase:
        x[4] = None
    return x


def _forward(x):
    from lethe.kernels.gdn.triton_fwd import triton_chunk_fwd

    o, S, ctx = triton_chunk_fwd(*x, chunk=64)
    torch.cuda.synchronize()
    return o, S, ctx["Hs"], ctx["Di"]


@pytest.mark.parametrize("V", [64, 128])
@pytest.mark.parametrize("kernel,option", [("output_fwd_kernel", {"NVL": 1}), ("output_fwd_kernel", {"NVL": 2}),
                                           ("output_fwd_kernel", {"DIRECT": 1}), ("output_fwd_kernel", {"DIRECT": 0})])
def test_work_moving_launch_options_are_bitwise_neutral(monkeypatch, V, kernel, option):
    from lethe.kernels.gdn import triton_fwd

    for erase in (True, False):
        x = _inputs(V, erase)
        base = _forward(x)
        monkeypatch.setitem(triton_fwd.FWD_LAUNCH, kernel, {**triton_fwd.FWD_LAUNCH[kernel], **option})
        got = _forward(x)
        monkeypatch.undo()
        for name, a, r in zip(("o", "S", "Hs", "Di"), got, base, strict=True):
            assert torch.equal(a, r), (kernel, option, erase, name)


@pytest.mark.parametrize("V", [64, 128])
def test_wy_variants_agree_on_gpu(monkeypatch, V):
    # split (the default) and rows run the same substitution; their launch configurations (2 vs 8 warps) may sum
    # in another order, so float32 agreement, not bit equality; blocked inverts differently (16 x 16 blocks).
    # The split kernels' own PREC ("auto": TF32-rn on these bf16 inputs) is set to the forward's dot_precision,
    # which rows and blocked run at, so that the inverses are compared and not the precisions.
    from lethe.kernels.gdn import triton_fwd
    from lethe.kernels.gdn.triton_fwd import triton_chunk_fwd

    for kernel in ("wy_a_kernel", "wy_apply_kernel"):
        monkeypatch.setitem(triton_fwd.FWD_LAUNCH, kernel, {**triton_fwd.FWD_LAUNCH[kernel], "PREC": None})
    x = _inputs(V)
    outs = {wy: triton_chunk_fwd(*x, chunk=64, wy_inverse=wy) for wy in ("split", "rows", "blocked")}
    for wy in ("rows", "blocked"):
        assert rel_err(outs[wy][2]["Tm"], outs["split"][2]["Tm"]) < 1e-5, wy
        assert rel_err(outs[wy][1], outs["split"][1]) < 1e-4, wy
        # the output is bf16: within one bf16 step at the largest magnitude
        assert rel_err(outs[wy][0].float(), outs["split"][0].float()) < 2 ** -8, wy


@pytest.mark.parametrize("V", [64, 128])
def test_precomputed_kend_agrees_within_float32_rounding(monkeypatch, V):
    # KEND moves Kend = k * exp(gamma_C - gamma) from the state kernel into the prep kernel: bitwise on the
    # interpreter, but on the GPU the in-kernel Kend is contracted into the 3xTF32 split (an FMA on the unrounded
    # product) while the loaded one is rounded (seen on the H200: o one bf16 step apart in places, with erase), so
    # agreement to float32 rounding of the states and one bf16 step of o, both ways
    from lethe.kernels.gdn import triton_fwd

    for erase in (True, False):
        x = _inputs(V, erase)
        runs = {}
        for kend in (0, 1):
            monkeypatch.setitem(triton_fwd.FWD_LAUNCH, "state_fwd_kernel",
                                {**triton_fwd.FWD_LAUNCH["state_fwd_kernel"], "KEND": kend})
            runs[kend] = _forward(x)
            monkeypatch.undo()
        (o0, S0, H0, D0), (o1, S1, H1, D1) = runs[0], runs[1]
        for a, r in ((S1, S0), (H1, H0), (D1, D0)):
            assert rel_err(a, r) < 1e-5, erase
        assert rel_err(o1.float(), o0.float()) < 2 ** -8, erase


def test_broadcast_gate_gradients_summed_before_rounding_on_gpu(monkeypatch):
    # KDA's beta and a per-head g through the Triton path in bf16: summing the broadcast gradients in float32
    # (autograd.summed_gradients) must leave them no further from the float64 oracle than summing bf16-rounded
    # gradients did (the order before 621acc8); the CPU replay predicts the bf16 floor at float32-grade products
    from lethe.kernels.gdn import autograd
    from lethe.kernels.gdn import reference as R
    from lethe.kernels.gdn.autograd import chunk_family

    q, k, v, g, _, _, beta = make_inputs(B=1, T=1024, H=2, K=128, V=128, seed=13, scalar_g=True)
    do = torch.randn(1, 1024, 2, 128, generator=torch.Generator().manual_seed(14), dtype=torch.float64)
    low = {n: t.to(torch.bfloat16) for n, t in dict(q=q, k=k, v=v, g=g, b=beta).items()}
    ref_l = {n: t.double().requires_grad_() for n, t in low.items()}
    o = R.member_reference("kda", ref_l["q"], ref_l["k"], ref_l["v"], ref_l["g"].unsqueeze(-1).expand(-1, -1, -1, 128),
                           ref_l["b"])
    ref = dict(zip(ref_l, torch.autograd.grad(o, list(ref_l.values()), do.to(torch.bfloat16).double()), strict=True))

    def run():
        lv = {n: t.cuda().requires_grad_() for n, t in low.items()}
        out, _ = chunk_family(**lv, member="kda", backend="triton")
        gr = torch.autograd.grad(out, list(lv.values()), do.to(torch.bfloat16).cuda())
        return {n: x.cpu() for n, x in zip(lv, gr, strict=True)}

    first = run()
    monkeypatch.setattr(autograd, "summed_gradients", lambda member, own: ())
    after = run()
    for n in ("g", "b"):
        assert first[n].dtype == torch.bfloat16
        assert rel_err(first[n], ref[n]) <= rel_err(after[n], ref[n]), n
