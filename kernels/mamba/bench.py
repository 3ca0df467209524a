"""What the Mamba benchmark shares (issue 26): the ops C1 to C6 and their shapes (the authors' records and the
model shapes), the inputs, how each side is called (ours, the torch path, mamba-ssm's pieces), the minimal HBM
traffic of each op, and the correctness check every timed cell passes first.

The driver is experiments/mamba/bench.py; timing is :mod:`lethe.perf.timing`; the table is
:mod:`lethe.kernels.mamba.bench_render`. Conventions read from mamba-ssm 2.3.2.post1 (its Python API only):

* ``selective_scan_fn(u, delta, A, B, C, D)`` is channels first (u, delta ``[B, D, L]``; B, C ``[B, N, L]`` when
  shared by all channels), A and D float32; it is our C1 exactly (no z, no delta bias, no softplus). Its autograd
  backward (``selective_scan_cuda.bwd``, recomputing the forward from the chunk states it saved) is our C2 with
  the same six gradients.
* ``mamba3_siso_fwd(Q, K, V, ADT, DT, Trap, Q_bias, K_bias, Angles, ...)`` is Mamba-3's SISO forward: trapezoidal
  discretisation mixed by ``sigmoid(Trap)``, Q and K rotated by *cumulative* angles (rotary embedding, pairs
  (2k, 2k+1), the same rotation matrix as ours), K scaled by the step, decay ``exp(ADT)``. With ``sigmoid(Trap)
  = 1`` the trapezoid is the Euler step, and rotating Q_t and K_s by -Theta_t and -Theta_s (Theta the running sum
  of our per-step angles) gives ``Q_t^T R(Theta_t - Theta_s) K_s``, the weight our state rotation gives C_t and
  B_s: so C4 is that op with Q = C, K = B, V = x, ADT = A dt, zero biases, no D, no gate (:func:`c4_official`).
* C3 (the MIMO backward) has no open counterpart: the Triton Mamba-3 backward is SISO (rank 1, with the
  trapezoid, biases and angles among its gradients and no MIMO weights) and the MIMO backward ships as TileLang;
  it is timed against the torch path only.
* C5 / C6 have no fused counterpart (``mamba_inner_fn`` composes a different block: z gate, projections, no
  RMSNorm after the scan); they are compared with the composition conv1d + SiLU + scan + RMSNorm in torch around
  mamba-ssm's CUDA scan, around our own scan, and around the torch path.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

from . import error_bounds as eb

# op id -> chooser name, the family of its shapes, forward or backward, the authors' record
OPS = {
    "C1": dict(name="forward_chunked_scan", family="scan", direction="fwd", record="c1_bench_b200.json"),
    "C2": dict(name="backward_selective_scan", family="scan", direction="bwd", record="c2_bench_b200.json"),
    "C3": dict(name="mimo_backward", family="mimo", direction="bwd", record="c3_bench_b200.json"),
    "C4": dict(name="complex_scan_rope", family="rope", direction="fwd", record="c4_bench_b200.json"),
    "C5": dict(name="fused_block_forward", family="block", direction="fwd", record="c5_bench_b200.json"),
    "C6": dict(name="fused_block_backward", family="block", direction="bwd", record="c6_bench_b200.json"),
}
SHAPE_KEYS = {
    "scan": ("batch", "seq_len", "d_model", "n_state"),
    "block": ("batch", "l_out", "d_model", "n_state", "conv_k"),
    "mimo": ("batch", "seq_len", "rank", "nheads", "headdim", "n_state"),
    "rope": ("batch", "seq_len", "nheads", "headdim", "n_state", "num_angles"),
}
# the model shapes: batch 8, L 2048, d_model 4096, N 16 and 128 (per head for the Mamba-3 ops: 32 heads
# of 64 channels, the records' layout of d_model 2048 ... 4096 as heads)
MODEL_SHAPES = {
    "scan": [dict(batch=8, seq_len=2048, d_model=4096, n_state=16), dict(batch=8, seq_len=2048, d_model=4096,
                                                                           n_state=128)],
    "block": [dict(batch=8, l_out=2048, d_model=4096, n_state=16, conv_k=4), dict(batch=8, l_out=2048,
                                                                                    d_model=4096, n_state=128,
                                                                                    conv_k=4)],
    "mimo": [dict(batch=8, seq_len=2048, rank=2, nheads=32, headdim=64, n_state=128)],
    "rope": [dict(batch=8, seq_len=2048, nheads=32, headdim=64, n_state=128, num_angles=64)],
}
# the official ops' names, as the rows name the competitor
OFFICIAL = {"C1": "official_cuda", "C2": "official_cuda", "C4": "official_mamba3_siso_fwd",
            "C5": "composed_official", "C6": "composed_official"}
NO_OFFICIAL = {"C3": "no open MIMO backward: the Triton Mamba-3 backward is SISO (rank 1; trapezoid, bias and "
                     "angle gradients, no MIMO weights), the MIMO backward ships as TileLang"}
# the pre-set goals of issue 26 at the model shapes: ours / official time ratio of at least this
GOALS = {"fwd": 1.0, "bwd": 0.75}
MAGNITUDE_BATCH = 1  # the correctness check runs on this many leading batch rows of the timed inputs


def shape_id(shape: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in shape.items())


def record_shapes(op: str, published: Path) -> list[dict]:
    """The distinct shapes of the authors' record of ``op``, in the record's order."""
    doc = json.loads((Path(published) / OPS[op]["record"]).read_text())
    keys, out = SHAPE_KEYS[OPS[op]["family"]], []
    for run in doc["runs"]:
        s = {k: int(run["shape"][k]) for k in keys}
        if s not in out:
            out.append(s)
    return out


def plan(ops, shape_set: str, published: Path, dry_run: bool = False) -> list[tuple[str, dict, bool]]:
    """(op, shape, is a model shape) in run order. ``shape_set``: "default" (the record's first shape and the model
    shapes), "records" (every record shape and the model shapes) or "model". A dry run replaces every shape by
    a tiny one of the same family (the interpreter runs it in seconds)."""
    if dry_run:
        tiny = {"scan": dict(batch=2, seq_len=20, d_model=8, n_state=4),
                "block": dict(batch=2, l_out=20, d_model=8, n_state=4, conv_k=4),
                "mimo": dict(batch=1, seq_len=20, rank=2, nheads=2, headdim=4, n_state=4),
                "rope": dict(batch=1, seq_len=20, nheads=2, headdim=4, n_state=8, num_angles=2)}
        return [(op, tiny[OPS[op]["family"]], True) for op in ops]
    cells = []
    for op in ops:
        fam = OPS[op]["family"]
        recs = record_shapes(op, published)
        chosen = {"default": recs[:1], "records": recs, "model": []}[shape_set]
        for s in chosen:
            cells.append((op, s, s in MODEL_SHAPES[fam]))
        for s in MODEL_SHAPES[fam]:
            if s not in chosen:
                cells.append((op, s, True))
    return cells


# ----------------------------------------------------------------------------------------------------- inputs


def make_inputs(op: str, shape: dict, dtype: torch.dtype, device: str, seed: int = 0) -> dict:
    """The op's inputs drawn in float32 on ``device`` and rounded to ``dtype`` (steps in [0.05, 0.5], decays in
    [-2, -0.5]: |dt A| <= 1, the regime of the error bounds). Parameters (A, D, conv and norm weights, MIMO
    weights) take the same dtype, as the records' runs do; mamba-ssm's float32 A and D are these values widened."""
    g = torch.Generator(device=device).manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, device=device)  # noqa: E731
    un = lambda lo, hi, *s: lo + (hi - lo) * torch.rand(*s, generator=g, device=device)  # noqa: E731
    fam = OPS[op]["family"]
    if fam in ("scan", "block"):
        b, d, n = shape["batch"], shape["d_model"], shape["n_state"]
        L = shape.get("seq_len", shape.get("l_out"))
        x = dict(delta=un(0.05, 0.5, b, L, d), A=-un(0.5, 2.0, d, n), B=r(b, L, n), C=r(b, L, n), D=r(d))
        if fam == "scan":
            x["u"] = r(b, L, d)
        else:
            k = shape["conv_k"]
            x.update(x=r(b, L + k - 1, d), conv_weight=0.5 * r(d, k), conv_bias=0.1 * r(d), norm_weight=1 + 0.1 * r(d))
        grad_like = (b, L, d)
    elif fam == "mimo":
        b, L, R, H, P, n = (shape[k] for k in SHAPE_KEYS["mimo"])
        x = dict(x=r(b, L, H, P), dt=un(0.05, 0.5, b, L, H), alpha=-un(0.5, 2.0, H), B=r(b, L, H, R, n),
                 C=r(b, L, H, R, n), mimo_x=r(H, R, P), mimo_o=r(H, R, P))
        grad_like = (b, L, H, P)
    else:
        b, L, H, P, n, S = (shape[k] for k in SHAPE_KEYS["rope"])
        x = dict(x=r(b, L, H, P), dt=un(0.05, 0.5, b, L, H), A=-un(0.5, 2.0, H), B=r(b, L, H, n), C=r(b, L, H, n),
                 theta=3.0 * r(b, L, H, S))
        grad_like = (b, L, H, P)
    if OPS[op]["direction"] == "bwd":
        x["dy"] = r(*grad_like)
    return {k: v.to(dtype).contiguous() for k, v in x.items()}


def batch_slice(op: str, x: dict, n: int) -> dict:
    """The first ``n`` batch rows of every activation (parameters unchanged)."""
    params = {"A", "D", "conv_weight", "conv_bias", "norm_weight", "alpha", "mimo_x", "mimo_o"}
    return {k: (v if k in params else v[:n].contiguous()) for k, v in x.items()}


def min_bytes(op: str, shape: dict, dtype: torch.dtype) -> int:
    """Minimal HBM traffic: every input read once and every output written once, at the input dtype's width
    (what any implementation must move; a time over this is an effective bandwidth)."""
    fam, w = OPS[op]["family"], torch.finfo(dtype).bits // 8
    if fam in ("scan", "block"):
        b, d, n = shape["batch"], shape["d_model"], shape["n_state"]
        L = shape.get("seq_len", shape.get("l_out"))
        k = shape.get("conv_k", 0)
        acts = b * L * d * 2 + 2 * b * L * n + (b * k * d if k else 0)  # u or x, delta; B, C; x's history rows
        params = d * n + d + (d * k + 2 * d if k else 0)
        out_f = b * L * d
    elif fam == "mimo":
        b, L, R, H, P, n = (shape[k] for k in SHAPE_KEYS["mimo"])
        acts, params, out_f = b * L * H * (P + 1 + 2 * R * n), H * (1 + 2 * R * P), b * L * H * P
    else:
        b, L, H, P, n, S = (shape[k] for k in SHAPE_KEYS["rope"])
        acts, params, out_f = b * L * H * (P + 1 + 2 * n + S), H, b * L * H * P
    if OPS[op]["direction"] == "fwd":
        return w * (acts + params + out_f)
    return w * (2 * (acts + params) + out_f)  # read inputs and dy, write a gradient per input


# ------------------------------------------------------------------------------------------------ the sides


def official_status() -> dict:
    """Whether mamba-ssm's CUDA selective scan and its Mamba-3 Triton forward import here (a row field)."""
    st = {}
    try:
        import mamba_ssm
        from mamba_ssm.ops.selective_scan_interface import selective_scan_fn  # noqa: F401

        st["selective_scan_fn"] = {"importable": True, "version": getattr(mamba_ssm, "__version__", "")}
    except Exception as exc:  # noqa: BLE001 (any import failure is reported, not raised)
        st["selective_scan_fn"] = {"importable": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
    try:
        from mamba_ssm.ops.triton.mamba3.mamba3_siso_fwd import mamba3_siso_fwd  # noqa: F401

        st["mamba3_siso_fwd"] = {"importable": True}
    except Exception as exc:  # noqa: BLE001
        st["mamba3_siso_fwd"] = {"importable": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
    return st


def official_scan(u, delta, A, B, C, D):
    """mamba-ssm's CUDA selective scan on our channels-last layout (y channels last, u's dtype)."""
    from mamba_ssm.ops.selective_scan_interface import selective_scan_fn

    y = selective_scan_fn(u.transpose(1, 2), delta.transpose(1, 2), A.float(), B.transpose(1, 2),
                          C.transpose(1, 2), D.float())
    return y.transpose(1, 2)


def c4_official_args(x, dt, A, B, C, theta):
    """C4's inputs in mamba3_siso_fwd's convention (module docstring): Q = C, K = B, V = x, ADT = A dt and DT
    ``[batch, H, L]``, Trap so large that sigmoid(Trap) rounds to 1 (the Euler step), zero biases, and the
    cumulative angle -sum_{s<=t} theta_s reduced mod 2 pi (the official kernel's sine and cosine are the
    hardware approximations, accurate on [-pi, pi])."""
    b, L, H, N = B.shape
    adt = (A.float()[None, None, :] * dt.float()).transpose(1, 2).contiguous()
    dtt = dt.float().transpose(1, 2).contiguous()
    trap = torch.full_like(dtt, 1.0e4)
    zeros = torch.zeros(H, N, device=x.device, dtype=torch.float32)
    ang = torch.remainder(-torch.cumsum(theta.float(), 1) + math.pi, 2 * math.pi) - math.pi
    return (C, B, x, adt, dtt, trap, zeros, zeros.clone(), ang.contiguous())


def c4_official(x, dt, A, B, C, theta):
    from mamba_ssm.ops.triton.mamba3.mamba3_siso_fwd import mamba3_siso_fwd

    return mamba3_siso_fwd(*c4_official_args(x, dt, A, B, C, theta))[0]


def composed_block_forward(x, conv_weight, conv_bias, delta, A, B, C, D, norm_weight, scan, eps: float = 1e-6):
    """conv1d (depthwise, causal: x carries its K - 1 history rows) + SiLU + ``scan`` + RMSNorm, in torch around
    the given scan ``scan(u, delta, A, B, C, D) -> y``; arithmetic in float32 for 16-bit inputs."""
    d, k = conv_weight.shape[0], conv_weight.shape[-1]
    cd = torch.float32 if x.dtype in (torch.bfloat16, torch.float16) else x.dtype
    p = F.conv1d(x.to(cd).transpose(1, 2), conv_weight.to(cd).reshape(d, 1, k), conv_bias.to(cd), groups=d)
    v = F.silu(p).transpose(1, 2).to(x.dtype)
    y = scan(v, delta, A, B, C, D).to(cd)
    out = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + eps) * norm_weight.to(cd)
    return out.to(x.dtype)


@dataclass
class Side:
    """One implementation of an op: ``setup(x)`` (untimed: e.g. the forward whose backward is timed) and
    ``run(x, state)`` (timed; returns the op's outputs as a tuple). ``u_arith``: the unit roundoff of its
    arithmetic for the inputs' dtype (None: the input dtype's float32 evaluation); ``extra_rel``: a further
    relative error per term its arithmetic has beyond ``u_arith`` chains (e.g. TF32 operand rounding)."""

    run: Callable
    setup: Callable = field(default=lambda x: None)
    u_arith: Callable = field(default=lambda dt: eb.UNIT_ROUNDOFF[torch.float32 if dt != torch.float64 else dt])
    extra_rel: Callable = field(default=lambda dt: 0.0)
    slow: bool = False  # a Python loop over time: fewer timed iterations
    # operations its summation order adds to the op's chain at a shape (the chunk-parallel forms' chunk decays)
    extra_steps: Callable = field(default=lambda shape: 0)


#: the chunk of the chunk-parallel sides (the choosers' default, passed explicitly so the bound's chunk is this one)
CP_CHUNK = 64


def _cp_extra(carries: int) -> Callable:
    """extra_steps of a chunk-parallel side: ``carries`` times chunk_carry_steps at CP_CHUNK (once for a forward,
    twice for the block's backward: its checkpoints and its adjoint carry)."""
    return lambda shape: carries * eb.chunk_carry_steps(shape.get("seq_len", shape.get("l_out")), CP_CHUNK)


def _m():
    import lethe.kernels.mamba as m

    return m


def _grads(out, leaves, dy):
    present = [t for t in leaves if t is not None]
    return tuple(torch.autograd.grad(out, present, dy))


def sides(op: str, official: dict) -> dict[str, Side]:
    """The implementations timed for ``op``: ours (the Triton path, first), the torch path, and the official or
    composed ones when ``official`` (from :func:`official_status`) says they import."""
    m = _m()
    have_scan = official.get("selective_scan_fn", {}).get("importable", False)
    have_m3 = official.get("mamba3_siso_fwd", {}).get("importable", False)
    S: dict[str, Side] = {}
    scan_args = lambda x: (x["u"], x["delta"], x["A"], x["B"], x["C"], x["D"])  # noqa: E731
    blk = ("x", "conv_weight", "conv_bias", "delta", "A", "B", "C", "D", "norm_weight")
    if op == "C1":
        S["ours_triton"] = Side(lambda x, _: (m.forward_chunked_scan(*scan_args(x), backend="triton"),))
        S["ours_triton_chunk_parallel"] = Side(lambda x, _: (m.forward_chunked_scan(
            *scan_args(x), chunk=CP_CHUNK, backend="triton", scan_mode="chunk_parallel"),), extra_steps=_cp_extra(1))
        S["torch_path"] = Side(lambda x, _: (m.forward_chunked_scan(*scan_args(x), backend="torch"),), slow=True)
        if have_scan:
            S["official_cuda"] = Side(lambda x, _: (official_scan(*scan_args(x)),))
    elif op == "C2":
        def ckpt(backend):
            return lambda x: m.forward_chunked_scan(*scan_args(x), backend=backend, return_checkpoints=True)[1]

        S["ours_triton"] = Side(lambda x, c: m.backward_selective_scan(*scan_args(x), x["dy"], checkpoints=c,
                                                                       backend="triton"), setup=ckpt("triton"))
        S["torch_path"] = Side(lambda x, c: m.backward_selective_scan(*scan_args(x), x["dy"], checkpoints=c,
                                                                      backend="torch"), setup=ckpt("torch"),
                               slow=True)
        if have_scan:
            def off_setup(x):
                leaves = [t.detach().requires_grad_(True) for t in scan_args(x)]
                return leaves, official_scan(*leaves)

            S["official_cuda"] = Side(lambda x, st: _grads(st[1], st[0], x["dy"]), setup=off_setup)
    elif op == "C3":
        args = lambda x: tuple(x[k] for k in ("x", "dt", "alpha", "B", "C", "mimo_x", "mimo_o", "dy"))  # noqa
        S["ours_triton"] = Side(lambda x, _: m.mimo_backward(*args(x), backend="triton"))
        S["torch_path"] = Side(lambda x, _: m.mimo_backward(*args(x), backend="torch"), slow=True)
    elif op == "C4":
        args = lambda x: tuple(x[k] for k in ("x", "dt", "A", "B", "C", "theta"))  # noqa: E731
        S["ours_triton"] = Side(lambda x, _: (m.complex_scan_rope(*args(x), backend="triton"),))
        S["torch_path"] = Side(lambda x, _: (m.complex_scan_rope(*args(x), backend="torch"),), slow=True)
        if have_m3:
            # TF32 products for float32 inputs (Triton's default for tl.dot), 16-bit operands otherwise: four
            # operand roundings reach each term (K and V into the state, the state and Q into the output), plus
            # the approximate sine and cosine (absolute error <= 2^-20 each, on Q and K)
            S["official_mamba3_siso_fwd"] = Side(
                lambda x, _: (c4_official(*args(x)),),
                extra_rel=lambda dt: 4 * (eb.TF32_UNIT_ROUNDOFF if dt == torch.float32 else eb.UNIT_ROUNDOFF[dt])
                + 4 * 2.0**-20)
    elif op == "C5":
        a = lambda x: tuple(x[k] for k in blk)  # noqa: E731
        S["ours_triton"] = Side(lambda x, _: (m.fused_block_forward(*a(x), backend="triton"),))
        S["ours_triton_chunk_parallel"] = Side(lambda x, _: (m.fused_block_forward(
            *a(x), chunk=CP_CHUNK, backend="triton", scan_mode="chunk_parallel"),), extra_steps=_cp_extra(1))
        S["composed_ours_scan"] = Side(lambda x, _: (composed_block_forward(
            *a(x), scan=lambda *s: m.forward_chunked_scan(*s, backend="triton")),))
        S["torch_path"] = Side(lambda x, _: (m.fused_block_forward(*a(x), backend="torch"),), slow=True)
        if have_scan:
            S["composed_official"] = Side(lambda x, _: (composed_block_forward(*a(x), scan=official_scan),))
    elif op == "C6":
        a = lambda x: tuple(x[k] for k in blk)  # noqa: E731
        S["ours_triton"] = Side(lambda x, saved: m.fused_block_backward(*a(x), x["dy"], saved=saved,
                                                                        backend="triton"),
                                setup=lambda x: m.fused_block_forward(*a(x), backend="triton", return_saved=True)[1],
                                u_arith=lambda dt: eb.UNIT_ROUNDOFF[torch.float64])  # exact_norm: float64
        S["ours_triton_f32_norm"] = Side(
            lambda x, saved: m.fused_block_backward(*a(x), x["dy"], saved=saved, backend="triton",
                                                    exact_norm=False),
            setup=lambda x: m.fused_block_forward(*a(x), backend="triton", return_saved=True)[1])
        # the chunk-parallel launches, forward state from the chunk-parallel forward (untimed), both evaluations
        cp = dict(chunk=CP_CHUNK, backend="triton", scan_mode="chunk_parallel")
        cp_setup = lambda x: m.fused_block_forward(*a(x), return_saved=True, **cp)[1]  # noqa: E731
        S["ours_triton_chunk_parallel"] = Side(
            lambda x, saved: m.fused_block_backward(*a(x), x["dy"], saved=saved, **cp), setup=cp_setup,
            u_arith=lambda dt: eb.UNIT_ROUNDOFF[torch.float64], extra_steps=_cp_extra(2))
        S["ours_triton_chunk_parallel_f32_norm"] = Side(
            lambda x, saved: m.fused_block_backward(*a(x), x["dy"], saved=saved, exact_norm=False, **cp),
            setup=cp_setup, extra_steps=_cp_extra(2))

        def composed(scan):
            def setup(x):
                leaves = [t.detach().requires_grad_(True) for t in a(x)]
                return leaves, composed_block_forward(*leaves, scan=scan)

            return Side(lambda x, st: _grads(st[1], st[0], x["dy"]), setup=setup)

        S["composed_ours_scan"] = composed(lambda *s: m.selective_scan(*s, backend="triton"))
        if have_scan:
            S["composed_official"] = composed(official_scan)
    return S


# ----------------------------------------------------------------------------------------------- correctness


def magnitudes(op: str, x: dict) -> tuple:
    """The float64 magnitude S of each output (the references' magnitude recurrences), for the error bound."""
    d = {k: v.double() for k, v in x.items()}
    if op == "C1":
        from .forward_chunked_scan.reference import selective_scan_magnitude

        return (selective_scan_magnitude(d["u"], d["delta"], d["A"], d["B"], d["C"], d["D"])[0],)
    if op == "C2":
        from .backward_selective_scan.reference import selective_scan_grads_magnitude

        return selective_scan_grads_magnitude(d["u"], d["delta"], d["A"], d["B"], d["C"], d["D"], d["dy"])
    if op == "C3":
        from .mimo_backward.reference import mimo_scan_grads_magnitude

        return mimo_scan_grads_magnitude(*(d[k] for k in ("x", "dt", "alpha", "B", "C", "mimo_x", "mimo_o", "dy")))
    if op == "C4":
        from .complex_scan_rope.reference import complex_scan_rope_magnitude

        return (complex_scan_rope_magnitude(*(d[k] for k in ("x", "dt", "A", "B", "C", "theta"))),)
    blk = [d[k] for k in ("x", "conv_weight", "conv_bias", "delta", "A", "B", "C", "D", "norm_weight")]
    if op == "C5":
        from .fused_block_forward.reference import fused_block_magnitude

        return (fused_block_magnitude(*blk)["OUT"],)
    from .fused_block_backward.reference import fused_block_grads_magnitude

    return fused_block_grads_magnitude(*blk, d["dy"])


def references(op: str, x: dict) -> tuple:
    """The float64 oracle's outputs (only at small shapes: the oracles are loops that keep every state)."""
    m = _m()
    d = {k: v.double() for k, v in x.items()}
    if op == "C1":
        return (m.forward_chunked_scan(*(d[k] for k in ("u", "delta", "A", "B", "C", "D")), backend="reference"),)
    if op == "C2":
        return m.backward_selective_scan(*(d[k] for k in ("u", "delta", "A", "B", "C", "D", "dy")),
                                         backend="reference")
    if op == "C3":
        return m.mimo_backward(*(d[k] for k in ("x", "dt", "alpha", "B", "C", "mimo_x", "mimo_o", "dy")),
                               backend="reference")
    if op == "C4":
        return (m.complex_scan_rope(*(d[k] for k in ("x", "dt", "A", "B", "C", "theta")), backend="reference"),)
    blk = [d[k] for k in ("x", "conv_weight", "conv_bias", "delta", "A", "B", "C", "D", "norm_weight")]
    if op == "C5":
        return (m.fused_block_forward(*blk, backend="reference"),)
    return m.fused_block_backward(*blk, d["dy"], backend="reference")


def chain_steps(op: str, shape: dict) -> int:
    """The op's ``m`` (:mod:`lethe.kernels.mamba.error_bounds`) at ``shape``."""
    fam = OPS[op]["family"]
    if fam == "scan":
        L, d, n = shape["seq_len"], shape["d_model"], shape["n_state"]
        return eb.scan_forward_steps(L, n) if op == "C1" else eb.scan_backward_steps(L, n, d)
    if fam == "block":
        b, L, d, n, k = (shape[k] for k in SHAPE_KEYS["block"])
        return eb.block_forward_steps(L, n, d, k) if op == "C5" else eb.block_backward_steps(b, L, n, d, k)
    if fam == "mimo":
        b, L, R, H, P, n = (shape[k] for k in SHAPE_KEYS["mimo"])
        return eb.mimo_backward_steps(b, L, n, P, R)
    return eb.rope_scan_steps(shape["seq_len"], shape["n_state"])


def side_bound(side: Side, m: int, dtype: torch.dtype, S: torch.Tensor, val: torch.Tensor) -> torch.Tensor:
    """|side's output - exact| <= (gamma_m(u_arith) + extra_rel) S + u_out |value|: u_out, the rounding of the
    stored result, where the arithmetic is wider than the output (16-bit outputs; C6's float64 evaluation)."""
    u_out = eb.UNIT_ROUNDOFF[dtype] if side.u_arith(dtype) < eb.UNIT_ROUNDOFF[dtype] else 0.0
    return (eb.gamma(m, side.u_arith(dtype)) + side.extra_rel(dtype)) * S + u_out * val.double().abs()


def check(op: str, shape: dict, dtype: torch.dtype, x: dict, impls: dict[str, Side], oracle: bool) -> dict:
    """Every side against ours (``ours_triton``) on the first MAGNITUDE_BATCH batch rows of the timed inputs:
    |a - b| <= bound_a + bound_b elementwise (each side's forward error bound around the same exact value), and,
    when ``oracle``, ours against the float64 oracle within ours' bound. Per output the worst ratio err / bound
    (pass: <= 1) and the scale-relative error max|a - b| / max|b|."""
    xs = batch_slice(op, x, MAGNITUDE_BATCH)
    sh = dict(shape, batch=MAGNITUDE_BATCH)
    m = chain_steps(op, sh)
    S = magnitudes(op, xs)
    outs = {name: side.run(xs, side.setup(xs)) for name, side in impls.items()}
    ours = outs["ours_triton"]
    res: dict = {"m": m, "rows": MAGNITUDE_BATCH, "pairs": {}}

    def compare(name, got, want, bound_got, bound_want):
        per = {}
        for j, (a, b, s) in enumerate(zip(got, want, S, strict=True)):
            if a is None or b is None:
                continue
            err = (a.double() - b.double()).abs()
            bound = bound_got(s, a) + bound_want(s, b)
            per[str(j)] = {"ratio": float((err / bound.clamp_min(1e-300)).max()),
                           "scale_rel": float(err.max() / b.double().abs().max().clamp_min(1e-300))}
        res["pairs"][name] = {"outputs": per, "pass": all(v["ratio"] <= 1.0 for v in per.values())}

    bound_of = lambda side: (lambda s, v: side_bound(side, m + side.extra_steps(sh), dtype, s, v))  # noqa: E731
    for name, got in outs.items():
        if name != "ours_triton":
            compare(name, got, ours, bound_of(impls[name]), bound_of(impls["ours_triton"]))
    if oracle:
        compare("float64_oracle", ours, references(op, xs), bound_of(impls["ours_triton"]),
                lambda s, b: torch.zeros_like(s))
    res["pass"] = all(p["pass"] for p in res["pairs"].values())
    return res
