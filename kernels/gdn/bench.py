"""What every GDN benchmark shares: the members fla implements and how each side is called, the inputs drawn on
the device, the FLOP and byte counts of the chunked algorithm (docs/gdn.md §2), and the correctness check a
cell passes before it is timed.

The fla comparison's study (:mod:`lethe.kernels.gdn.fla_compare`), the scalar-gate benchmark
(:mod:`lethe.kernels.gdn.scalar_gate_bench`), the drivers (experiments/gdn/intra_precision.py, triton_launch_sweep.py),
:mod:`lethe.kernels.gdn.native.kernel_profile` and the renderers (:mod:`lethe.kernels.gdn.fla_bench`, the scalar-gate
table) import these; timing itself is :mod:`lethe.perf.timing`, floors :mod:`lethe.perf.roofline`.

Conventions read from fla 0.6.0: every op takes ``[B, T, H, D]``, gates are natural-log decays, ``scale``
multiplies q (passed explicitly). ``chunk_gated_delta_rule`` and ``chunk_simple_gla(g=...)`` are refused on
Hopper with Triton < 3.7.1 (fla #640) and run under :func:`bypass` (``guarded`` below).
"""

from __future__ import annotations

import contextlib

# member -> fla op, guarded by #640 on Hopper + Triton < 3.7.1, leaves (in call order), gate shape, erase?
MEMBERS = {
    "gdn": dict(fla_op="fla.ops.gdn2.chunk_gdn2", guarded=False, leaves=("q", "k", "v", "g", "b", "w"),
                scalar_gate=False, erase=True, ours_member="gdn"),
    "sgdn": dict(fla_op="fla.ops.gated_delta_rule.chunk_gated_delta_rule", guarded=True,
                 leaves=("q", "k", "v", "g", "beta"), scalar_gate=True, erase=True, ours_member="kda"),
    "kda": dict(fla_op="fla.ops.kda.chunk_kda", guarded=False, leaves=("q", "k", "v", "g", "beta"),
                scalar_gate=False, erase=True, ours_member="kda"),
    "gla": dict(fla_op="fla.ops.gla.chunk_gla", guarded=False, leaves=("q", "k", "v", "g"), scalar_gate=False,
                erase=False, ours_member="gla"),
    "ssd": dict(fla_op="fla.ops.simple_gla.chunk_simple_gla", guarded=True, leaves=("q", "k", "v", "g"),
                scalar_gate=True, erase=False, ours_member="ssd"),
    "la": dict(fla_op="fla.ops.simple_gla.chunk_simple_gla", guarded=False, leaves=("q", "k", "v"),
               scalar_gate=False, erase=False, ours_member="la"),
}
# chunk_family sends every member through the one ChunkGDNFunction, whose "native" branch calls
# NATIVE_BACKENDS["default"] whatever the gates are (K1 has an erase and a no-erase variant), so the native
# backend covers every member; kept as a set so that a backend limited to some members only edits this line.
NATIVE_MEMBERS = frozenset(MEMBERS)


def _width(name: str, member: str, K: int, V: int) -> int:
    """Elements per (token, head) of one input tensor of ``member``."""
    if name in ("q", "k", "b"):
        return K
    if name in ("v", "w"):
        return V
    if name == "g":
        return 1 if MEMBERS[member]["scalar_gate"] else K
    if name == "beta":
        return 1
    raise KeyError(name)


def chunk_flops(erase: bool, C: int, K: int, V: int) -> dict:
    """Matrix-product FLOPs (2mnk each) of one chunk of one head, forward and backward, as written in
    docs/gdn.md §2. Elementwise work (decays, the chunk cumsum) is O(C(K+V)) and not counted; recomputing a
    forward quantity in the backward (our scan recomputes P) is an implementation choice and not counted either.

    Forward, per chunk: A = X Kg^T (2C^2K), T = (I + A)^{-1} by substitution (C^3/3 multiply-adds: 2C^3/3),
    W = T X (2C^2K), U~ = T U (2C^2V), delta = U~ - W S (2CKV), S += Kend^T delta (2CKV),
    P = Qg Kg^T (2C^2K), o = Qg S + P delta (2CKV + 2C^2V). Without erase: P, the state update and o only.
    Backward: the scan's d delta = P^T dO + Kend dS (2C^2V + 2CKV), dS += Qg^T dO (2CKV), dS -= W^T d delta
    (2CKV); per chunk dP = dO delta^T (2C^2V), d(qG) = dO S^T and dKend = delta dS^T (2CKV each), dW = -d delta S^T
    (2CKV), dT = dW X^T + d delta U^T (2C^2K + 2C^2V), dX = T^T dW (2C^2K), dU = T^T d delta (2C^2V),
    dA = -T^T dT T^T (4C^3), and the pairwise products dP -> (dQg, dKg), dA -> (dX, dKg) (4 x 2C^2K).
    """
    if erase:
        fwd = 6 * C * C * K + 4 * C * C * V + 6 * C * K * V + (2 * C**3) // 3
        bwd = 8 * C * C * V + 12 * C * K * V + 12 * C * C * K + 4 * C**3
    else:
        fwd = 2 * C * C * K + 2 * C * C * V + 4 * C * K * V
        bwd = 4 * C * C * V + 8 * C * K * V + 4 * C * C * K
    return {"fwd": fwd, "bwd": bwd}


def chunk_counts(member: str, B: int, H: int, T: int, K: int, V: int, C: int = 64, in_bytes: int = 2,
                 state_bytes: int = 4) -> dict:
    """FLOPs and minimal HBM bytes of forward and backward for a whole problem.

    Bytes, minimal ("io"): the forward reads every input once and writes o; the backward reads every input and
    dO once and writes every input gradient once, all at ``in_bytes`` per element. Nothing else has to touch
    HBM if the chunk states are recomputed on chip. ``bwd_bytes_with_states`` adds the per-chunk state S_n read
    once and the state gradient dS_n written and read once, at ``state_bytes`` (what a two-kernel backward like
    ours and fla's moves at least). T is padded to a chunk multiple for the FLOPs (the kernels process whole
    chunks); bytes use the real T.
    """
    spec = MEMBERS[member]
    NT = -(-T // C)
    heads = B * H
    per = chunk_flops(spec["erase"], C, K, V)
    in_w = sum(_width(n, member, K, V) for n in spec["leaves"])
    tok = B * T * H
    fwd_bytes = tok * (in_w + V) * in_bytes
    bwd_bytes = tok * (in_w + V + in_w) * in_bytes
    states = heads * NT * K * V * state_bytes * 3
    return {"member": member, "B": B, "H": H, "T": T, "K": K, "V": V, "C": C, "chunks": heads * NT,
            "fwd_flops": heads * NT * per["fwd"], "bwd_flops": heads * NT * per["bwd"],
            "fwd_bytes": fwd_bytes, "bwd_bytes": bwd_bytes, "bwd_bytes_with_states": bwd_bytes + states,
            "in_bytes": in_bytes}


def bench_batch(head_tokens: int, H: int, T: int) -> int:
    """B so that B * H * T is the requested number of head-tokens (at least 1)."""
    return max(1, head_tokens // (H * T))


def bench_grid(members, dvs, heads, head_tokens, lengths) -> list[tuple]:
    """The timing sweep's cells as (member, V, T, B, H, head_tokens), in run order: d_v descending, then heads,
    member, head-tokens and length as given. B comes from :func:`bench_batch`, so where H * T exceeds a requested
    head-token count B stays at 1 and two grid points can name one shape: it is listed once, under the first
    point that reaches it. One value of heads and head-tokens gives the sweep of one (d_v, member) after another."""
    out, seen = [], set()
    for V in sorted(dvs, reverse=True):
        for H in heads:
            for m in members:
                for ht in head_tokens:
                    for T in lengths:
                        B = bench_batch(ht, H, T)
                        if (m, V, T, B, H) not in seen:
                            seen.add((m, V, T, B, H))
                            out.append((m, V, T, B, H, ht))
    return out


def fla_fn(member: str):
    """The fla op of ``member`` as ``f(leaves: dict, scale) -> o`` (fla must be importable)."""
    import importlib

    mod, _, name = MEMBERS[member]["fla_op"].rpartition(".")
    op = getattr(importlib.import_module(mod), name)
    if member == "gdn":
        return lambda x, s: op(x["q"], x["k"], x["v"], x["g"], x["b"], x["w"], scale=s)[0]
    if member in ("sgdn", "kda"):
        return lambda x, s: op(x["q"], x["k"], x["v"], x["g"], x["beta"], scale=s)[0]
    if member == "gla":
        return lambda x, s: op(x["q"], x["k"], x["v"], x["g"], scale=s)[0]
    if member == "ssd":
        return lambda x, s: op(x["q"], x["k"], x["v"], g=x["g"], scale=s)[0]
    if member == "la":
        return lambda x, s: op(x["q"], x["k"], x["v"], g=None, scale=s)[0]
    raise KeyError(member)


def ours_fn(member: str, backend: str, chunk: int, **fwd_options):
    """Our chunk_family on ``member`` as ``f(leaves, scale) -> o`` (sgdn: the kda member with its per-head g,
    which chunk_family broadcasts over K itself and whose gradient it sums in float32 before rounding).
    ``fwd_options`` (dot_precision, wy_inverse) go to chunk_family unchanged."""
    from .autograd import chunk_family

    m = MEMBERS[member]["ours_member"]

    def f(x, s):
        g = x.get("g")
        b = x.get("beta") if m == "kda" else x.get("b")
        return chunk_family(x["q"], x["k"], x["v"], g, b, x.get("w"), member=m, scale=s, chunk=chunk,
                            backend=backend, **fwd_options)[0]

    return f


def oracle_fn(member: str):
    """float64 output of ``member`` from its own definition (lethe.kernels.gdn.reference)."""
    from . import reference as R

    def f(x, s):
        q, k, v = x["q"], x["k"], x["v"]
        if member == "sgdn":
            g = x["g"].unsqueeze(-1).expand(*x["g"].shape, q.shape[-1])
            return R.kda(q, k, v, g, x["beta"], s)[0]
        b = x.get("beta") if member == "kda" else x.get("b")
        return R.member_reference(member, q, k, v, x.get("g"), b, x.get("w"), scale=s)

    return f


def grad_name(n: str) -> str:
    """The gradient's name in result rows (dq for q)."""
    return "d" + n


def bypass(active: bool):
    """fla 0.6.0's #640 guard lifted while active (``lethe.foreign.fla640.bypass``); a null context otherwise."""
    if not active:
        return contextlib.nullcontext()
    from lethe.foreign import fla640

    return fla640.bypass()


def bench_inputs(member: str, B: int, T: int, H: int, K: int, V: int, dtype, g_dtype, seed: int, device: str):
    """The ladder's distributions drawn on the device: L2-normalised keys, g = logsigmoid(N + 2), b in [0, 2],
    w and beta in [0, 1]; leaves require grad. Returns (leaves, do)."""
    import torch

    gen = torch.Generator(device=device).manual_seed(seed)
    rn = lambda *s: torch.randn(*s, generator=gen, device=device)  # noqa: E731
    ru = lambda *s: torch.rand(*s, generator=gen, device=device)  # noqa: E731
    spec = MEMBERS[member]
    x = {"q": rn(B, T, H, K), "k": torch.nn.functional.normalize(rn(B, T, H, K), dim=-1), "v": rn(B, T, H, V)}
    if "g" in spec["leaves"]:
        gs = (B, T, H) if spec["scalar_gate"] else (B, T, H, K)
        x["g"] = torch.nn.functional.logsigmoid(rn(*gs) + 2.0)
    if "b" in spec["leaves"]:
        x["b"] = 2.0 * ru(B, T, H, K)
    if "w" in spec["leaves"]:
        x["w"] = ru(B, T, H, V)
    if "beta" in spec["leaves"]:
        x["beta"] = ru(B, T, H)
    leaves = {n: x[n].to(g_dtype if n == "g" else dtype).requires_grad_() for n in spec["leaves"]}
    do = rn(B, T, H, V).to(dtype)
    return leaves, do


@contextlib.contextmanager
def count_native_k1():
    """Counts calls of the native K1's host wrapper while active. The native backend silently keeps the torch
    scan for CPU or float64 inputs, so a count of zero is how a row tells that the CuTe kernel did not run."""
    counter = {"calls": None}
    try:
        from .native import api
        orig = api.native_reverse_state_scan
    except (ImportError, AttributeError):  # the wrapper moved: report "unknown" rather than fail the cell
        api = None
    if api is None:
        yield counter
        return
    counter["calls"] = 0

    def counted(*args, **kwargs):
        counter["calls"] += 1
        return orig(*args, **kwargs)

    api.native_reverse_state_scan = counted
    try:
        yield counter
    finally:
        api.native_reverse_state_scan = orig


def check_row(base: dict, vs_ours: dict, nonfinite_by_impl: dict, vs_slice: dict, gate: float) -> dict:
    """The ``bench_check`` row of a cell from its error dicts.

    ``vs_ours``: {impl: {tensor: max|impl - ours| / max|ours|}} for every impl other than ours;
    ``vs_slice``: {impl: {tensor: error vs the float64 slice}}, or {"skipped"/"error": why};
    ``gate``: the worst relative error an impl may show and still be timed (0: only non-finite values gate).
    """
    row = {"kind": "bench_check", **base}
    by = {}
    for impl, errs in vs_ours.items():
        by[impl] = {"impl": impl, "errors": errs, "worst_rel_err": max(errs.values()),
                    "worst_tensor": max(errs, key=errs.get), "metric": "max|impl - ours| / max|ours|"}
    if by:
        row["vs_ours"] = next(iter(by.values()))  # the first other impl (fla): the field part (a)'s readers know
        row["vs_ours_by_impl"] = by
    row["nonfinite"] = dict(nonfinite_by_impl)
    if "skipped" in vs_slice or "error" in vs_slice:
        row["vs_float64_slice"] = dict(vs_slice)
    else:
        row["vs_float64_slice"] = {impl: {"errors": e, "worst_rel_err": max(e.values()),
                                          "worst_tensor": max(e, key=e.get)} for impl, e in vs_slice.items()}
    row["gate"] = {"max_rel": gate, "failed": gate_failures(row, gate)}
    return row


def gate_failures(check: dict, gate: float) -> dict:
    """{impl: why it must not be timed}. The float64 slice judges every impl it covers; where there is none,
    impls other than ours are judged against ours (ours itself is validated by the ladder and the CPU tests)."""
    out = {}
    sl = check.get("vs_float64_slice") or {}
    have_slice = not ("skipped" in sl or "error" in sl)
    for impl, n in check.get("nonfinite", {}).items():
        if n:
            out[impl] = f"{n} non-finite values in o or the gradients"
            continue
        if not gate:
            continue
        if have_slice and impl in sl:
            e = sl[impl]
            if e["worst_rel_err"] > gate:
                out[impl] = f"{e['worst_rel_err']:.2e} ({e['worst_tensor']}) vs the float64 slice > {gate:g}"
        elif impl in check.get("vs_ours_by_impl", {}):
            e = check["vs_ours_by_impl"][impl]
            if e["worst_rel_err"] > gate:
                out[impl] = f"{e['worst_rel_err']:.2e} ({e['worst_tensor']}) vs ours > {gate:g}"
    return out


def rounded_inputs(member: str, B: int, T: int, H: int, K: int, V: int, seed: int, dtype, device,
                   g_dtype=None) -> tuple[dict, object]:
    """The ladder's float64 masters (:func:`lethe.kernels.gdn.inputs.make_inputs`, drawn on the CPU) for
    ``member``'s leaves, rounded to ``dtype`` (g to ``g_dtype``, default ``dtype``) on ``device``, and the
    cotangent dO rounded the same way. Every implementation of a correctness cell receives these values."""
    from .inputs import make_inputs

    x = make_inputs(B, T, H, K, V, seed, "cpu", member="ssd" if MEMBERS[member]["scalar_gate"] else member)
    low = {n: x[n].to(g_dtype or dtype if n == "g" else dtype).to(device) for n in MEMBERS[member]["leaves"]}
    return low, x["do"].to(dtype).to(device)


def parse_cells(text: str) -> list[tuple[str, int, int]]:
    """``member:d_v:T,...`` -> [(member, d_v, T), ...] (the ``--cells`` option of the GDN drivers)."""
    cells = []
    for item in text.split(","):
        parts = item.split(":")
        if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
            raise SystemExit(f"--cells: {item!r} is not member:d_v:T")
        cells.append((parts[0], int(parts[1]), int(parts[2])))
    return cells
