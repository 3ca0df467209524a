"""The scalar-gate path (kernels/gdn/scalar_gate.py: KDA with a per-head g) on the CPU interpreter, against the
float64 chunked path (itself pinned to the oracle in test_gdn_chunked.py), and the chooser in chunk_family that
sends such calls to it. float32 inputs only: the interpreter is not trustworthy in bf16 (../shared pitfalls); the
bf16 arithmetic is checked on the GPU (test_scalar_gate_gpu.py, experiments/gdn/scalar_gate_bench.py)."""

import pytest
import torch
from gdn_helpers import make_inputs, rel_err
from lethe.kernels.gdn import scalar_gate
from lethe.kernels.gdn.autograd import chunk_family, scalar_gate_applies

NAMES = ("o", "S", "dq", "dk", "dv", "dg", "dbeta", "dh0")


def _problem(T=40, K=16, V=32, seed=3, init=True):
    q, k, v, g, _, _, beta = make_inputs(B=1, T=T, H=2, K=K, V=V, seed=seed, scalar_g=True, decay=1.0)
    gen = torch.Generator().manual_seed(seed + 1)
    h0 = torch.randn(1, 2, K, V, generator=gen, dtype=torch.float64) if init else None
    do = torch.randn(1, T, 2, V, generator=gen, dtype=torch.float64)
    dS = torch.randn(1, 2, K, V, generator=gen, dtype=torch.float64)
    return (q, k, v, g, beta, h0), do, dS


def _reference(x, do, dS, C):
    x64 = [t if t is None else t.double().requires_grad_() for t in x]
    o, S = chunk_family(*x64[:4], x64[4], None, member="kda", initial_state=x64[5], output_final_state=True,
                        chunk=C, backend="torch")
    leaves = [t for t in x64 if t is not None]
    grads = torch.autograd.grad((o * do).sum() + (S * dS).sum(), leaves)
    return dict(zip(NAMES, (o, S, *grads), strict=False))


def _scalar_path(x, do, dS, C, prec=None):
    x32 = [t if t is None else t.float() for t in x]
    o, S, ctx = scalar_gate.sg_chunk_fwd(*x32[:5], None, C, x32[5], prec=prec)
    grads = scalar_gate.sg_chunk_bwd(do.float(), ctx, dS.float())
    return dict(zip(NAMES, (o, S, *[g for g in grads if g is not None]), strict=False))


@pytest.mark.parametrize("T,C,init", [(40, 16, True), (64, 16, False), (33, 32, True)])
@pytest.mark.slow
def test_scalar_path_matches_float64_in_float32(T, C, init):
    x, do, dS = _problem(T=T, init=init)
    ref = _reference(x, do, dS, C)
    got = _scalar_path(x, do, dS, C)
    for n in ref:
        assert rel_err(got[n], ref[n]) < 2e-6, (n, rel_err(got[n], ref[n]))


@pytest.mark.slow
def test_tf32_rounding_is_applied_and_stays_tf32_grade():
    """Forced to the 16-bit inputs' precision ("tf32rn") on float32 inputs, every product reads TF32 operands: the
    result moves away from the float32-grade one by TF32 rounding (not zero, not more)."""
    x, do, dS = _problem(T=64)
    ref = _reference(x, do, dS, 16)
    exact = _scalar_path(x, do, dS, 16)
    rn = _scalar_path(x, do, dS, 16, prec="tf32rn")
    for n in ref:
        err = rel_err(rn[n], ref[n])
        assert err < 3e-3, (n, err)
        assert err > 10 * rel_err(exact[n], ref[n]), n


def test_padding_rows_and_chunk_boundaries_do_not_leak():
    """Two sequences, the second shorter problem embedded in the first: outputs up to T agree with the short run
    (causality, padded tail chunk)."""
    x, do, dS = _problem(T=40, init=False)
    short = [t if t is None else t[:, :25] for t in x]
    full = _scalar_path(x, do, torch.zeros_like(dS), 16)
    o_short, _, _ = scalar_gate.sg_chunk_fwd(*[t.float() for t in short[:5]], None, 16, None)
    assert rel_err(o_short, full["o"][:, :25]) < 1e-6


def _counting(monkeypatch):
    calls = []
    real = scalar_gate.sg_chunk_fwd

    def counted(*a, **kw):
        calls.append(1)
        return real(*a, **kw)

    monkeypatch.setattr(scalar_gate, "sg_chunk_fwd", counted)
    return calls


def test_chunk_family_takes_the_scalar_path_and_its_gradients(monkeypatch):
    calls = _counting(monkeypatch)
    x, do, dS = _problem(T=40)
    ref = _reference(x, do, dS, 16)
    x32 = [t.float().requires_grad_() for t in x]
    o, S = chunk_family(*x32[:4], x32[4], None, member="kda", initial_state=x32[5], output_final_state=True,
                        chunk=16, backend="triton")
    grads = torch.autograd.grad((o * do.float()).sum() + (S * dS.float()).sum(), x32)
    assert calls == [1]
    for n, got in zip(NAMES, (o, S, *grads), strict=True):
        assert rel_err(got, ref[n]) < 2e-6, n
    assert grads[3].dtype == torch.float32 and grads[3].shape == x[3].shape  # dg for the [B, T, H] gate


def test_general_form_is_the_control(monkeypatch):
    calls = _counting(monkeypatch)
    x, do, _ = _problem(T=32, init=False)
    x32 = [t.float() for t in x[:5]]
    o_general, _ = chunk_family(*x32[:4], x32[4], None, member="kda", chunk=16, backend="triton", gate_form="general")
    assert calls == []
    o_scalar, _ = chunk_family(*x32[:4], x32[4], None, member="kda", chunk=16, backend="triton")
    assert calls == [1]
    assert rel_err(o_scalar, o_general) < 2e-6


def test_chooser_rules():
    x, _, _ = _problem(T=16, init=False)
    q, k, v, g, beta, _ = x
    assert scalar_gate_applies("kda", g, beta, "triton", q, v, 64)
    assert scalar_gate_applies("kda", g, beta, "hybrid-tc", q, v, 64)
    assert not scalar_gate_applies("kda", g, beta, "torch", q, v, 64)
    assert not scalar_gate_applies("kda", g, beta, "triton", q, v, 64, gate_form="general")
    assert not scalar_gate_applies("kda", g.unsqueeze(-1).expand(*g.shape, 16), beta, "triton", q, v, 64)
    assert not scalar_gate_applies("gdn", g, beta, "triton", q, v, 64)
    assert not scalar_gate_applies("kda", g, beta, "triton", q, v, 48)
    with pytest.raises(ValueError, match="gate_form"):
        scalar_gate_applies("kda", g, beta, "triton", q, v, 64, gate_form="scalar")


def test_refuses_gates_of_the_wrong_shape():
    x, _, _ = _problem(T=16, init=False)
    q, k, v, g, beta, _ = (t.float() if t is not None else None for t in x)
    with pytest.raises(ValueError, match=r"\[B, T, H\]"):
        scalar_gate.sg_chunk_fwd(q, k, v, g.unsqueeze(-1).expand(*g.shape, 16), beta, chunk=16)


def test_scan_v_block_rule():
    """The scans' V-block halves (not below 16) until B*H x V-blocks reaches SCAN_MIN_PROGRAMS."""
    assert scalar_gate._scan_bv("sg_state_bwd_kernel", 256, 128) == 64
    assert scalar_gate._scan_bv("sg_state_bwd_kernel", 32, 128) == 32
    assert scalar_gate._scan_bv("sg_state_bwd_kernel", 32, 64) == 16
    assert scalar_gate._scan_bv("sg_state_fwd_kernel", 1, 128) == 16
    assert scalar_gate._scan_bv("sg_state_fwd_kernel", 2, 32) == 16


@pytest.mark.slow
def test_scalar_gate_launches_at_dk128():
    """What the scalar-gate wrappers launch at d_k = 128 (recorded, nothing compiled): the kernels in order, each
    with its SG_LAUNCH entry (the inverse with the general forward's), and the scans' V-block rule at a small batch
    (B*H = 2: the V-block drops to 16)."""
    from gdn_helpers import recorded_launches
    from lethe.kernels.gdn.scalar_gate import SG_LAUNCH
    from lethe.kernels.gdn.triton_fwd import FWD_LAUNCH

    launches = recorded_launches(erases=("scalar",), T=1024, B=1)
    order = ["sg_a_kernel", "wy_inverse_kernel", "sg_wu_kernel", "sg_state_fwd_kernel", "sg_output_kernel",
             "sg_dd_local_kernel", "sg_state_bwd_kernel", "sg_intra_out_bwd_kernel", "sg_intra_wy_bwd_kernel"]
    for V in (64, 128):
        got = [r for r in launches if r["V"] == V]
        assert [r["kernel"] for r in got] == order
        for r in got:
            entry = SG_LAUNCH.get(r["kernel"]) or FWD_LAUNCH[r["kernel"]]
            assert (r["num_warps"], r["num_stages"]) == (entry["num_warps"], entry["num_stages"]), r
            if r["kernel"] in ("sg_state_fwd_kernel", "sg_state_bwd_kernel"):
                assert r["BV"] == 16
            elif "BV" in entry:
                assert r["BV"] == min(V, entry["BV"]), r
