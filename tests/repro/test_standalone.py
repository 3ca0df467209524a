"""lethe.repro.standalone: the tensor file round-trips exactly, and its comparison is the verifier's."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lethe.repro import standalone as S
from lethe.verifier import gates as G
from lethe.verifier import profiles as PR
from lethe.verifier.reference import flatten


def test_tensor_file_round_trips_every_dtype_bit_for_bit(tmp_path):
    gen = torch.Generator().manual_seed(0)
    ts = {f"x/{name}": (torch.randn(3, 5, generator=gen) * 10).to(dt) for name, dt in S.DTYPES.items()}
    ts["x/float32"].view(-1)[:3] = torch.tensor([float("nan"), float("inf"), -0.0])
    ts["empty"] = torch.empty(0, 4)
    ts["scalar"] = torch.tensor(2.5, dtype=torch.float64)
    S.write_tensors(tmp_path / "t.safetensors", ts, {"case": "{}"})
    back, meta = S.read_tensors(tmp_path / "t.safetensors")
    assert meta == {"case": "{}"}
    assert sorted(back) == sorted(ts)
    for k, t in ts.items():
        assert back[k].dtype == t.dtype and back[k].shape == t.shape
        assert S.bitwise_equal(back[k], t), k


def test_tensor_file_layout_is_safetensors(tmp_path):
    """8-byte little-endian header length, JSON header with dtype/shape/data_offsets, 8-byte aligned data."""
    import json
    import struct

    S.write_tensors(tmp_path / "t.safetensors", {"a": torch.arange(3, dtype=torch.int32)}, {})
    raw = (tmp_path / "t.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    assert n % 8 == 0
    head = json.loads(raw[8:8 + n])
    assert head["a"] == {"dtype": "I32", "shape": [3], "data_offsets": [0, 12]}
    assert np.frombuffer(raw[8 + n:], dtype="<i4").tolist() == [0, 1, 2]


def _cases():
    gen = torch.Generator().manual_seed(1)
    r = torch.randn(64, dtype=torch.float64, generator=gen)
    r[:4] = torch.tensor([float("nan"), float("inf"), float("-inf"), 1e-40])
    c = (r + torch.randn(64, dtype=torch.float64, generator=gen) * 1e-6).to(torch.float32)
    c[0], c[1], c[5], c[6] = 0.0, float("-inf"), float("nan"), c[6] + 1.0
    tol = torch.full((64,), 1e-5, dtype=torch.float64)
    return r, c, tol


@pytest.mark.parametrize("profile", ["strict", "fast-math"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("with_alt", [False, True])
def test_compare_agrees_with_the_verifier(profile, dtype, with_alt):
    r, c, tol = _cases()
    c = c.to(getattr(torch, dtype))
    alt = torch.where(r.abs() < 1e-30, torch.zeros_like(r), r) if with_alt else None
    prof = PR.get(profile)
    want = G.compare(r.numpy(), c.float().numpy(), dtype, tol.numpy(), prof,
                     alt_ref=None if alt is None else alt.numpy())
    got = S.compare(r, c, dtype, tol, skip_nan=prof.allow_nan_nonpropagation, alt_ref=alt)
    for k in ("ok", "n_bad", "new_nonfinite", "lost_nonfinite", "wrong_nonfinite"):
        assert got[k] == want[k], k
    assert got["first_bad"] == want.get("first_bad", [])
    assert got["max_err_over_tol"] == pytest.approx(want["max_err_over_tol"], rel=1e-12)


def test_compare_reports_a_shape_mismatch():
    got = S.compare(torch.zeros(2, 3, dtype=torch.float64), torch.zeros(3, 2), "float32", torch.tensor(1.0))
    assert not got["ok"] and got["why"] == "shape"


def test_flatten_is_the_verifiers():
    t = torch.ones(2)
    out = (t, [t * 2, (3.0, "x")], 4)
    a, b = S.flatten(out), flatten(out)
    assert len(a) == len(b) == 4
    assert all(torch.equal(x, y) and x.dtype == y.dtype for x, y in zip(a, b, strict=True))


def test_bitwise_equal_sees_nan_payloads_and_signed_zero():
    a = torch.tensor([0.0, 1.0])
    assert not S.bitwise_equal(a, torch.tensor([-0.0, 1.0]))
    assert S.bitwise_equal(a.to(torch.bfloat16), a)  # bf16 is compared through its exact float32 widening
