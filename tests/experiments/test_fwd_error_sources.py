"""experiments/gdn/fwd_error_sources.py: the TF32 rounding is the hardware's, the unrounded replay is the chunked
forward, and rounding one product group perturbs exactly what that group feeds."""

import importlib
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


def _mod():
    return importlib.import_module("experiments.gdn.fwd_error_sources")


def test_tf32_keeps_ten_mantissa_bits():
    tf32 = _mod().tf32
    one_ulp = 2.0 ** -10  # TF32 spacing at 1
    x = torch.tensor([1.0, 1.0 + one_ulp, 1.0 + 0.4 * one_ulp, 1.0 + 0.6 * one_ulp, -1.0 - 0.6 * one_ulp, 3.0],
                     dtype=torch.float64)
    assert tf32(x, "trunc").tolist() == [1.0, 1.0 + one_ulp, 1.0, 1.0, -1.0, 3.0]
    assert tf32(x, "rna").tolist() == [1.0, 1.0 + one_ulp, 1.0, 1.0 + one_ulp, -1.0 - one_ulp, 3.0]
    r = torch.randn(1000, dtype=torch.float64)
    # within one TF32 unit (truncation) or half of one (nearest) of the value, plus the float32 step before it
    assert float(((tf32(r) - r) / r).abs().max()) <= 2.0 ** -10 + 2.0 ** -23
    assert float(((tf32(r, "rna") - r) / r).abs().max()) <= 2.0 ** -11 + 2.0 ** -23
    with pytest.raises(ValueError):
        tf32(r, "rne")


@pytest.fixture(scope="module")
def small_ctx():
    from lethe.kernels.gdn import chunked

    from tests.kernels.gdn.gdn_helpers import make_inputs

    q, k, v, g, b, w, _ = make_inputs(T=48, K=16, V=16)
    o, _, ctx = chunked.chunk_fwd(q, k, v, g, b, w, None, 16, None)
    return ctx


def test_unrounded_replay_is_the_chunked_forward(small_ctx):
    rep = _mod().replay_forward(small_ctx, frozenset())
    ctx = small_ctx
    want = {"Tm": ctx["Tm"], "Wm": ctx["Wm"], "Hs": ctx["Hs"], "delta": ctx["delta"],
            "o": ctx["Qg"] @ ctx["Hs"] + ctx["P"] @ ctx["delta"]}
    for name, r in want.items():
        assert torch.allclose(rep[name], r, rtol=1e-10, atol=1e-12), name


def test_each_group_perturbs_what_it_feeds(small_ctx):
    mod = _mod()
    exact = mod.replay_forward(small_ctx, frozenset())
    out = mod.replay_forward(small_ctx, frozenset({"output"}))
    assert all(torch.equal(out[n], exact[n]) for n in ("Tm", "Wm", "Hs", "delta")) and not torch.equal(out["o"],
                                                                                                      exact["o"])
    st = mod.replay_forward(small_ctx, frozenset({"state"}))
    assert torch.equal(st["Tm"], exact["Tm"]) and torch.equal(st["Wm"], exact["Wm"])
    assert not torch.equal(st["Hs"], exact["Hs"])
    a = mod.replay_forward(small_ctx, frozenset({"A"}))
    assert not torch.equal(a["Tm"], exact["Tm"])
    for rep in (out, st, a):  # TF32-sized, not wrong
        assert mod.rel(rep["o"], exact["o"]) < 1e-2


def test_k1_p_reaches_the_scan_only(small_ctx):
    mod = _mod()
    o0, c0 = mod.perturbed(small_ctx, frozenset())
    o1, c1 = mod.perturbed(small_ctx, frozenset({mod.K1_P}))
    assert torch.equal(o1, o0) and all(torch.equal(c1[n], c0[n]) for n in ("Tm", "Wm", "Hs", "delta"))
    assert not torch.equal(c1["P"], small_ctx["P"]) and mod.rel(c1["P"], small_ctx["P"]) < 1e-2
    assert torch.equal(c0["P"], small_ctx["P"])
