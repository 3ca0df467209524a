"""The candidate worker's in-process checks and copies give the same answers as their plain host definitions.

``_bytes_equal`` (input mutation, ORD-02 overwrite) compares on the tensors' own device instead of round-tripping
both through ``to_np(...).tobytes()``; ``_snap`` skips to_np's second copy for device tensors. Both must agree
with the host definitions bit for bit, NaN payloads and signed zeros included.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lethe.verifier import worker as W
from lethe.verifier.reference import to_np

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32, torch.int16,
          torch.int8, torch.uint8, torch.bool]
INT_OF = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _host_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """The definition _bytes_equal replaced."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return to_np(a).tobytes() == to_np(b).tobytes()


def _sample(dt: torch.dtype, device: str) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    if dt.is_floating_point:
        x = torch.randn(5, 7, generator=g).to(dt)
        x[0, 0], x[0, 1], x[0, 2] = float("nan"), -0.0, float("inf")
    elif dt == torch.bool:
        x = torch.rand(5, 7, generator=g) < 0.5
    else:
        x = torch.randint(0, 100, (5, 7), generator=g).to(dt)
    return x.to(device)


def _pairs(dt: torch.dtype, device: str):
    x = _sample(dt, device)
    yield "equal", x.clone(), x
    y = x.clone()
    flat = y.view(-1)
    flat[3] = flat[4] if bool(flat[3] != flat[4]) else flat[3] + 1
    yield "one element changed", y, x
    if dt.is_floating_point:
        z = x.clone()
        z[0, 1] = 0.0
        yield "-0 became +0", z, x
        n = x.clone()
        n.view(INT_OF[x.element_size()])[0, 0] ^= 1
        yield "other NaN payload", n, x
    t = x.clone()
    t.t_()
    yield "transposed in place", t, x
    yield "non-contiguous, same values", x.clone().t().contiguous().t(), x
    ex = x[:1].expand(5, 7)
    yield "expanded vs materialised", ex, ex.contiguous()
    yield "expanded vs other", ex, x
    e = torch.empty(0, 3, dtype=dt, device=device)
    yield "empty", e, e.clone()
    other = torch.float64 if dt != torch.float64 else torch.float32
    yield "dtype differs", x.clone(), x.to(other)


def _devices():
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", _devices())
@pytest.mark.parametrize("dt", DTYPES, ids=str)
def test_bytes_equal_matches_the_host_definition(dt, device):
    seen = set()
    for why, a, b in _pairs(dt, device):
        got = W._bytes_equal(a, b)
        assert got == _host_equal(a, b), why
        seen.add(got)
    assert seen == {True, False}


def test_bytes_equal_across_devices_and_odd_tensors_falls_back():
    x = torch.randn(4, 4)
    assert W._bytes_equal(x.clone(), x)
    # A lazily negated view is not plain: it takes the host definition, which refuses it as before.
    c = torch.randn(3, dtype=torch.complex64)
    assert not W._plain(c.conj())
    if torch.cuda.is_available():
        assert W._bytes_equal(x.cuda(), x) == _host_equal(x.cuda(), x)


@pytest.mark.gpu
@pytest.mark.parametrize("dt", [torch.float32, torch.float16, torch.bfloat16, torch.int64], ids=str)
def test_snap_of_a_device_tensor_is_to_np(dt):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    x = _sample(dt, "cuda")
    for t in (x, x.t(), x[:, ::2], x[:1].expand(5, 7)):
        got, want = W._snap(t), to_np(t)
        assert got.dtype == want.dtype and got.shape == want.shape
        assert np.ascontiguousarray(got).tobytes() == want.tobytes()


def test_snap_of_a_host_tensor_is_a_private_copy():
    x = torch.randn(3, 4)
    s = W._snap(x)
    x.add_(1.0)
    assert not np.array_equal(s, x.numpy())


def test_loaded_inputs_never_share_the_received_buffer():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    spec = [{"t": "tensor", "key": "k", "dtype": "float32"}, {"t": "value", "v": 3}]
    xs = W._load_inputs(spec, {"k": a}, "cpu")
    xs[0].add_(1.0)
    assert a[0, 0] == 0.0 and xs[1] == 3
    if torch.cuda.is_available():
        ys = W._load_inputs(spec, {"k": a}, "cuda")
        assert ys[0].device.type == "cuda" and torch.equal(ys[0].cpu(), torch.from_numpy(a))
