"""The float64 oracle: dtype guard, each member against the general recurrence, exact reductions."""

import pytest
import torch
from gdn_helpers import make_inputs, rel_err
from lethe.kernels.gdn import chunked
from lethe.kernels.gdn import reference as R


def test_oracle_refuses_non_float64():
    q, k, v, g, b, w, _ = make_inputs(T=8, dtype=torch.float32)
    with pytest.raises(R.OracleDtypeError):
        R.recurrent_gdn(q, k, v, g, b, w)
    with pytest.raises(R.OracleDtypeError):
        R.kda(q, k, v, g, b[..., 0])
    qd = q.double()
    with pytest.raises(R.OracleDtypeError):  # one stray low-precision tensor is enough to refuse
        R.linear_attention(qd, k.double(), v.to(torch.bfloat16))


def test_kda_reduction_machine_precision():
    """b = w = beta turns the general recurrence into the KDA delta rule, to rounding."""
    q, k, v, g, _, _, beta = make_inputs(T=64, K=16, V=16)
    K, V = q.shape[-1], v.shape[-1]
    bb = beta.unsqueeze(-1).expand(*beta.shape, K)
    ww = beta.unsqueeze(-1).expand(*beta.shape, V)
    o_gdn, S_gdn = R.recurrent_gdn(q, k, v, g, bb, ww, output_final_state=True)
    o_kda, S_kda = R.kda(q, k, v, g, beta, output_final_state=True)
    assert rel_err(o_gdn, o_kda) < 1e-14
    assert rel_err(S_gdn, S_kda) < 1e-14


@pytest.mark.parametrize("member", R.MEMBERS)
def test_member_from_own_definition_matches_general(member):
    q, k, v, g, b, w, beta = make_inputs(T=48, K=8, V=8, scalar_g=(member == "ssd"))
    gb = beta if member == "kda" else b
    own = R.member_reference(member, q, k, v, g, gb, w)
    gf, bf, wf = R.gates_for_member(member, q, v, g, gb, w)
    bf = torch.zeros_like(q) if bf is None else bf
    general, _ = R.recurrent_gdn(q, k, v, gf, bf, wf)
    assert rel_err(general, own) < 1e-13


@pytest.mark.parametrize("member", R.MEMBERS)
def test_member_final_state_is_the_members_own(member):
    # the ladder pins chunk_family's final state against member_final_state: it must be each member's own state
    # (kda and gla have a recurrent definition with a state; la and ssd are gla with zero / broadcast decay)
    q, k, v, g, b, w, beta = make_inputs(T=48, K=8, V=8, scalar_g=(member == "ssd"))
    gb = beta if member == "kda" else b
    got = R.member_final_state(member, q, k, v, g, gb, w)
    assert got.shape == (q.shape[0], q.shape[2], q.shape[3], v.shape[3])
    if member == "kda":
        own = R.kda(q, k, v, g, beta, output_final_state=True)[1]
    elif member == "gdn":
        own = R.recurrent_gdn(q, k, v, g, b, w, output_final_state=True)[1]
    else:
        gg = {"la": torch.zeros_like(q), "gla": g, "ssd": g.unsqueeze(-1).expand_as(q) if g.dim() == 3 else g}[member]
        own = R.gla(q, k, v, gg, output_final_state=True)[1]
    assert rel_err(got, own) < 1e-13
    # and an initial state is carried
    S0 = torch.randn_like(own)
    assert not torch.allclose(R.member_final_state(member, q, k, v, g, gb, w, initial_state=S0), got)


def test_erase_zero_makes_triangular_solve_identity():
    """b = 0: the UT matrix A is exactly zero and T = (I + A)^{-1} is exactly the identity."""
    _, k, _, g, b, _, _ = make_inputs(T=128, K=16)
    A, Tm = chunked.wy_intra(k, g, torch.zeros_like(b), chunk=64)
    assert torch.count_nonzero(A) == 0
    assert torch.equal(Tm, torch.eye(64, dtype=Tm.dtype).expand_as(Tm))
    A, Tm = chunked.wy_intra(k, g, b, chunk=64)  # and it does not vanish when the erase is on
    assert torch.count_nonzero(A) > 0 and not torch.equal(Tm, torch.eye(64, dtype=Tm.dtype).expand_as(Tm))


def test_oracle_backward_gradcheck():
    """The oracle's backward is autograd through the loop; gradcheck confirms it against finite differences."""
    q, k, v, g, b, w, _ = make_inputs(T=6, H=1, K=3, V=2)
    S0 = torch.randn(1, 1, 3, 2, dtype=torch.float64)
    args = [x.clone().requires_grad_() for x in (q, k, v, g, b, w, S0)]

    def f(q, k, v, g, b, w, S0):
        o, S = R.recurrent_gdn(q, k, v, g, b, w, initial_state=S0, output_final_state=True)
        return o, S

    assert torch.autograd.gradcheck(f, args)
