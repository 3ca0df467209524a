"""Each hand-written trusted kernel computes what its KernelBench reference computes.

Unit tests, not the verifier: the reference's ``Model`` and the kernel's ``ModelNew`` are built from the same
init inputs, the reference's weights are loaded into the kernel, and both run on a small input of the problem's
layout (odd sizes, so no block size divides them). Torch kernels run in float64 and must agree to rounding;
Triton kernels run in float32 under the CPU interpreter against the float64 reference. A second input mixes in
zeros, huge values, NaN and +-Inf: a correct kernel reproduces the reference's non-finite positions too.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lethe.trusted import corpus as C

ROOT = Path(__file__).resolve().parents[2]
KB = C.kb_levels_root(C.DEFAULT_KB_ROOT)
pytestmark = pytest.mark.skipif(not (KB / "level1").is_dir(), reason="KernelBench checkout not beside the worktree")

HANDS = {h["name"]: h for h in C.hand_kernels()}


def _randn(*shape):
    return torch.randn(*shape, dtype=torch.float64)


def _probs(*shape):
    return torch.softmax(_randn(*shape), dim=-1)


# Small inputs in each problem's layout; the init inputs are the problem's own.
SMALL = {
    "level1/23_Softmax.py": lambda: [_randn(3, 37)],
    "level1/24_LogSoftmax.py": lambda: [_randn(3, 37)],
    "level1/38_L1Norm_.py": lambda: [_randn(3, 37)],
    "level1/39_L2Norm_.py": lambda: [_randn(3, 37)],
    "level1/21_Sigmoid.py": lambda: [_randn(3, 37) * 30],
    "level1/25_Swish.py": lambda: [_randn(3, 37) * 30],
    "level1/29_Softplus.py": lambda: [_randn(3, 37) * 30],
    "level1/88_MinGPTNewGelu.py": lambda: [_randn(5, 33) * 4],
    "level1/47_Sum_reduction_over_a_dimension.py": lambda: [_randn(2, 131, 5)],
    "level1/48_Mean_reduction_over_a_dimension.py": lambda: [_randn(2, 37, 5)],
    "level1/49_Max_reduction_over_a_dimension.py": lambda: [_randn(2, 37, 5)],
    "level1/51_Argmax_over_a_dimension.py": lambda: [_randn(2, 37, 5)],
    "level1/89_cumsum.py": lambda: [_randn(3, 301)],
    "level1/91_cumsum_reverse.py": lambda: [_randn(3, 301)],
    "level1/93_masked_cumsum.py": lambda: [_randn(3, 301), torch.rand(3, 301) > 0.5],
    "level1/94_MSELoss.py": lambda: [_randn(3, 37), _randn(3, 37)],
    "level1/95_CrossEntropyLoss.py": lambda: [_randn(37, 10), torch.randint(0, 10, (37,))],
    "level1/96_HuberLoss.py": lambda: [_randn(3, 37) * 2, _randn(3, 37)],
    "level1/100_HingeLoss.py": lambda: [_randn(37, 1), torch.randint(0, 2, (37, 1)).double() * 2 - 1],
    "level1/41_Max_Pooling_1D.py": lambda: [_randn(2, 3, 29)],
    "level1/44_Average_Pooling_1D.py": lambda: [_randn(2, 3, 29)],
    "level2/12_Gemm_Multiply_LeakyReLU.py": lambda: [_randn(5, 1024)],
    "level2/30_Gemm_GroupNorm_Hardtanh.py": lambda: [_randn(5, 1024)],
    "level2/62_Matmul_GroupNorm_LeakyReLU_Sum.py": lambda: [_randn(5, 512)],
    "level2/99_Matmul_GELU_Softmax.py": lambda: [_randn(5, 100)],
    "level3/1_MLP.py": lambda: [_randn(3, 1000)],
}


def _special(inputs):
    """The first floating input with zeros, huge values, NaN and +-Inf at fixed positions."""
    x = inputs[0].clone()
    flat = x.view(-1)
    n = flat.numel()
    for pos, val in ((0, 0.0), (n // 5, 1e30), (n // 3, -1e30), (n // 2, math.nan), (2 * n // 3, math.inf),
                     (3 * n // 4, -math.inf)):
        flat[pos] = val
    return [x, *inputs[1:]]


def _load(src, name):
    ns = {"__name__": f"lethe_trusted_test_{name}"}
    exec(compile(src, name, "exec"), ns)  # noqa: S102 - repository and KernelBench sources
    return ns


def _models(name):
    h = HANDS[name]
    ref = _load((KB / h["problem"]).read_text(), h["problem"])
    cand = _load(h["candidate"], h["path"])
    init = ref["get_init_inputs"]()
    torch.manual_seed(0)
    model = ref["Model"](*init)
    kernel = cand["ModelNew"](*init)
    sd = model.state_dict()
    if sd:
        kernel.load_state_dict(sd)  # the names and shapes match the reference's, or this raises
    return h, model, kernel


def _cast(inputs, dtype):
    return [t.to(dtype) if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in inputs]


def _run(name, inputs):
    h, model, kernel = _models(name)
    want = model.double()(*_cast(inputs, torch.float64))
    if h["triton"]:
        got = kernel.float()(*_cast(inputs, torch.float32)).double()
        tol = {"rtol": 2e-5, "atol": 1e-6}
    else:
        got = kernel.double()(*_cast(inputs, torch.float64))
        tol = {"rtol": 1e-9, "atol": 1e-12}
    return h, want, got, tol


def test_every_hand_kernel_has_a_small_input():
    assert len(HANDS) >= 20
    assert sorted({h["problem"] for h in HANDS.values()} - set(SMALL)) == []


def check_random(name):
    torch.manual_seed(1)
    h, want, got, tol = _run(name, SMALL[HANDS[name]["problem"]]())
    assert got.shape == want.shape and got.dtype.is_floating_point == want.dtype.is_floating_point
    if got.dtype.is_floating_point:
        torch.testing.assert_close(got, want, **tol)
    else:
        assert torch.equal(got, want)


def check_special(name):
    torch.manual_seed(2)
    h, want, got, tol = _run(name, _special(SMALL[HANDS[name]["problem"]]()))
    assert got.shape == want.shape
    if got.dtype.is_floating_point:
        assert torch.equal(torch.isnan(got), torch.isnan(want)), "NaN positions differ"
        inf = torch.isinf(want)
        assert torch.equal(got[inf], want[inf]) and torch.equal(torch.isinf(got), inf), "Inf differs"
        fin = torch.isfinite(want)
        # Finite outputs are compared relative to the scale of the finite reference values (huge inputs make
        # some outputs huge, so a pointwise atol would be meaningless).
        scale = want[fin].abs().max().clamp_min(1.0) if fin.any() else torch.tensor(1.0, dtype=want.dtype)
        torch.testing.assert_close(got[fin] / scale, want[fin] / scale, rtol=tol["rtol"], atol=tol["rtol"])
    else:
        assert torch.equal(got, want)


CHECKS = {"random": check_random, "special": check_special}


def _check(name, mode):
    """Torch kernels are checked here; Triton kernels in a fresh interpreter with TRITON_INTERPRET=1 set before
    triton is first imported (other imports in this process, torch's own included, may load it earlier, and
    the interpreter cannot run kernels of a triton loaded without it)."""
    if not HANDS[name]["triton"]:
        CHECKS[mode](name)
        return
    env = {**os.environ, "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, __file__, name, mode], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]


@pytest.mark.parametrize("name", sorted(HANDS))
@pytest.mark.slow
def test_matches_reference_in_float64(name):
    _check(name, "random")


@pytest.mark.parametrize("name", sorted(HANDS))
@pytest.mark.slow
def test_matches_reference_on_special_values(name):
    _check(name, "special")


@pytest.mark.parametrize("name", sorted(n for n, h in HANDS.items() if not h["triton"]))
def test_gradient_matches_reference_in_float64(name):
    h, model, kernel = _models(name)
    torch.manual_seed(3)
    inputs = SMALL[h["problem"]]()
    if not any(isinstance(t, torch.Tensor) and t.is_floating_point() for t in inputs):
        pytest.skip("no floating input")
    outs = []
    for m in (model.double(), kernel.double()):
        xs = [t.clone().requires_grad_(True) if t.is_floating_point() else t for t in inputs]
        y = m(*xs)
        if not y.dtype.is_floating_point:
            pytest.skip("integer output")
        g = torch.randn(y.shape, dtype=y.dtype, generator=torch.Generator().manual_seed(4))
        grads = torch.autograd.grad(y, [t for t in xs if t.is_floating_point()] + list(m.parameters()), g,
                                    allow_unused=True)
        outs.append(grads)
    for a, b in zip(*outs, strict=True):
        if a is None or b is None:
            assert a is None and b is None or torch.count_nonzero(a if a is not None else b) == 0
            continue
        torch.testing.assert_close(b, a, rtol=1e-8, atol=1e-11)


if __name__ == "__main__":  # one check in this process: python test_trusted_kernels.py NAME random|special
    CHECKS[sys.argv[2]](sys.argv[1])
