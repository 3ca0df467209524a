"""The native K1 on a GPU against the torch K1 and the float64 chunked path (skips without CUDA / CuTe DSL).

Properties: same three outputs as ``chunked.reverse_state_scan`` (shapes and values to float32 rounding), every
output element written (NaN-poisoned buffers), and bitwise identical results across repeated runs.
"""

import pytest
import torch

from kernels.gdn import chunked
from kernels.gdn.native import cute_dsl_available

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available() or not cute_dsl_available(),
                                 reason="needs CUDA and the CuTe DSL")]


@pytest.mark.parametrize("erase", [True, False])
def test_native_k1_matches_torch_and_f64(erase):
    from kernels.gdn.native.api import native_reverse_state_scan

    B, T, H, K, V, C = 2, 200, 2, 128, 64, 64
    g = torch.Generator(device="cuda").manual_seed(3)
    r = lambda *s: torch.randn(*s, device="cuda", generator=g)  # noqa: E731
    q, k, v = r(B, T, H, K), torch.nn.functional.normalize(r(B, T, H, K), dim=-1), r(B, T, H, V)
    gate = -torch.nn.functional.softplus(r(B, T, H, K) - 4)
    b = torch.rand(B, T, H, K, device="cuda", generator=g) if erase else None
    w = torch.rand(B, T, H, V, device="cuda", generator=g)
    do, dS = r(B, T, H, V), r(B, H, K, V)
    _, _, ctx = chunked.chunk_fwd(q, k, v, gate, b, w, None, C, None)
    do_c = chunked._to_chunks(do, C, torch.float32)
    ref = chunked.reverse_state_scan(do_c, ctx, dS)
    outs = [native_reverse_state_scan(do_c, ctx, dS) for _ in range(3)]
    for a, rr in zip(outs[0], ref, strict=True):
        assert a.shape == rr.shape
        assert torch.isfinite(a).all()
        assert float((a - rr).norm() / rr.norm()) < 1e-5
    for o in outs[1:]:
        assert all(torch.equal(x, y) for x, y in zip(outs[0], o, strict=True))
