"""C5 fused_block_forward: the oracle's stages against torch's own conv1d and rms_norm, the torch and Triton
paths against the oracle within derived bounds, and the channel guard the paper's battery asked for."""

import pytest
import torch
import torch.nn.functional as F
from lethe.kernels.mamba import MambaShapeError, fused_block_forward
from lethe.kernels.mamba.fused_block_forward.reference import (
    causal_conv_ref,
    fused_block_magnitude,
    fused_block_ref,
)
from lethe.kernels.mamba.forward_chunked_scan.reference import selective_scan_ref
from mamba_helpers import (
    UNIT_ROUNDOFF,
    assert_within,
    block_forward_steps,
    chunk_carry_steps,
    f64,
    gamma,
    make_block_inputs,
)

SHAPES = [  # (batch, L, d_model, N, K, chunk, block_d)
    (2, 9, 5, 3, 4, 4, 2),
    (1, 1, 3, 4, 4, 4, None),
    (1, 6, 4, 2, 3, 16, 4),
]


def test_oracle_conv_is_torch_causal_depthwise_conv1d():
    """The oracle's p equals F.conv1d with groups=d_model on the channels-first view of x (whose K - 1 leading rows
    are the causal padding): the convolution convention is the usual one, not our own."""
    x, w, bias, *_ = make_block_inputs()
    want = F.conv1d(x.transpose(1, 2), w[:, None, :], bias, groups=x.shape[-1]).transpose(1, 2)
    assert torch.allclose(causal_conv_ref(x, w, bias), want, rtol=0, atol=1e-14)


def test_oracle_norm_is_torch_rms_norm():
    """out = rms_norm(y) * g with torch's own RMSNorm over channels (F.rms_norm, same eps)."""
    ins = make_block_inputs()
    out, parts = fused_block_ref(*ins, eps=1e-6, return_parts=True)
    want = F.rms_norm(parts["y"], (ins[0].shape[-1],), ins[-1], eps=1e-6)
    assert torch.allclose(out, want, rtol=0, atol=1e-14)


def _bound(ins, L, n, d, k, dtype, ref, cp_chunk=None):
    """gamma_m(u_arith) OUT + u_out |ref|; ``cp_chunk``: the chunk-parallel order at that chunk, whose m adds
    chunk_carry_steps (its derivation in lethe.kernels.mamba.error_bounds)."""
    M = fused_block_magnitude(*f64(*ins))
    u_arith = UNIT_ROUNDOFF[torch.float64 if dtype == torch.float64 else torch.float32]
    u_out = 0.0 if dtype in (torch.float32, torch.float64) else UNIT_ROUNDOFF[dtype]
    m = block_forward_steps(L, n, d, k) + (0 if cp_chunk is None else chunk_carry_steps(L, cp_chunk))
    return gamma(m, u_arith) * M["OUT"] + u_out * ref.abs()


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_float64_paths_match_oracle(shape, backend):
    """Both paths run in float64 on float64 inputs (the Triton kernels take their arithmetic dtype from the
    inputs): their algebra -- indexing, masking, the conv window, the norm -- against the oracle to float64
    accuracy, gamma_m(u64) times the magnitude chain."""
    b, L, d, n, k, chunk, block_d = shape
    ins = make_block_inputs(b, L, d, n, k)
    kw = dict(block_d=block_d) if backend == "triton" else {}
    got = fused_block_forward(*ins, chunk=chunk, backend=backend, **kw)
    ref = fused_block_forward(*ins, backend="reference")
    assert got.dtype == torch.float64
    assert_within("out", got, ref, _bound(ins, L, n, d, k, torch.float64, ref))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("coherent", [True, False], ids=["coherent", "signed"])
@pytest.mark.slow
def test_triton_matches_oracle(shape, dtype, coherent):
    """Triton with float32 arithmetic on ``dtype`` inputs against the oracle on the same rounded inputs:
    |out - ref| <= gamma_m(u_fp32) OUT + u_out |ref| (m from block_forward_steps, OUT the magnitude chain,
    u_out the output's rounding). In the coherent draw the bound is also checked to be small against the output,
    so the comparison can see a relative error well below one percent."""
    b, L, d, n, k, chunk, block_d = shape
    ins = make_block_inputs(b, L, d, n, k, dtype=dtype, coherent=coherent)
    got = fused_block_forward(*ins, chunk=chunk, backend="triton", block_d=block_d)
    assert got.dtype == dtype and got.shape == (b, L, d)
    ref = fused_block_forward(*ins, backend="reference")
    bound = _bound(ins, L, n, d, k, dtype, ref)
    assert_within("out", got, ref, bound)
    if coherent and dtype == torch.float32:
        assert float((bound / ref.abs()).median()) < 1e-3


@pytest.mark.parametrize("drop", ["conv_bias", "D", "norm_weight"])
def test_optional_inputs(drop):
    """Each optional input may be absent; the Triton path then agrees with the oracle without it."""
    ins = make_block_inputs(2, 7, 4, 3, 4, dtype=torch.float32, coherent=True, with_bias=drop != "conv_bias",
                            with_d=drop != "D", with_norm=drop != "norm_weight")
    got = fused_block_forward(*ins, chunk=4, backend="triton", block_d=2)
    ref = fused_block_forward(*ins, backend="reference")
    assert_within("out", got, ref, _bound(ins, 7, 3, 4, 4, torch.float32, ref))


def test_conv1d_weight_layout_is_accepted():
    """nn.Conv1d's depthwise weight [d, 1, K] gives the same result as [d, K]."""
    ins = list(make_block_inputs(1, 5, 3, 2, 4, dtype=torch.float32))
    a = fused_block_forward(*ins, chunk=4, backend="triton")
    ins[1] = ins[1][:, None, :]
    assert torch.equal(a, fused_block_forward(*ins, chunk=4, backend="triton"))


def test_input_channel_count_is_checked_against_the_conv_weight():
    """The paper's caught bug: an x whose channel count differs from the conv weight's must be refused (before any
    kernel reads it with the weight's stride), naming both counts -- on every backend."""
    x, w, bias, delta, A, B, C, D, nw = make_block_inputs(1, 6, 4, 3, 4, dtype=torch.float32)
    wider = torch.cat([x, x[..., :1]], -1)
    for backend in ("triton", "torch", "reference"):
        with pytest.raises(MambaShapeError, match="x has 5 channels but conv_weight has 4"):
            fused_block_forward(wider, w, bias, delta, A, B, C, D, nw, backend=backend)
        with pytest.raises(MambaShapeError, match="x has 3 channels but conv_weight has 4"):
            fused_block_forward(x[..., :3], w, bias, delta, A, B, C, D, nw, backend=backend)


def test_other_shape_guards():
    """Parameters whose channel count disagrees with the weight's, and an x shorter than the kernel, are refused."""
    x, w, bias, delta, A, B, C, D, nw = make_block_inputs(1, 6, 4, 3, 4, dtype=torch.float32)
    with pytest.raises(MambaShapeError, match="norm_weight has shape"):
        fused_block_forward(x, w, bias, delta, A, B, C, D, nw[:3], backend="triton")
    with pytest.raises(MambaShapeError, match="conv_bias has shape"):
        fused_block_forward(x, w, bias[:3], delta, A, B, C, D, nw, backend="triton")
    with pytest.raises(MambaShapeError, match="fewer than the kernel width"):
        fused_block_forward(x[:, :3], w, bias, delta[:, :1], A, B[:, :1], C[:, :1], D, nw, backend="triton")
    with pytest.raises(MambaShapeError, match="delta has shape"):
        fused_block_forward(x, w, bias, delta[:, :5], A, B, C, D, nw, backend="triton")


def test_norm_of_a_huge_y_does_not_overflow():
    """|y| near 1e20 (x scaled by 1e19): y^2 overflows float32 while r ~ 1e-20 and the output, of order one, do
    not. The kernel scales y by its row maximum before squaring, so the output stays finite and within the bound."""
    ins = list(make_block_inputs(1, 6, 4, 3, 4, dtype=torch.float32, coherent=True))
    ins[0] = ins[0] * 1e19
    got = fused_block_forward(*ins, chunk=4, backend="triton")
    ref = fused_block_forward(*ins, backend="reference")
    assert float(ref.abs().max()) < 10 and torch.isfinite(got).all()
    assert_within("out", got, ref, _bound(ins, 6, 3, 4, 4, torch.float32, ref))


# (batch, L, d_model, N, K, chunk, block_d): L not a multiple of the chunk over two channel blocks with a partial
# one; chunk 1 (every step its own chunk: the carry does the whole scan); chunk >= L (one chunk: no carry)
CP_SHAPES = [(2, 9, 5, 3, 4, 4, 2), (1, 6, 4, 2, 3, 1, 4), (1, 5, 3, 4, 4, 16, None)]


@pytest.mark.parametrize("shape", CP_SHAPES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("with_norm", [True, False], ids=["norm", "no_norm"])
def test_chunk_parallel_matches_oracle(shape, dtype, with_norm):
    """scan_mode="chunk_parallel" (local scans with the conv made in them, the carry, the fix-up, the norm launch)
    against the oracle within its derived bound: the output, and the saved state the backward reads -- the
    checkpoints against the oracle's states before each chunk (gamma_m times the magnitude states H), the pre-norm
    y and r against the oracle's. Float64 checks the algebra to float64 accuracy, float32 the kernels' arithmetic."""
    b, L, d, n, k, chunk, block_d = shape
    ins = make_block_inputs(b, L, d, n, k, dtype=dtype, with_norm=with_norm)
    out, saved = fused_block_forward(*ins, chunk=chunk, backend="triton", block_d=block_d,
                                     scan_mode="chunk_parallel", return_saved=True)
    ref, parts = fused_block_ref(*f64(*ins), return_parts=True)
    assert out.dtype == dtype and out.shape == (b, L, d)
    assert_within("out", out, ref, _bound(ins, L, n, d, k, dtype, ref, cp_chunk=chunk))
    M = fused_block_magnitude(*f64(*ins))
    u_arith = UNIT_ROUNDOFF[torch.float64 if dtype == torch.float64 else torch.float32]
    g = gamma(block_forward_steps(L, n, d, k) + chunk_carry_steps(L, chunk), u_arith)
    x, w, bias, delta, A, B, C, D, nw = f64(*ins)
    _, hs = selective_scan_ref(parts["v"], delta, A, B, C, D, return_states=True)
    before = lambda h: torch.cat([torch.zeros_like(h[:, :1]), h[:, :-1]], 1)[:, ::chunk]  # noqa: E731
    assert saved["ckpt"].shape == (b, -(-L // chunk), d, n)
    assert_within("checkpoints", saved["ckpt"], before(hs), g * before(M["H"]))
    if with_norm:
        assert_within("y", saved["y"], parts["y"], g * M["Y"])
        assert_within("rstd", saved["rstd"], parts["rstd"][..., 0], g * M["R"][..., 0])
    else:
        assert saved["y"] is None and saved["rstd"] is None


@pytest.mark.parametrize("shape", CP_SHAPES)
def test_chunk_parallel_matches_serial(shape):
    """Both launch shapes on the same float32 inputs (coherent draw) agree within the sum of their bounds, and that
    sum is small against the output (median below 1e-3), so a difference in the chunked algebra would show."""
    b, L, d, n, k, chunk, block_d = shape
    ins = make_block_inputs(b, L, d, n, k, dtype=torch.float32, coherent=True)
    got = {mode: fused_block_forward(*ins, chunk=chunk, backend="triton", block_d=block_d, scan_mode=mode)
           for mode in ("serial", "chunk_parallel")}
    ref = fused_block_forward(*ins, backend="reference")
    bound = (_bound(ins, L, n, d, k, torch.float32, ref) + _bound(ins, L, n, d, k, torch.float32, ref, chunk))
    assert_within("chunk_parallel vs serial", got["chunk_parallel"], got["serial"], bound)
    assert float((bound / ref.abs()).median()) < 1e-3


def test_chunk_parallel_torch_path_and_unknown_mode():
    """The torch path takes the same mode (C1's chunk-parallel torch form inside), within the same bound; a mode
    other than the two -- "auto" included, which has no rule for the block -- is refused."""
    b, L, d, n, k, chunk = 2, 9, 5, 3, 4, 4
    ins = make_block_inputs(b, L, d, n, k, dtype=torch.float32)
    ref = fused_block_forward(*ins, backend="reference")
    got = fused_block_forward(*ins, chunk=chunk, backend="torch", scan_mode="chunk_parallel")
    assert_within("out", got, ref, _bound(ins, L, n, d, k, torch.float32, ref, cp_chunk=chunk))
    for mode in ("auto", "parallel"):
        with pytest.raises(ValueError, match="scan_mode must be one of"):
            fused_block_forward(*ins, backend="triton", scan_mode=mode)
