"""lethe.kernels.gdn's package entry: the README's call works as written."""

import pytest
import torch


def test_readme_call_runs_forward_and_backward_on_the_cpu():
    import lethe.kernels.gdn as gdn
    from lethe.kernels.gdn import autograd, chunk_family

    assert chunk_family is autograd.chunk_family and gdn.BACKENDS == autograd.BACKENDS
    gen = torch.Generator().manual_seed(0)
    B, T, H, K, V = 1, 32, 2, 16, 16
    q, k = (torch.randn(B, T, H, K, generator=gen) for _ in range(2))
    v = torch.randn(B, T, H, V, generator=gen)
    g = -0.1 * torch.rand(B, T, H, K, generator=gen)
    b, w = torch.rand(B, T, H, K, generator=gen), torch.rand(B, T, H, V, generator=gen)
    leaves = [x.requires_grad_() for x in (q, k, v, g, b, w)]
    o, _ = chunk_family(*leaves, member="gdn", backend="torch", chunk=16)
    assert o.shape == (B, T, H, V)
    grads = torch.autograd.grad(o.square().sum(), leaves)
    assert all(gr is not None and bool(torch.isfinite(gr).all()) for gr in grads)
    with pytest.raises(AttributeError):
        gdn.no_such_name  # noqa: B018
