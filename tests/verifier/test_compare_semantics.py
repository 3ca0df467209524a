"""gates.compare has two backends (numpy for small outputs, torch for large ones): same summaries, bit for bit,
on finite, non-finite and flush-to-zero-alternative inputs, under profiles that do and do not skip NaN."""

from __future__ import annotations

import numpy as np
import pytest

from lethe.verifier import gates as G
from lethe.verifier.profiles import get


def _inputs(case: str):
    rng = np.random.default_rng(7)
    r = rng.standard_normal((37, 53))
    c = (r + rng.standard_normal(r.shape) * 1e-6).astype(np.float32)
    t = np.full(r.shape, 2e-6)
    a = None
    if case in ("nonfinite", "alt"):
        r[0, :5] = [np.nan, np.inf, -np.inf, np.inf, 1e39]  # 1e39 overflows float32: +inf after rounding
        c[0, :5] = [np.nan, np.inf, np.inf, 1.0, np.inf]
        c[3, 7] = np.nan
    if case in ("alt", "alt_finite"):
        a = np.where(np.abs(r) < 0.5, 0.0, r)
    return r, c, t, a


@pytest.mark.parametrize("profile", ["strict", "fast-math"])
@pytest.mark.parametrize("case", ["finite", "nonfinite", "alt", "alt_finite"])
def test_backends_agree(profile, case):
    r, c, t, a = _inputs(case)
    p = get(profile)
    got_np = G._compare_numpy(r, c, "float32", t, p, a)
    got_t = G._compare_torch(r, c, "float32", t, p, a)
    assert got_np == got_t
    assert got_np["ok"] == (got_np["n_bad"] == 0)


def test_nonfinite_semantics_counted():
    r, c, t, _ = _inputs("nonfinite")
    s = G.compare(r, c, "float32", t, get("strict"))
    # NaN/NaN and +inf/+inf agree; -inf vs +inf is wrong; +inf vs 1.0 lost; 1e39 rounds to +inf and agrees;
    # the injected NaN at (3, 7) is new.
    assert (s["agreeing_nonfinite"], s["wrong_nonfinite"], s["lost_nonfinite"], s["new_nonfinite"]) == (3, 1, 1, 1)
    fm = G.compare(r, c, "float32", t, get("fast-math"))
    assert fm["agreeing_nonfinite"] == 2  # the reference-NaN position is not graded under fast-math


def test_dispatch_by_size(monkeypatch):
    calls = []
    monkeypatch.setattr(G, "_compare_torch", lambda *a: calls.append("torch") or {"ok": True})
    monkeypatch.setattr(G, "_compare_numpy", lambda *a: calls.append("numpy") or {"ok": True})
    small = np.zeros(10)
    big = np.zeros(G.TORCH_COMPARE_MIN_NUMEL)
    G.compare(small, small, "float32", 1.0, get("strict"))
    G.compare(big, big, "float32", 1.0, get("strict"))
    assert calls == ["numpy", "torch"]


def test_value_tol_large_path_is_bit_identical():
    import math

    from lethe.verifier import tolerance as T

    rng = np.random.default_rng(0)
    r = rng.standard_normal((600, 600)) * 1e3
    r.flat[3], r.flat[5] = np.inf, np.nan
    c = T.DEFAULT
    m = np.where(np.isfinite(np.abs(r)), np.abs(r), 0.0) + T.output_scale(r)
    want = (c.REL_K * T.EPS["float32"] * m + c.ORD_K * T.acc_eps("float32") * math.sqrt(4099) * m
            + c.SUB_K * 4099 * T.DENORM["float32"])
    assert r.size >= 1 << 18
    assert np.array_equal(T.value_tol(r, "float32", 4099), want)
