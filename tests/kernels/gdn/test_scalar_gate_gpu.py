"""The scalar-gate path on a GPU (skip without CUDA): bf16 and fp16 inputs against the float64 chunked path, the
ladder's 5e-3 pin per tensor, every output finite, bitwise repeatable, and float32 inputs float32-grade. The CPU
interpreter cannot check 16-bit arithmetic or the compiled code (test_scalar_gate.py covers the float32 logic)."""

import pytest
import torch
from gdn_helpers import make_inputs, rel_err

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def _run(x, dtype, do, dS, gate_form="auto", backend="triton"):
    from lethe.kernels.gdn.autograd import chunk_family

    xs = [t.to("cuda", dtype).requires_grad_() for t in x]
    o, S = chunk_family(*xs[:4], xs[4], None, member="kda", initial_state=xs[5], output_final_state=True,
                        backend=backend, gate_form=gate_form)
    grads = torch.autograd.grad((o.float() * do).sum() + (S * dS).sum(), xs)
    torch.cuda.synchronize()
    return [o, S, *grads]


def _problem(V):
    q, k, v, g, _, _, beta = make_inputs(B=2, T=1000, H=2, K=128, V=V, seed=5, scalar_g=True, decay=1.0)
    gen = torch.Generator().manual_seed(6)
    h0 = torch.randn(2, 2, 128, V, generator=gen, dtype=torch.float64)
    do = torch.randn(2, 1000, 2, V, generator=gen, dtype=torch.float64)
    dS = torch.randn(2, 2, 128, V, generator=gen, dtype=torch.float64)
    return (q, k, v, g, beta, h0), do, dS


def _reference(x, do, dS):
    from lethe.kernels.gdn.autograd import chunk_family

    x64 = [t.clone().requires_grad_() for t in x]
    o, S = chunk_family(*x64[:4], x64[4], None, member="kda", initial_state=x64[5], output_final_state=True,
                        backend="torch")
    return [o, S, *torch.autograd.grad((o * do).sum() + (S * dS).sum(), x64)]


@pytest.mark.parametrize("V", [64, 128])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_scalar_gate_within_the_pin_and_repeatable_on_gpu(monkeypatch, V, dtype):
    from lethe.kernels.gdn import scalar_gate

    calls = []
    real = scalar_gate.sg_chunk_fwd
    monkeypatch.setattr(scalar_gate, "sg_chunk_fwd", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    x, do, dS = _problem(V)
    # the inputs as the 16-bit run sees them, so the reference differs only by the arithmetic
    x = [t.to(dtype).double() for t in x]
    ref = _reference(x, do, dS)
    got = _run(x, dtype, do.cuda().float(), dS.cuda().float())
    again = _run(x, dtype, do.cuda().float(), dS.cuda().float())
    assert calls == [1, 1]
    for name, a, b, r in zip(("o", "S", "dq", "dk", "dv", "dg", "dbeta", "dh0"), got, again, ref, strict=True):
        assert torch.isfinite(a).all(), name
        assert torch.equal(a, b), f"{name} not bitwise repeatable"
        assert rel_err(a.cpu(), r) <= 5e-3, (name, rel_err(a.cpu(), r))


@pytest.mark.parametrize("V", [64, 128])
def test_scalar_gate_float32_inputs_float32_grade_on_gpu(V):
    x, do, dS = _problem(V)
    ref = _reference(x, do, dS)
    got = _run(x, torch.float32, do.cuda().float(), dS.cuda().float())
    general = _run(x, torch.float32, do.cuda().float(), dS.cuda().float(), gate_form="general")
    for name, a, b, r in zip(("o", "S", "dq", "dk", "dv", "dg", "dbeta", "dh0"), got, general, ref, strict=True):
        assert rel_err(a.cpu(), r) <= max(1e-4, 2 * rel_err(b.cpu(), r)), (name, rel_err(a.cpu(), r),
                                                                            rel_err(b.cpu(), r))
