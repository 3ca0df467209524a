"""experiments/native/k2_error_sources.py on a short sequence: with nothing rounded its K2 is the torch K2, the
kernel's bf16 roundings cost bf16-sized errors in K2 and in the gradients, and only hi/lo pairs at every rounding
point remove them."""

import importlib

import torch


def _mod():
    return importlib.import_module("experiments.native.k2_error_sources")


def test_unrounded_replay_is_the_torch_k2():
    from lethe.kernels.gdn import chunked

    gen = torch.Generator().manual_seed(4)
    B, H, N, C, K, V = 1, 2, 2, 16, 16, 32
    ctx = {"Hs": torch.randn(B, H, N, K, V, generator=gen, dtype=torch.float64),
           "Tm": torch.eye(C, dtype=torch.float64) + torch.tril(torch.randn(B, H, N, C, C, generator=gen,
                                                                             dtype=torch.float64), -1),
           "Xe": torch.randn(B, H, N, C, K, generator=gen, dtype=torch.float64),
           "uc": torch.randn(B, H, N, C, V, generator=gen, dtype=torch.float64)}
    dd = torch.randn(B, H, N, C, V, generator=gen, dtype=torch.float64)
    for a, r in zip(_mod().k2(dd, ctx), chunked.wy_vjp_torch(dd, ctx), strict=True):
        assert torch.allclose(a, r, rtol=1e-12, atol=1e-12)


def test_error_sources_on_a_short_sequence():
    mod = _mod()
    rows = {(r["member"], r["case"]): r for r in mod.main(["--members", "gdn", "--dvs", "64", "--T", "128"])}
    base = rows[("gdn", "all rounded (the kernel)")]
    for name in ("dXe", "du", "dA"):
        assert 1e-4 < base[f"{name}_rel_vs_exact"] < 2e-2  # bf16-sized, not zero, not wrong
    assert 1e-4 < base["worst_grad_rel"] < 2e-2
    pairs = rows[("gdn", "all as hi/lo pairs")]
    assert max(pairs[f"{n}_rel_vs_exact"] for n in ("dXe", "du", "dA")) < 1e-4
    assert pairs["worst_grad_rel"] < 1e-4
    # du = T^T dd reads no intermediate: exact inputs leave it exact
    assert rows[("gdn", "inputs exact, intermediates rounded")]["du_rel_vs_exact"] == 0.0
