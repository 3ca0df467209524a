"""The float64 oracle and its members against fla 0.6.0's own pure-PyTorch references (conventions check).

fla's naive references compute in float32, so agreement is to float32 rounding. Skipped unless fla is
importable (``pip install fla-core==0.6.0 einops==0.8.2``; pyproject's ``gpu`` extra pins fla 0.6.0).
"""

import pytest
import torch
from gdn_helpers import make_inputs, rel_err
from lethe.kernels.gdn import reference as R

fla_gdn2 = pytest.importorskip("fla.ops.gdn2.naive")
fla_kda = pytest.importorskip("fla.ops.kda.naive")
fla_gla = pytest.importorskip("fla.ops.gla.naive")
fla_sgla = pytest.importorskip("fla.ops.simple_gla.naive")
TOL = 1e-5


def test_gdn_matches_fla_naive_recurrent_gdn2():
    q, k, v, g, b, w, _ = make_inputs(T=64, K=16, V=32)
    S0 = torch.randn(1, 2, 16, 32, dtype=torch.float64)
    o, S = R.recurrent_gdn(q, k, v, g, b, w, initial_state=S0, output_final_state=True)
    o_f, S_f = fla_gdn2.naive_recurrent_gdn2(q, k, v, g, b, w, initial_state=S0.float(), output_final_state=True)
    assert rel_err(o_f, o) < TOL and rel_err(S_f, S) < TOL


def test_kda_matches_fla_naive_recurrent_kda():
    q, k, v, g, _, _, beta = make_inputs(T=64, K=16, V=16)
    o = R.kda(q, k, v, g, beta)[0]
    o_f = fla_kda.naive_recurrent_kda(q, k, v, g, beta)[0]
    assert rel_err(o_f, o) < TOL


def test_gla_matches_fla_naive_recurrent_gla():
    q, k, v, g, _, _, _ = make_inputs(T=64, K=16, V=16)
    o = R.gla(q, k, v, g)[0]
    o_f = fla_gla.naive_recurrent_gla(q, k, v, g)[0]
    assert rel_err(o_f, o) < TOL


def test_ssd_and_la_match_fla_naive_recurrent_simple_gla():
    q, k, v, g, _, _, _ = make_inputs(T=64, K=16, V=16, scalar_g=True)
    assert rel_err(fla_sgla.naive_recurrent_simple_gla(q, k, v, g)[0], R.ssd(q, k, v, g)) < TOL
    assert rel_err(fla_sgla.naive_recurrent_simple_gla(q, k, v, torch.zeros_like(g))[0],
                   R.linear_attention(q, k, v)) < TOL
