"""Triton forward/backward kernels against the float64 chunked reference.

On CPU these run under TRITON_INTERPRET=1 (set by conftest.py) in float32 only: bf16 under the interpreter is
not trustworthy (pitfalls.md), so low-precision arms are left to the GPU ladder.
"""

import pytest
import torch
import triton
import triton.language as tl
from gdn_helpers import make_inputs, rel_err
from lethe.kernels.gdn import chunked
from lethe.kernels.gdn import reference as R
from lethe.kernels.gdn.autograd import chunk_family
from lethe.kernels.gdn.triton_bwd import triton_chunk_bwd
from lethe.kernels.gdn.triton_fwd import _tf32_nearest, triton_chunk_fwd

DEV = "cuda" if torch.cuda.is_available() else "cpu"
TOL = 2e-5  # float32 through a 16-64 step triangular solve and a short state scan


@pytest.mark.parametrize("erase", [True, False])
@pytest.mark.parametrize("K,V,chunk,T", [(16, 32, 16, 40), (32, 16, 32, 64)])
def test_triton_fwd_bwd_vs_chunked_f64(erase, K, V, chunk, T):
    q, k, v, g, b, w, _ = make_inputs(T=T, K=K, V=V)
    bb = b if erase else None
    gen = torch.Generator().manual_seed(3)
    S0 = torch.randn(1, 2, K, V, generator=gen, dtype=torch.float64)
    do = torch.randn(1, T, 2, V, generator=gen, dtype=torch.float64)
    dS = torch.randn(1, 2, K, V, generator=gen, dtype=torch.float64)
    o_ref, S_ref, ctx = chunked.chunk_fwd(q, k, v, g, bb, w, chunk=chunk, initial_state=S0)
    ref_grads = chunked.chunk_bwd(do, ctx, dS)
    f = lambda x: None if x is None else x.float().to(DEV)
    o, S, tctx = triton_chunk_fwd(*(f(x) for x in (q, k, v, g, bb, w)), chunk=chunk, initial_state=f(S0), bv=16)
    assert rel_err(o.cpu(), o_ref) < TOL
    assert rel_err(S.cpu(), S_ref) < TOL
    grads = triton_chunk_bwd(f(do), tctx, f(dS))
    for name, got, ref in zip(("dq", "dk", "dv", "dg", "db", "dw", "dS0"), grads, ref_grads, strict=True):
        if ref is None:
            assert got is None, name
        else:
            assert rel_err(got.cpu(), ref) < TOL, name


def test_wy_tile_spec_pin():
    """The kernel's in-register triangular inverse against float64 of the same float32 tile."""
    q, k, v, g, b, w, _ = make_inputs(T=64, K=16, V=16, dtype=torch.float32)
    _, _, tctx = triton_chunk_fwd(*(x.to(DEV) for x in (q, k, v, g, b, w)), chunk=32)
    _, T64 = chunked.wy_intra(k.double(), g.double(), b.double(), chunk=32)
    assert rel_err(tctx["Tm"].cpu(), T64) < 1e-5
    # the strictly-upper triangle is structurally zero and the diagonal structurally one: exact
    Tm = tctx["Tm"].cpu()
    assert torch.equal(Tm.triu(1), torch.zeros_like(Tm))
    assert torch.equal(Tm.diagonal(dim1=-2, dim2=-1), torch.ones(Tm.shape[:-1]))


@pytest.mark.parametrize("member", R.MEMBERS)
@pytest.mark.slow
def test_chunk_family_triton_members(member):
    """Every member through the autograd.Function on the Triton backend, against its own float64 definition."""
    q, k, v, g, b, w, beta = make_inputs(T=32, K=16, V=16, scalar_g=(member == "ssd"))
    gb = beta if member == "kda" else b
    names = ["q", "k", "v"] + (["g"] if member != "la" else []) + (["b"] if member in ("kda", "gdn") else []) + (
        ["w"] if member == "gdn" else [])
    src = dict(q=q, k=k, v=v, g=g, b=gb, w=w)
    ref_leaves = {n: src[n].clone().requires_grad_() for n in names}
    ref = R.member_reference(member, *(ref_leaves.get(n) for n in ("q", "k", "v", "g", "b", "w")))
    do = torch.randn_like(ref)
    ref_grads = torch.autograd.grad((ref * do).sum(), list(ref_leaves.values()))
    leaves = {n: src[n].float().to(DEV).requires_grad_() for n in names}
    o, _ = chunk_family(member=member, backend="triton", chunk=16, **leaves)
    assert rel_err(o.cpu(), ref) < TOL
    got = torch.autograd.grad((o * do.float().to(DEV)).sum(), list(leaves.values()))
    for n, a, r in zip(names, got, ref_grads, strict=True):
        assert rel_err(a.cpu(), r) < TOL, f"{member}: d{n}"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_layout_changes_are_exact_casts_and_transposes(dtype):
    # to_internal / from_internal are one strided copy each: the same values as cast, zero-pad, transpose
    from lethe.kernels.gdn.triton_fwd import from_internal, to_internal

    x = torch.randn(2, 37, 3, 16, generator=torch.Generator().manual_seed(1)).to(dtype)
    got = to_internal(x, 16)
    want = torch.nn.functional.pad(x.float(), (0, 0, 0, 0, 0, 11)).transpose(1, 2).contiguous()
    assert got.dtype == torch.float32 and got.is_contiguous() and torch.equal(got, want)
    y = torch.randn(2, 3, 48, 16, generator=torch.Generator().manual_seed(2))
    back = from_internal(y, 37, dtype)
    assert back.is_contiguous() and torch.equal(back, y[:, :, :37].transpose(1, 2).contiguous().to(dtype))


@pytest.mark.parametrize("C,T", [(64, 150), (16, 40)])
@pytest.mark.slow
def test_blocked_triangular_inverse_gives_the_row_by_row_forward(C, T):
    # the opt-in blockwise inverse of wy_fwd_blocked_kernel: same T, W, output and final state as the row-by-row
    # kernel to float32 rounding, T unit lower triangular with zeros above the diagonal
    from gdn_helpers import make_inputs, rel_err
    from lethe.kernels.gdn.triton_fwd import triton_chunk_fwd

    f = [x.float() for x in make_inputs(T=T, K=16, V=32)[:6]]
    o1, S1, c1 = triton_chunk_fwd(*f, chunk=C, bv=16)
    o2, S2, c2 = triton_chunk_fwd(*f, chunk=C, bv=16, wy_inverse="blocked")
    for a, b in ((c2["Tm"], c1["Tm"]), (c2["Wi"], c1["Wi"]), (o2, o1), (S2, S1)):
        assert rel_err(a, b) < 1e-6
    Tm = c2["Tm"]
    eye = torch.eye(C).expand_as(Tm)
    assert torch.equal(torch.triu(Tm, 1), torch.zeros_like(Tm)) and torch.equal(torch.diagonal(Tm, 0, -2, -1),
                                                                                torch.diagonal(eye, 0, -2, -1))
    with pytest.raises(ValueError, match="wy_inverse"):
        triton_chunk_fwd(*f, chunk=C, wy_inverse="diagonal")


def test_chunk_family_passes_the_forward_options_through_autograd():
    # chunk_family(wy_inverse="blocked") takes the blocked kernel's T (saved for the backward) and still gives
    # the float64 gradients; an unknown option is refused by the forward, not ignored
    q, k, v, g, b, w, _ = make_inputs(T=40, K=16, V=32)
    leaves64 = [x.clone().requires_grad_() for x in (q, k, v, g, b, w)]
    o64, _ = chunk_family(*leaves64, member="gdn", chunk=16, backend="torch")
    do = torch.randn(o64.shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    ref = torch.autograd.grad((o64 * do).sum(), leaves64)
    leaves = [x.float().clone().requires_grad_() for x in (q, k, v, g, b, w)]
    o, _ = chunk_family(*leaves, member="gdn", chunk=16, backend="triton", wy_inverse="blocked")
    got = torch.autograd.grad((o * do.float()).sum(), leaves)
    assert rel_err(o, o64) < TOL
    for a, r in zip(got, ref, strict=True):
        assert rel_err(a, r) < TOL
    with pytest.raises(ValueError, match="wy_inverse"):
        chunk_family(*leaves, member="gdn", chunk=16, backend="triton", wy_inverse="diagonal")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("erase", [True, False])
def test_prepare_inputs_is_the_layout_change_products_and_cumsum(dtype, erase):
    # the forward's one-pass input kernel against to_internal of each input and the torch products / cumsum:
    # casts, transposes, padding and products exact; the chunk-local cumsum within float32 rounding
    from lethe.kernels.gdn.triton_fwd import prepare_inputs, to_internal

    C, T = 16, 37
    q, k, v, g, b, w, _ = make_inputs(T=T, K=16, V=32)
    q = q.transpose(1, 2).contiguous().transpose(1, 2)  # non-contiguous [B, T, H, K] view
    q, k, v, g, b, w = (x.to(dtype) for x in (q, k, v, g, b, w))
    got = prepare_inputs(q, k, g, v, w, b if erase else None, C)
    want = {"qi": to_internal(q, C), "ki": to_internal(k, C), "vi": to_internal(v, C), "wi": to_internal(w, C)}
    want["ui"] = want["wi"] * want["vi"]
    if erase:
        want["bi"] = to_internal(b, C)
        want["ei"] = want["bi"] * want["ki"]
    for name, x in want.items():
        assert torch.equal(got[name], x), name
    gi = to_internal(g, C)
    B, H, TP, K = gi.shape
    gam = gi.reshape(B, H, TP // C, C, K).cumsum(-2).reshape(B, H, TP, K)
    assert rel_err(got["gam"], gam) < 1e-6
    assert (got["bi"] is None) == (not erase) and (got["ei"] is None) == (not erase)


def test_decay_floor_is_refused_unless_the_check_is_off_for_recording():
    from lethe.kernels.gdn.triton_fwd import decay_floor_check_off

    q, k, v, g, b, w, _ = make_inputs(T=32, K=16, V=16)
    f = [x.float() for x in (q, k, v, g, b, w)]
    f[3] = torch.full_like(f[3], -3.0)  # 16 steps of -3: the chunk-local sum reaches -48, then -96 at chunk 32
    triton_chunk_fwd(*f, chunk=16)
    with pytest.raises(ValueError, match="cumulative log-decay"):
        triton_chunk_fwd(*f, chunk=32)
    with decay_floor_check_off():
        triton_chunk_fwd(*f, chunk=32)  # inf/nan inside, but no refusal: the check is off
    with pytest.raises(ValueError, match="cumulative log-decay"):
        triton_chunk_fwd(*f, chunk=32)


@pytest.mark.parametrize("C,T", [(64, 150), (16, 40)])
@pytest.mark.slow
def test_split_wy_kernels_give_the_row_kernel_bit_for_bit(C, T):
    # the default wy_inverse="split" runs the row kernel's two halves as two kernels: the same arithmetic in the same order
    f = [x.float() for x in make_inputs(T=T, K=16, V=32)[:6]]
    o1, S1, c1 = triton_chunk_fwd(*f, chunk=C, bv=16, wy_inverse="rows")
    o2, S2, c2 = triton_chunk_fwd(*f, chunk=C, bv=16)  # the default
    for a, b in ((c2["Tm"], c1["Tm"]), (c2["Wi"], c1["Wi"]), (o2, o1), (S2, S1)):
        assert torch.equal(a, b)


@pytest.mark.slow
def test_output_kernel_serving_several_v_blocks_per_program_is_bitwise_the_same(monkeypatch):
    # NVL > 1: one program forms P = tril(Qg Kg^T) once for several V-blocks; each output element goes through the
    # same operations as with one V-block per program, so the output must not change by a bit
    from gdn_helpers import make_inputs
    from lethe.kernels.gdn import triton_fwd

    f = [x.float() for x in make_inputs(T=150, K=16, V=64)[:6]]
    o1, S1, _ = triton_fwd.triton_chunk_fwd(*f, chunk=32, bv=16)
    for nvl in (2, 4, 8):  # 8 > V/BV = 4: clipped to 4
        monkeypatch.setitem(triton_fwd.FWD_LAUNCH, "output_fwd_kernel",
                            {**triton_fwd.FWD_LAUNCH["output_fwd_kernel"], "NVL": nvl})
        o2, S2, _ = triton_fwd.triton_chunk_fwd(*f, chunk=32, bv=16)
        assert torch.equal(o2, o1) and torch.equal(S2, S1)


@pytest.mark.parametrize("erase", [True, False])
@pytest.mark.slow
def test_state_kernel_with_precomputed_kend_is_bitwise_the_same(monkeypatch, erase):
    # KEND=1: the prep kernel writes Kend = k * exp(gamma_C - gamma) and the state kernel loads it instead of
    # rebuilding it per step; the same float32 operations on the same values, so every result must be equal on the
    # interpreter (on the H200 the two kernels' exponentials round apart: test_gdn_triton_gpu.py)
    from gdn_helpers import make_inputs
    from lethe.kernels.gdn import triton_fwd

    C, T = 16, 37  # a padded last chunk
    q, k, v, g, b, w, _ = (x.float() for x in make_inputs(T=T, K=16, V=32))
    bb = b if erase else None
    # KEND is on by default since fc35227: the baseline turns it off
    with monkeypatch.context() as m:
        m.setitem(triton_fwd.FWD_LAUNCH, "state_fwd_kernel", {**triton_fwd.FWD_LAUNCH["state_fwd_kernel"], "KEND": 0})
        o1, S1, c1 = triton_fwd.triton_chunk_fwd(q, k, v, g, bb, w, chunk=C, bv=16)
    monkeypatch.setitem(triton_fwd.FWD_LAUNCH, "state_fwd_kernel",
                        {**triton_fwd.FWD_LAUNCH["state_fwd_kernel"], "KEND": 1})
    real, seen = triton_fwd.prepare_inputs, []

    def spy(*a, **kw):
        out = real(*a, **kw)
        seen.append(out["kend"])
        return out
    monkeypatch.setattr(triton_fwd, "prepare_inputs", spy)
    o2, S2, c2 = triton_fwd.triton_chunk_fwd(q, k, v, g, bb, w, chunk=C, bv=16)
    assert len(seen) == 1 and seen[0] is not None  # the option reached the prep kernel
    for name in ("Hs", "Di"):
        assert torch.equal(c2[name], c1[name]), name
    assert torch.equal(o2, o1) and torch.equal(S2, S1)
    # and the prep kernel's Kend is the formula on its own outputs
    x = triton_fwd.prepare_inputs(q, k, g, v, w, bb, C, kend=True)
    B, H, TP, K = x["gam"].shape
    gam = x["gam"].reshape(B, H, TP // C, C, K)
    want = x["ki"].reshape(B, H, TP // C, C, K) * torch.exp(gam[:, :, :, -1:, :] - gam)
    assert torch.allclose(x["kend"], want.reshape(B, H, TP, K), rtol=1e-6, atol=0)
    assert triton_fwd.prepare_inputs(q, k, g, v, w, bb, C)["kend"] is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_output_kernel_writing_the_callers_layout_gives_the_same_o(monkeypatch, dtype):
    # DIRECT=1: the output kernel stores o in [B, T, H, V] and the input dtype itself, padded rows dropped, instead
    # of a float32 buffer that torch casts and transposes. float32: bitwise. bf16: the interpreter truncates float32
    # to bf16 where torch (and the GPU) round to nearest, so one bf16 step apart at most, in the rounding direction
    from lethe.kernels.gdn import triton_fwd

    C, T = 16, 37  # a padded last chunk
    q, k, v, g, b, w, _ = (x.to(dtype) for x in make_inputs(T=T, K=16, V=32))
    outs = {}
    for direct in (0, 1):
        with monkeypatch.context() as m:
            m.setitem(triton_fwd.FWD_LAUNCH, "output_fwd_kernel",
                      {**triton_fwd.FWD_LAUNCH["output_fwd_kernel"], "DIRECT": direct})
            outs[direct] = triton_fwd.triton_chunk_fwd(q, k, v, g, b, w, chunk=C, bv=16)
    (o0, S0, c0), (o1, S1, c1) = outs[0], outs[1]
    assert o1.shape == o0.shape == v.shape and o1.dtype == o0.dtype == dtype and o1.is_contiguous()
    assert torch.equal(S1, S0) and torch.equal(c1["Hs"], c0["Hs"])
    if dtype == torch.float32:
        assert torch.equal(o1, o0)
    else:
        step = o0.float().abs() * 2.0 ** -7  # one bf16 step at each element's magnitude, at most
        assert bool(((o1.float() - o0.float()).abs() <= step).all())
        assert bool((o1.float().abs() <= o0.float().abs() + step).all())



FWD_KERNELS = ("prep_fwd_kernel", "wy_a_kernel", "wy_inverse_kernel", "wy_apply_kernel", "state_fwd_kernel",
               "output_fwd_kernel")


def _launched_precs(monkeypatch, inputs, launch=None, **opts) -> dict:
    """{kernel: the PREC it was launched with} for one triton_chunk_fwd, the kernels replaced by stand-ins that
    record their keyword arguments (nothing executes); ``launch`` overrides FWD_LAUNCH entries meanwhile."""
    from lethe.kernels.gdn import triton_fwd

    seen = {}

    class Recorder:
        def __init__(self, name):
            self.name = name

        def __getitem__(self, grid):
            return lambda *args, **kwargs: seen.__setitem__(self.name, kwargs.get("PREC"))

    with monkeypatch.context() as m, triton_fwd.decay_floor_check_off():
        for n in FWD_KERNELS:
            m.setattr(triton_fwd, n, Recorder(n))
        for kernel, entry in (launch or {}).items():
            m.setitem(triton_fwd.FWD_LAUNCH, kernel, {**triton_fwd.FWD_LAUNCH[kernel], **entry})
        triton_fwd.triton_chunk_fwd(*inputs, chunk=16, **opts)
    return seen


def test_output_precision_reaches_the_output_kernel_only(monkeypatch):
    # the output kernel's products feed only o: output_precision changes its PREC and nothing else's; None follows
    # dot_precision, and so does the default for float32
    from lethe.kernels.gdn import triton_fwd

    x = tuple(t.float() for t in make_inputs(T=64, K=16, V=16)[:6])
    base = _launched_precs(monkeypatch, x)
    got = _launched_precs(monkeypatch, x, output_precision="tf32")
    assert set(base) == set(FWD_KERNELS)
    assert got.pop("output_fwd_kernel") == "tf32" and base.pop("output_fwd_kernel") == "tf32x3"
    assert got == base and set(base.values()) - {None} == {"tf32x3"}
    assert _launched_precs(monkeypatch, x, dot_precision="ieee")["output_fwd_kernel"] == "ieee"
    # the default ("auto") rounds to TF32 for 16-bit inputs only, and only under the default dot_precision
    x = tuple(t.to(torch.bfloat16) for t in x)
    assert _launched_precs(monkeypatch, x)["output_fwd_kernel"] == "tf32rn"
    assert _launched_precs(monkeypatch, x, dot_precision="ieee")["output_fwd_kernel"] == "ieee"
    assert _launched_precs(monkeypatch, x, output_precision=None)["output_fwd_kernel"] == "tf32x3"
    with pytest.raises(ValueError, match="output_precision"):
        triton_fwd.triton_chunk_fwd(*x, chunk=16, output_precision="bf16")


@pytest.mark.parametrize("kernel", ["wy_a_kernel", "wy_apply_kernel", "state_fwd_kernel"])
def test_a_launch_entrys_prec_changes_that_kernel_only(monkeypatch, kernel):
    # PREC in a launch entry (an experiment switch: None by default) sets that kernel's tl.dot precision and no
    # other's; a value tl.dot does not know is refused before anything launches
    from lethe.kernels.gdn import triton_fwd

    x = tuple(t.float() for t in make_inputs(T=64, K=16, V=16)[:6])
    seen = _launched_precs(monkeypatch, x, launch={kernel: {"PREC": "tf32rn"}})
    assert seen.pop(kernel) == "tf32rn"
    assert set(seen.values()) - {None} == {"tf32x3"}
    with pytest.raises(ValueError, match="PREC"):
        _launched_precs(monkeypatch, x, launch={kernel: {"PREC": "bf16"}})
    with pytest.raises(ValueError, match="dot_precision"):
        triton_fwd.triton_chunk_fwd(*x, chunk=16, dot_precision="tf32rn")


def test_auto_kernels_round_to_tf32_for_16_bit_inputs_only(monkeypatch):
    # PREC "auto" (A, W/U and the state scan by default): single-pass TF32 on rounded operands for bf16/fp16 inputs
    # under the default dot_precision, like the output kernel; float32 inputs and a chosen dot_precision keep theirs
    from lethe.kernels.gdn import triton_fwd

    auto = {n for n, cfg in triton_fwd.FWD_LAUNCH.items() if cfg.get("PREC") == "auto"}
    assert auto == {"wy_a_kernel", "wy_apply_kernel", "state_fwd_kernel"}
    x32 = tuple(t.float() for t in make_inputs(T=64, K=16, V=16)[:6])
    for dtype in (torch.bfloat16, torch.float16):
        x = tuple(t.to(dtype) for t in x32)
        assert {n: p for n, p in _launched_precs(monkeypatch, x).items() if n in auto} == dict.fromkeys(auto, "tf32rn")
        assert {_launched_precs(monkeypatch, x, dot_precision="ieee")[n] for n in auto} == {"ieee"}
    assert {_launched_precs(monkeypatch, x32)[n] for n in auto} == {"tf32x3"}
    # an explicit PREC is taken as given whatever the inputs
    x = tuple(t.to(torch.bfloat16) for t in x32)
    assert _launched_precs(monkeypatch, x, launch={"state_fwd_kernel": {"PREC": "tf32x3"}})["state_fwd_kernel"] == "tf32x3"
    # the forward's ctx says what ran
    with triton_fwd.decay_floor_check_off():
        ctx = triton_fwd.triton_chunk_fwd(*x, chunk=16)[2]
    assert ctx["prec_kernels"] == {**dict.fromkeys(auto, "tf32rn"), "output_fwd_kernel": "tf32rn"}
    # the row inverse runs the WY step at the forward's dot_precision: only the kernels launched are reported
    with triton_fwd.decay_floor_check_off():
        ctx = triton_fwd.triton_chunk_fwd(*x, chunk=16, wy_inverse="rows")[2]
    assert ctx["prec_kernels"] == {"state_fwd_kernel": "tf32rn", "output_fwd_kernel": "tf32rn"}


def test_state_kernel_tf32rn_rounds_its_operands():
    # the state kernel through the shared _dot: with PREC "tf32rn" on the interpreter (float32 dots) the states
    # must be the recurrence on TF32-rounded operands, exactly, for dyadic inputs (no erase: delta = u, no decay:
    # Kend = k), and differ from the default's by a TF32-sized amount
    from lethe.kernels.gdn import triton_fwd

    gen = torch.Generator().manual_seed(7)
    B, T, H, K, V, C = 1, 48, 1, 16, 16, 16
    k = (torch.randint(1, 3, (B, T, H, K), generator=gen) / 2) * (torch.randint(0, 2, (B, T, H, K), generator=gen) * 2 - 1)
    # v with 14-bit fractions: more bits than TF32 keeps, few enough that every float32 sum stays exact
    v = torch.randint(-2 ** 14 + 1, 2 ** 14, (B, T, H, V), generator=gen) / 2 ** 14
    q, g, w = k.clone(), torch.zeros(B, T, H, K), torch.ones(B, T, H, V)
    _, S0, c0 = triton_fwd.triton_chunk_fwd(q, k, v, g, None, w, chunk=C)
    with pytest.MonkeyPatch.context() as m:
        m.setitem(triton_fwd.FWD_LAUNCH, "state_fwd_kernel", {**triton_fwd.FWD_LAUNCH["state_fwd_kernel"],
                                                              "PREC": "tf32rn"})
        _, S1, c1 = triton_fwd.triton_chunk_fwd(q, k, v, g, None, w, chunk=C)
    R = _tf32_nearest_reference
    NT = T // C
    ki = c0["ki"].reshape(B, H, NT, C, K)
    d = c0["Di"].reshape(B, H, NT, C, V)
    S = torch.zeros(B, H, K, V)
    for n in range(NT):
        assert torch.equal(c1["Hs"][:, :, n], S), n
        S = S + R(ki[:, :, n]).transpose(-1, -2) @ R(d[:, :, n])
    assert torch.equal(S1, S)
    assert not torch.equal(S1, S0) and rel_err(S1, S0) < 2e-3



@pytest.mark.parametrize("backend", ["triton", "hybrid-tc"])
@pytest.mark.slow
def test_chunk_family_takes_output_precision_through_autograd(backend):
    # the option travels through the autograd Function (one more argument, one more None gradient); the
    # interpreter's dots ignore the precision, so the results are the default's exactly
    q, k, v, g, b, w, _ = (x.float() for x in make_inputs(T=40, K=16, V=16))
    do = torch.randn(v.shape, generator=torch.Generator().manual_seed(3))
    outs = []
    for opts in ({}, {"output_precision": "tf32"}):
        leaves = [x.clone().requires_grad_() for x in (q, k, v, g, b, w)]
        o, _ = chunk_family(*leaves, member="gdn", chunk=16, backend=backend, **opts)
        outs.append((o, torch.autograd.grad((o * do).sum(), leaves)))
    assert torch.equal(outs[0][0], outs[1][0])
    assert all(torch.equal(a, r) for a, r in zip(outs[0][1], outs[1][1], strict=True))


def _tf32_nearest_reference(x: torch.Tensor) -> torch.Tensor:
    # round-to-nearest-away on the float32 bit pattern; infinities and NaNs kept
    bits = x.float().contiguous().view(torch.int32)
    rounded = ((bits + 0x1000) & -8192).view(torch.float32)
    return torch.where((bits & 0x7F800000) == 0x7F800000, x.float(), rounded)


@triton.jit
def _tf32_probe(x_ptr, y_ptr, N: tl.constexpr):
    i = tl.arange(0, N)
    tl.store(y_ptr + i, _tf32_nearest(tl.load(x_ptr + i)))


def test_tf32_nearest_rounds_like_cvt_rna_and_keeps_specials():
    ulp = 2.0 ** -10
    nan_max_payload = torch.tensor([0x7FFFFFFF], dtype=torch.int32).view(torch.float32)
    x = torch.tensor([1.0, 1 + 0.6 * ulp, -1 - 0.6 * ulp, 1 + 0.4 * ulp, 1 + 0.5 * ulp, float("inf"), -float("inf"),
                      0.0, -0.0, 3.0e38, 1e-40, 2.5, 7.0, -7.0, 0.3, 1e-3], dtype=torch.float32)
    x[7] = nan_max_payload[0]  # the GPU's canonical NaN: adding to it would carry into the sign bit
    y = torch.empty_like(x)
    _tf32_probe[(1,)](x, y, N=16)
    want = _tf32_nearest_reference(x)
    assert torch.equal(torch.isnan(y), torch.isnan(want)) and bool(torch.isnan(y[7]))
    keep = ~torch.isnan(want)
    assert torch.equal(y[keep], want[keep])
    assert y[1] == 1 + ulp and y[2] == -1 - ulp and y[3] == 1.0 and y[4] == 1 + ulp  # ties away from zero
    assert y[5] == float("inf") and y[6] == -float("inf")


def test_output_precision_tf32rn_rounds_the_output_kernels_operands():
    # On the interpreter (float32 dots) the kernel's o must equal the same products on TF32-rounded operands in
    # torch. Inputs are dyadic (q, k in {+-1/2, +-1}, v with 11-bit fractions, no decay, no erase) so every float32
    # sum is exact on both sides and only the TF32 rounding of operands with more than 11 significant bits (the
    # states, delta) makes o differ from the default's: no accumulation-order noise can flip a rounding.
    from lethe.kernels.gdn import triton_fwd

    gen = torch.Generator().manual_seed(5)
    B, T, H, K, V, C = 1, 48, 2, 16, 16, 16
    pm = lambda *sh: (torch.randint(1, 3, sh, generator=gen) / 2) * (torch.randint(0, 2, sh, generator=gen) * 2 - 1)  # noqa: E731
    q, k = pm(B, T, H, K), pm(B, T, H, K)
    v = torch.randint(-2047, 2048, (B, T, H, V), generator=gen) / 2048
    g, w = torch.zeros(B, T, H, K), torch.ones(B, T, H, V)
    o0, _, ctx = triton_fwd.triton_chunk_fwd(q, k, v, g, None, w, chunk=C)
    o1, _, _ = triton_fwd.triton_chunk_fwd(q, k, v, g, None, w, chunk=C, output_precision="tf32rn")
    NT = T // C
    ch = lambda x: x.reshape(B, H, NT, C, x.shape[-1])  # noqa: E731
    Qg, Kg = ch(ctx["qi"]) * ctx["scale"], ch(ctx["ki"])
    R = _tf32_nearest_reference
    P = torch.tril(R(Qg) @ R(Kg).transpose(-1, -2))
    o_int = R(Qg) @ R(ctx["Hs"]) + R(P) @ R(ch(ctx["Di"]))
    want = triton_fwd.from_internal(o_int.reshape(B, H, T, -1), T, torch.float32)
    assert torch.equal(o1, want)  # exactly the rounded products
    assert not torch.equal(o0, o1) and rel_err(o1, o0) < 2e-3  # the rounding happened, and it is TF32-sized


def test_problems_past_32_bit_indexing_are_refused_before_anything_runs():
    # the kernels' offsets are int32: a problem whose largest internal tensor (the chunk states, K*V/C = 256 per
    # token at d_k = d_v = 128, chunk 64) passes 2^31 - 1 elements is refused, naming the batch that would fit
    from lethe.kernels.gdn import triton_fwd
    from lethe.kernels.gdn.native.backend import NativeGDN

    check = triton_fwd.check_index_range
    check(1, 2, 2**20, 128, 128, 64)  # the benchmarks' 2^21 head-tokens: 2^29 elements
    check(4, 32, 2**15, 128, 128, 64)  # 2^30
    check(7, 32, 2**15, 128, 128, 64)
    with pytest.raises(ValueError, match="at most 7 sequence"):
        check(8, 32, 2**15, 128, 128, 64)  # exactly 2^31
    with pytest.raises(ValueError, match="even one sequence"):
        check(1, 64, 2**17 + 1, 128, 128, 64)  # padded to whole chunks: 2^31 + 2^20
    check(8, 32, 2**15, 128, 32, 64)  # d_v 32: K*V/C = 64 < K = 128 per token, 2^30
    # through the wrappers, before any allocation (stride-0 inputs of the refused shape)
    shape = (8, 2**15, 32, 128)
    x = [torch.empty(1, 1, 1, 128).expand(*shape) for _ in range(6)]
    with pytest.raises(ValueError, match="32-bit"):
        triton_fwd.triton_chunk_fwd(*x, chunk=64)
    with pytest.raises(ValueError, match="32-bit"):
        NativeGDN.forward(*x, None, 64, None)


def test_intra_backward_precision_follows_its_launch_entry():
    # PREC None keeps the TF32 fallback; an explicit PREC (here TF32 rounded to nearest) reaches the kernel and is
    # recorded; a misspelt one is refused before anything launches
    from lethe.kernels.gdn.launch_tables import overridden
    from lethe.kernels.gdn.triton_bwd import BWD_LAUNCH, intra_precision

    assert BWD_LAUNCH["intra_bwd_kernel"]["PREC"] is None
    assert intra_precision("tf32x3") == "tf32" and intra_precision("ieee") == "ieee"
    q, k, v, g, b, w, _ = make_inputs(T=40, K=16, V=16)
    gen = torch.Generator().manual_seed(5)
    do = torch.randn(1, 40, 2, 16, generator=gen, dtype=torch.float64)
    _, _, ctx64 = chunked.chunk_fwd(q, k, v, g, b, w, chunk=16)
    ref = chunked.chunk_bwd(do, ctx64, None)
    f = lambda x: x.float().to(DEV)  # noqa: E731
    _, _, tctx = triton_chunk_fwd(*(f(x) for x in (q, k, v, g, b, w)), chunk=16)
    base = triton_chunk_bwd(f(do), tctx)
    assert tctx["bwd_intra_precision"] == "tf32"
    with overridden({"intra_bwd_kernel": {"PREC": "tf32rn"}}):
        assert intra_precision("tf32x3") == "tf32rn"
        rn = triton_chunk_bwd(f(do), tctx)
    assert tctx["bwd_intra_precision"] == "tf32rn"
    changed = False
    for name, got, want, r in zip(("dq", "dk", "dv", "dg", "db", "dw"), rn, base, ref, strict=False):
        # operands rounded to 10 mantissa bits: TF32-grade agreement with float64, and not the default's bits
        assert rel_err(got.cpu(), r) < 5e-3, name
        changed |= not torch.equal(got, want)
    assert changed
    with overridden({"intra_bwd_kernel": {"PREC": "tf32_rn"}}), pytest.raises(ValueError, match="PREC"):
        triton_chunk_bwd(f(do), tctx)


def _bwd_case(T, K, V, C, erase, init, final, seed=0):
    """A float64 problem, its float64 chunked-reference gradients and the Triton forward's ctx (float32)."""
    q, k, v, g, b, w, _ = make_inputs(T=T, K=K, V=V, seed=seed)
    bb = b if erase else None
    gen = torch.Generator().manual_seed(seed + 7)
    S0 = torch.randn(1, 2, K, V, generator=gen, dtype=torch.float64) if init else None
    do = torch.randn(1, T, 2, V, generator=gen, dtype=torch.float64)
    dS = torch.randn(1, 2, K, V, generator=gen, dtype=torch.float64) if final else None
    _, _, ctx64 = chunked.chunk_fwd(q, k, v, g, bb, w, chunk=C, initial_state=S0)
    ref = chunked.chunk_bwd(do, ctx64, dS)
    f = lambda x: None if x is None else x.float().to(DEV)  # noqa: E731
    _, _, tctx = triton_chunk_fwd(*(f(x) for x in (q, k, v, g, bb, w)), chunk=C, initial_state=f(S0))
    return f(do), f(dS), tctx, ref


_BWD_NAMES = ("dq", "dk", "dv", "dg", "db", "dw", "dS0")


@pytest.mark.parametrize("erase,init,final", [(True, True, True), (True, False, False), (False, True, False),
                                              (False, False, True)])
@pytest.mark.parametrize("kend", [1, 0])
def test_split_state_backward_gives_the_one_kernel_scan(erase, init, final, kend):
    # SPLIT 1 (the default): state_bwd_local_kernel forms P^T dO and (q Gamma)^T dO of every chunk, the scan only
    # the dS-dependent products. The same float32 products, summed in the same order: on the interpreter every
    # stored intermediate and gradient is bitwise the one-kernel scan's (SPLIT 0); both within TOL of float64.
    # T = 37 with chunk 16: the last chunk is padded. V = 64 with local V-blocks of 16, two per program: the
    # local kernel's V-block loop and its third grid axis both run.
    from lethe.kernels.gdn.launch_tables import overridden
    from lethe.kernels.gdn.triton_bwd import BWD_LAUNCH

    assert BWD_LAUNCH["state_bwd_kernel"]["SPLIT"] == 1
    do, dS, tctx, ref = _bwd_case(37, 16, 64, 16, erase, init, final)
    runs = {}
    for split in (1, 0):
        with overridden({"state_bwd_kernel": {"SPLIT": split, "KEND": kend, "BV": 32},
                         "state_bwd_local_kernel": {"BV": 16, "NVL": 2}}):
            grads = triton_chunk_bwd(do, tctx, dS)
        runs[split] = (grads, tctx["bwd_dSn"].clone(), tctx["bwd_ddelta"].clone())
    (new, dSn1, dd1), (old, dSn0, dd0) = runs[1], runs[0]
    exact = not torch.cuda.is_available()
    for name, a, o in (("dS_next", dSn1, dSn0), ("d delta", dd1, dd0)):
        assert torch.equal(a, o) if exact else rel_err(a, o) < 1e-5, name
    for name, a, o, r in zip(_BWD_NAMES, new, old, ref, strict=True):
        if r is None:
            assert a is None and o is None, name
            continue
        assert rel_err(a.cpu(), r) < TOL, name
        assert torch.equal(a, o) if exact else rel_err(a, o) < 1e-5, name


@pytest.mark.parametrize("member", ["gdn", "gla"])
def test_split_state_backward_through_autograd_against_the_recurrence(member):
    # the default backward (split scan, fused tail) through chunk_family against autograd through the float64
    # recurrence itself, with an initial state and a final-state gradient, T not a multiple of the chunk: GDN
    # (erase: q, k, v, g, b, w, S0) and GLA (no erase, HAS_ERASE False: q, k, v, g, S0)
    T, K, V = 37, 16, 32
    q, k, v, g, b, w, _ = make_inputs(T=T, K=K, V=V, seed=2)
    S0 = torch.randn(1, 2, K, V, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    names = ("q", "k", "v", "g", "b", "w") if member == "gdn" else ("q", "k", "v", "g")
    src = dict(q=q, k=k, v=v, g=g, b=b, w=w)
    ref_leaves = {n: src[n].clone().requires_grad_() for n in names}
    s0_ref = S0.clone().requires_grad_()
    rb = ref_leaves.get("b", torch.zeros_like(q))
    rw = ref_leaves.get("w", torch.ones_like(v))
    o_ref, S_ref = R.recurrent_gdn(ref_leaves["q"], ref_leaves["k"], ref_leaves["v"], ref_leaves["g"], rb, rw,
                                   initial_state=s0_ref, output_final_state=True)
    gen = torch.Generator().manual_seed(10)
    do = torch.randn(o_ref.shape, generator=gen, dtype=torch.float64)
    dS = torch.randn(S_ref.shape, generator=gen, dtype=torch.float64)
    ref_grads = torch.autograd.grad((o_ref * do).sum() + (S_ref * dS).sum(), [*ref_leaves.values(), s0_ref])
    leaves = {n: src[n].float().to(DEV).requires_grad_() for n in names}
    s0 = S0.float().to(DEV).requires_grad_()
    o, S = chunk_family(member=member, backend="triton", chunk=16, initial_state=s0, output_final_state=True,
                        **leaves)
    loss = (o * do.float().to(DEV)).sum() + (S * dS.float().to(DEV)).sum()
    got = torch.autograd.grad(loss, [*leaves.values(), s0])
    for n, a, r in zip((*names, "S0"), got, ref_grads, strict=True):
        assert rel_err(a.cpu(), r) < TOL, f"{member}: d{n}"


def test_backward_defaults_to_the_fused_tail(monkeypatch):
    # the default backward ends in bwd_tail_kernel (gradients written in the caller's layout and dtype), not the
    # torch tail's copies, casts and reverse cumsum
    from lethe.kernels.gdn import triton_bwd

    do, dS, tctx, _ = _bwd_case(37, 16, 32, 16, True, False, True)
    calls = []
    real = triton_bwd._fused_tail
    monkeypatch.setattr(triton_bwd, "_fused_tail", lambda *a: calls.append(1) or real(*a))
    fused = triton_chunk_bwd(do, tctx, dS)
    assert calls == [1]
    torch_tail = triton_chunk_bwd(do, tctx, dS, fused_tail=False)
    assert calls == [1]
    for name, a, c in zip(_BWD_NAMES, torch_tail, fused, strict=True):
        if a is None:
            assert c is None, name
            continue
        assert c.dtype == a.dtype and c.shape == a.shape, name
        assert rel_err(c, a) < (1e-6 if name == "dg" else 0.0) or torch.equal(c, a), name
