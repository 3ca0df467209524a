"""Non-finite inputs through the forwards: each output element has the float64 oracle's class (finite, NaN,
+inf, -inf), with state sizes that leave padded lanes in the kernels' tiles (N not a power of two), where an
infinite input times a masked-out parameter must not turn into NaN."""

import pytest
import torch
from lethe.kernels.mamba import complex_scan_rope, forward_chunked_scan, fused_block_forward
from mamba_helpers import make_block_inputs, make_scan_inputs
from test_complex_scan_rope import make_inputs as rope_inputs

# numpy under the Triton interpreter warns on inf arithmetic, which is what these tests do on purpose
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _classes(t):
    return torch.stack([torch.isnan(t), torch.isposinf(t), torch.isneginf(t)])


@pytest.mark.parametrize("scan_mode", ["serial", "chunk_parallel"])
def test_selective_scan(scan_mode):
    """+inf and -inf in u with B >= 0 give signed infinite states and outputs (C >= 0), a NaN gives NaN: the same
    classes as the oracle's."""
    u, delta, A, B, C, D = make_scan_inputs(1, 9, 4, 5)
    u, B, C, D = u.abs().clone(), B.abs(), C.abs(), D.abs()
    u[0, 2, 1], u[0, 4, 2], u[0, 6, 3] = float("inf"), float("-inf"), float("nan")
    ref = forward_chunked_scan(u, delta, A, B, C, D, backend="reference")
    assert torch.isposinf(ref).any() and torch.isneginf(ref).any()
    got = forward_chunked_scan(*(t.float() for t in (u, delta, A, B, C, D)), chunk=4, backend="triton",
                               scan_mode=scan_mode)
    assert torch.equal(_classes(got), _classes(ref))


def test_rotary_scan():
    """An infinite x in the rotary scan: the state pair it enters is rotated into both rows, so the classes
    (mostly NaN from inf - inf, some signed infinities) must be the oracle's, padded rows adding nothing."""
    x, dt, A, B, C, theta = rope_inputs(1, 7, 2, 3, 5, 2)
    x = x.clone()
    x[0, 3, 1, 2] = float("inf")
    ref = complex_scan_rope(x, dt, A, B, C, theta, backend="reference")
    got = complex_scan_rope(*(t.float() for t in (x, dt, A, B, C, theta)), chunk=4, backend="triton")
    assert torch.equal(_classes(got), _classes(ref))


@pytest.mark.parametrize("scan_mode", ["serial", "chunk_parallel"])
def test_fused_block_without_norm(scan_mode):
    """A +inf in x of a sign-coherent block without the norm: +inf in every later output of that channel (in the
    chunk-parallel form, carried across chunks into the fix-up)."""
    ins = list(make_block_inputs(1, 9, 4, 3, 4, coherent=True, with_norm=False))
    x = ins[0].clone()
    x[0, 5, 2] = float("inf")
    ins[0] = x
    ref = fused_block_forward(*ins, backend="reference")
    assert torch.isposinf(ref).any()
    got = fused_block_forward(*(t if t is None else t.float() for t in ins), chunk=4, backend="triton",
                              scan_mode=scan_mode)
    assert torch.equal(_classes(got), _classes(ref))
