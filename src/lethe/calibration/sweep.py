"""Threshold calibration: for every thresholded gate, where a correct kernel sits, where the gate trips, where a
real defect sits -- on several trusted operators of different classes.

For a gate G, an operator f and its float64 reference r:

* **honest floor** -- the error a *correct* reduced-precision implementation of f shows on G's probe,
  ``max|out - r| / max|r|`` (the unit in which a uniform multiplicative error eps measures eps);
* **trip point** -- the smallest uniform multiplicative error eps such that ``r * (1 + eps)`` fails G, found by
  geometric bisection between an eps that passes and one that fails (the same ``max|out - r| / S`` unit, since
  a uniform multiplicative error eps has exactly that scaled error);
* **defect onset** -- the scaled error of a realistic defective implementation (an fp16 accumulator, fp16
  intermediates, a dropped term, a recursive running total on a cancellation input);
* **margins** -- trip / floor (how far a correct kernel is from a false alarm) and onset / trip (how far a real
  defect is past the threshold). A margin under :data:`THIN` is reported as thin.

The gate rules are the verifier's tolerance formulas, imported from :mod:`lethe.verifier.tolerance` (never
re-derived here): an output passes when every element is within the gate's tolerance of the float64 reference.
Whether G passes the honest output and fails the defect is recorded as booleans next to the margins, so a
margin is never reported for a gate that does not actually separate the two.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from lethe.verifier import tolerance as tol
from lethe.verifier.probes import CANCEL_BIG, accumulation_values

#: A margin below this factor (two binary orders of magnitude) is reported as thin.
THIN = 4.0
ROWS = 8
N_NATIVE = 4096
#: CMP-03 held-out reduction lengths: a smaller odd length and a longer prime one, as shape polymorphism probes.
HELD_OUT = (1023, 8191)
PRC_LEN = 4099  # the verifier's long-variant length (probes.LONG_LEN)
BLOCK = 64  # chunk length of the honest blocked scan / blocked sum


# ------------------------------------------------------------------------------------------- operators


def _blocked_cumsum(x: torch.Tensor) -> torch.Tensor:
    """A correct chunked scan: in-chunk prefix sums, chunk totals carried across chunks (how GPU scans work)."""
    n = x.shape[-1]
    pad = (-n) % BLOCK
    xp = torch.nn.functional.pad(x, (0, pad))
    chunks = xp.reshape(*x.shape[:-1], -1, BLOCK)
    inner = torch.cumsum(chunks, dim=-1)
    carry = torch.cumsum(inner[..., -1], dim=-1) - inner[..., -1]
    return (inner + carry.unsqueeze(-1)).reshape(*x.shape[:-1], -1)[..., :n]


def _blocked_sum(x: torch.Tensor) -> torch.Tensor:
    return _blocked_cumsum(x)[..., -1]


def _running_total(x: torch.Tensor, dtype: np.dtype) -> torch.Tensor:
    """A recursive (one running total) prefix sum in ``dtype``: numpy's cumsum accumulates sequentially in it."""
    return torch.from_numpy(np.cumsum(x.detach().double().numpy().astype(dtype), axis=-1).astype(np.float64))


def _blocked_matmul(a: list[torch.Tensor]) -> torch.Tensor:
    """A correct tiled matmul: exact-ish K-tile products accumulated tile by tile (a Triton ``tl.dot`` loop)."""
    x, w = a
    acc = torch.zeros((x.shape[0], w.shape[1]), dtype=x.dtype)
    for k in range(0, x.shape[1], BLOCK):
        acc = acc + x[:, k:k + BLOCK] @ w[k:k + BLOCK]
    return acc


def _half_total_of_blocks(x: torch.Tensor, block: int = 1024) -> torch.Tensor:
    """Blocks of ``block`` terms summed in fp32, the block sums added into an fp16 total (a Triton pattern)."""
    acc = torch.zeros(x.shape[:-1], dtype=torch.float16)
    for s in range(0, x.shape[-1], block):
        acc = (acc.float() + x[..., s:s + block].float().sum(-1)).half()
    return acc.float()


def _softmax_fp16(x: torch.Tensor) -> torch.Tensor:
    h = x.half()
    e = torch.exp(h - h.max(dim=-1, keepdim=True).values)
    return (e / _running_total(e, np.float16)[..., -1:].half()).float()


def _layernorm_fp16(x: torch.Tensor) -> torch.Tensor:
    h = x.half()
    n = h.shape[-1]
    mean = (_running_total(h, np.float16)[..., -1:] / n).half()
    d = h - mean
    var = (_running_total(d * d, np.float16)[..., -1:] / n).half()
    return (d / torch.sqrt(var + 1e-5)).float()


def _stable_softmax(x: torch.Tensor) -> torch.Tensor:
    """A hand-written, numerically stable softmax (max-shifted) whose backward is autograd's."""
    e = torch.exp(x - x.max(dim=-1, keepdim=True).values)
    return e / e.sum(dim=-1, keepdim=True)


def _softmax_grad_fp16_saved(a: list[torch.Tensor], g: torch.Tensor) -> torch.Tensor:
    """Softmax backward y * (g - sum(g * y)) from an output saved in fp16 (a common memory saving)."""
    y = torch.softmax(a[0], -1).half().float()
    return y * (g - (g * y).sum(-1, keepdim=True))


def _softmax_grad_detached(a: list[torch.Tensor], g: torch.Tensor) -> torch.Tensor:
    """Softmax backward with the normaliser's term dropped: y * g."""
    return torch.softmax(a[0], -1) * g


def _layernorm_parts(x: torch.Tensor):
    mu = x.mean(-1, keepdim=True)
    rstd = torch.rsqrt(((x - mu) ** 2).mean(-1, keepdim=True) + 1e-5)
    return (x - mu) * rstd, rstd


def _layernorm_grad_fp16_saved(a: list[torch.Tensor], g: torch.Tensor) -> torch.Tensor:
    """Layer-norm backward rstd * (g - mean(g) - xhat * mean(g * xhat)) with xhat saved in fp16."""
    xhat, rstd = _layernorm_parts(a[0])
    xhat = xhat.half().float()
    return rstd * (g - g.mean(-1, keepdim=True) - xhat * (g * xhat).mean(-1, keepdim=True))


def _layernorm_grad_detached(a: list[torch.Tensor], g: torch.Tensor) -> torch.Tensor:
    """Layer-norm backward with mean and rstd treated as constants: rstd * g."""
    return _layernorm_parts(a[0])[1] * g


def _vjp(fn: Callable[[list[torch.Tensor]], torch.Tensor], inputs: list[torch.Tensor],
         g: torch.Tensor) -> torch.Tensor:
    """Autograd's gradient of ``fn`` with respect to its first input for the upstream gradient ``g``."""
    xs = [t.detach().clone().requires_grad_(j == 0) for j, t in enumerate(inputs)]
    (gx,) = torch.autograd.grad(fn(xs), xs[0], g.to(xs[0].dtype))
    return gx.detach()


@dataclass(frozen=True)
class Operator:
    """A trusted operator: its float64 reference, a correct fp32 implementation and realistic defects."""

    name: str
    op_class: str
    ref: Callable[[list[torch.Tensor]], torch.Tensor]
    honest: Callable[[list[torch.Tensor]], torch.Tensor]
    defects: dict[str, Callable[[list[torch.Tensor]], torch.Tensor]] = field(default_factory=dict)
    matmul: bool = False
    #: CMP-02: a correct fp32 forward whose autograd backward is graded (default: ``honest``) and realistic
    #: defective backwards, each ``(inputs, upstream) -> gradient of the first input``
    grad_honest: Callable[[list[torch.Tensor]], torch.Tensor] | None = None
    grad_defects: dict[str, Callable[[list[torch.Tensor], torch.Tensor], torch.Tensor]] = field(default_factory=dict)


OPERATORS: dict[str, Operator] = {
    op.name: op
    for op in (
        Operator("softmax", "softmax", lambda a: torch.softmax(a[0], -1), lambda a: torch.softmax(a[0], -1),
                 {"fp16 intermediates": lambda a: _softmax_fp16(a[0])},
                 grad_honest=lambda a: _stable_softmax(a[0]),
                 grad_defects={"fp16 saved output": _softmax_grad_fp16_saved,
                               "normaliser treated as constant": _softmax_grad_detached}),
        Operator("layernorm", "norm", lambda a: torch.nn.functional.layer_norm(a[0], a[0].shape[-1:]),
                 lambda a: torch.nn.functional.layer_norm(a[0], a[0].shape[-1:]),
                 {"fp16 intermediates": lambda a: _layernorm_fp16(a[0])},
                 grad_defects={"fp16 saved normalised input": _layernorm_grad_fp16_saved,
                               "statistics treated as constants": _layernorm_grad_detached}),
        Operator("row_sum", "reduction", lambda a: a[0].sum(-1), lambda a: _blocked_sum(a[0]),
                 {"fp16 accumulator": lambda a: _running_total(a[0], np.float16)[..., -1],
                  "fp16 total of fp32 block sums": lambda a: _half_total_of_blocks(a[0]),
                  "recursive fp32 total": lambda a: _running_total(a[0], np.float32)[..., -1]}),
        Operator("cumsum", "scan", lambda a: torch.cumsum(a[0], -1), lambda a: _blocked_cumsum(a[0]),
                 {"fp16 accumulator": lambda a: _running_total(a[0], np.float16),
                  "recursive fp32 total": lambda a: _running_total(a[0], np.float32)}),
        Operator("matmul", "matmul", lambda a: a[0] @ a[1], _blocked_matmul,
                 {"dropped last k term": lambda a: a[0][:, :-1] @ a[1][:-1],
                  "fp16 accumulator": lambda a: _matmul_running(a, np.float16),
                  "recursive fp32 total": lambda a: _matmul_running(a, np.float32)},
                 matmul=True,
                 grad_defects={"fp16 accumulator in dX = G W^T": lambda a, g: _matmul_running(
                     [g, a[1].t()], np.float16)}),
    )
}


def _matmul_running(a: list[torch.Tensor], dtype) -> torch.Tensor:
    """x @ w with one running total per output element in ``dtype`` (products formed in float64, then cast)."""
    prods = a[0].double().unsqueeze(-1) * a[1].double().unsqueeze(0)  # (M, K, N)
    return _running_total(prods.movedim(1, -1), dtype)[..., -1]


# ---------------------------------------------------------------------------------------------- inputs


def make_inputs(op: Operator, kind: str, n: int, seed: int) -> list[torch.Tensor]:
    """Float64 inputs of reduction length n: ``randn``, ``positive`` (same sign), ``cancel``, ``ones`` or ``accum``."""
    g = torch.Generator().manual_seed(seed)
    shape = (ROWS, n)
    if kind == "randn":
        x = torch.randn(shape, generator=g, dtype=torch.float64)
    elif kind == "positive":
        x = torch.rand(shape, generator=g, dtype=torch.float64) + 0.5
    elif kind == "cancel":
        x = torch.rand(shape, generator=g, dtype=torch.float64) + 0.5
        big = CANCEL_BIG  # the verifier's cancellation construction (probes.cancellation_values)
        x[..., 0], x[..., -1] = big, -big
    elif kind == "ones":
        x = torch.ones(shape, dtype=torch.float64)
    elif kind == "accum":
        x = accumulation_values(shape)  # the verifier's PRC-02 construction (probes.accumulation_values)
    else:
        raise ValueError(kind)
    if not op.matmul:
        return [x]
    w = {"randn": lambda: torch.randn((n, 16), generator=g, dtype=torch.float64),
         "positive": lambda: torch.rand((n, 16), generator=g, dtype=torch.float64) + 0.5,
         "cancel": lambda: torch.ones((n, 16), dtype=torch.float64),
         "ones": lambda: torch.ones((n, 16), dtype=torch.float64),
         "accum": lambda: torch.ones((n, 16), dtype=torch.float64)}[kind]()
    return [x, w]


# ----------------------------------------------------------------------------------------------- gates


@dataclass(frozen=True)
class Gate:
    """A thresholded gate as the calibration exercises it: its probe inputs, dtype, lengths and tolerance."""

    gate_id: str
    rationale: str
    kind: str
    dtype: str
    ops: tuple[str, ...]
    lengths: Callable[[int], tuple[int, ...]]
    tolerance: Callable[[np.ndarray, np.ndarray, int], np.ndarray]
    #: defects meaningful on this probe (None = all): on the cancellation probe a recursive fp32 total is an
    #: honest order (the bound is the worst case of any fp32 order), so only narrower totals count there
    defects: tuple[str, ...] | None = None
    #: graded on the gradient of the first input (CMP-02) rather than on the forward output
    grad: bool = False


def _value_tol(dtype):
    return lambda ref, x, n: tol.value_tol(ref, dtype, n)


def _ord01_tol(ref, x, n):
    return np.full(ref.shape, tol.ord01_bound(tol.output_scale(ref), "float32", n))


def _prc02_bracket_tol(ref, x, n):
    # sum|terms| as the verifier measures it: the reference (a row sum, or a matmul with ones) on |x|
    terms = tol.output_scale(np.abs(x).sum(axis=-1))
    return tol.prc02_bracket_tol(ref, terms, "float16", n)


def _grad_tol(ref, x, n):
    return tol.grad_tol(ref, "float32", n)


def _ord03_tol(ref, x, n):
    terms = float(np.abs(x).sum(axis=-1).max())
    return tol.ord03_bound(ref, terms, "float32", n)


ALL_OPS = tuple(OPERATORS)
GATES: dict[str, Gate] = {
    g.gate_id: g
    for g in (
        Gate("CMP-01", "value agreement, scale-aware tolerance", "randn", "float32", ALL_OPS,
             lambda n: (n,), _value_tol("float32")),
        Gate("CMP-03", "same value tolerance at held-out shapes", "randn", "float32", ALL_OPS,
             lambda n: (n, *HELD_OUT), _value_tol("float32")),
        Gate("ORD-01", "reduction-order bound ORD_K*eps*sqrt(N)*scale on same-sign inputs", "positive", "float32",
             ("row_sum", "cumsum", "matmul"), lambda n: (n,), _ord01_tol),
        Gate("ORD-03", "any-order fp32 bound gamma_N*sum|terms| on a cancellation input", "cancel", "float32",
             ("row_sum", "cumsum", "matmul"), lambda n: (n,), _ord03_tol,
             defects=("fp16 accumulator", "dropped last k term")),
        Gate("CMP-02", "gradient tolerance with the backward's N-term reductions", "randn", "float32",
             ("softmax", "layernorm", "matmul"), lambda n: (n,), _grad_tol, grad=True),
        Gate("PRC-02", "fp16 inputs need a wider accumulator (ones, N > 2048)", "ones", "float16",
             ("row_sum", "cumsum", "matmul"), lambda n: (PRC_LEN,), _value_tol("float16")),
        Gate("PRC-02 blocks", "fp16 inputs need an fp32 total (bracketed rows, fp32 block sums)", "accum",
             "float16", ("row_sum", "matmul"), lambda n: (PRC_LEN,), _prc02_bracket_tol),
    )
}


def _run(fn, inputs64: list[torch.Tensor], dtype: str) -> np.ndarray:
    tdt = {"float32": torch.float32, "float16": torch.float16}[dtype]
    cast = [t.to(tdt) for t in inputs64]
    if dtype == "float16":
        # fp16 storage, fp32 arithmetic: the correct kernel for fp16 inputs widens before accumulating
        out = fn([t.float() for t in cast]).to(tdt)
    else:
        out = fn(cast)
    return out.double().numpy()


def _run_defect(fn, inputs64: list[torch.Tensor], dtype: str) -> np.ndarray:
    """A defect emulates its own narrow arithmetic; its output is stored in the gate dtype like any kernel's."""
    tdt = {"float32": torch.float32, "float16": torch.float16}[dtype]
    return fn([t.float() for t in inputs64]).to(tdt).double().numpy()


@dataclass
class Probe:
    n: int
    x: np.ndarray
    ref: np.ndarray
    tol: np.ndarray
    inputs64: list[torch.Tensor]


def probes(gate: Gate, op: Operator, seed: int) -> list[Probe]:
    """A gradient gate's probes carry the upstream gradient as their last input (float64, seeded, randn)."""
    out = []
    for i, n in enumerate(gate.lengths(N_NATIVE)):
        inputs = make_inputs(op, gate.kind, n, seed + i)
        # the reference sees the inputs as rounded to the gate dtype, as the candidate does
        rounded = [t.to({"float32": torch.float32, "float16": torch.float16}[gate.dtype]).double() for t in inputs]
        if gate.grad:
            gen = torch.Generator().manual_seed(seed + 1000 + i)
            shape = op.ref(rounded).shape
            rounded.append(torch.randn(shape, generator=gen, dtype=torch.float64).float().double())
            ref = _vjp(op.ref, rounded[:-1], rounded[-1]).numpy()
            x = rounded[0].numpy()
            out.append(Probe(n, x, ref, gate.tolerance(ref, x, n), rounded))
            continue
        ref = op.ref(rounded).numpy()
        x = rounded[0].numpy()
        out.append(Probe(n, x, ref, gate.tolerance(ref, x, n), rounded))
    return out


def _max_abs(ref: np.ndarray) -> float:
    a = np.abs(np.asarray(ref, dtype=np.float64))
    a = a[np.isfinite(a)]
    return float(a.max()) if a.size else 0.0


def scaled_error(outs: list[np.ndarray], ps: list[Probe]) -> float:
    """max|out - ref| / max|ref|: the unit in which a uniform multiplicative error eps measures exactly eps.

    This is a unit of measurement for the table, not a tolerance: the gates' own scale (whatever
    ``tolerance.output_scale`` defines) only enters through their tolerances.
    """
    return max(float(np.max(np.abs(o - p.ref))) / max(_max_abs(p.ref), tol.TINY["float64"])
               for o, p in zip(outs, ps, strict=True))


def passes(outs: list[np.ndarray], ps: list[Probe]) -> bool:
    return all(bool(np.all(np.abs(o - p.ref) <= p.tol)) for o, p in zip(outs, ps, strict=True))


def trip_point(ps: list[Probe], lo: float = 1e-12, hi: float = 1.0, rel: float = 1e-3) -> dict[str, float]:
    """Smallest uniform multiplicative error eps with ``ref * (1 + eps)`` failing the gate (geometric bisection)."""
    def ok(eps: float) -> bool:
        return passes([p.ref * (1.0 + eps) for p in ps], ps)

    if not ok(lo) or ok(hi):
        raise ValueError(f"trip point not bracketed by [{lo}, {hi}]")
    while hi / lo > 1.0 + rel:
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return {"last_pass_eps": lo, "first_fail_eps": hi, "trip_point": math.sqrt(lo * hi)}


def calibrate_one(gate: Gate, op: Operator, seed: int) -> dict[str, Any]:
    """Floor, trip point, every defect's onset and the margins for one (gate, operator)."""
    ps = probes(gate, op, seed)
    if gate.grad:
        fwd = op.grad_honest or op.honest
        honest = [_vjp(fwd, [t.float() for t in p.inputs64[:-1]], p.inputs64[-1].float()).double().numpy()
                  for p in ps]
        candidates = op.grad_defects
    else:
        honest = [_run(op.honest, p.inputs64, gate.dtype) for p in ps]
        candidates = op.defects
    floor = scaled_error(honest, ps)
    trip = trip_point(ps)
    defects = []
    for name, fn in sorted(candidates.items()):
        if gate.defects is not None and name not in gate.defects:
            continue
        if gate.grad:
            outs = [fn([t.float() for t in p.inputs64[:-1]], p.inputs64[-1].float()).double().numpy() for p in ps]
        else:
            outs = [_run_defect(fn, p.inputs64, gate.dtype) for p in ps]
        defects.append({"defect": name, "onset": scaled_error(outs, ps), "fails_gate": not passes(outs, ps)})
    caught = [d for d in defects if d["fails_gate"]]
    onset = min((d["onset"] for d in caught), default=None)
    row = {
        "gate_id": gate.gate_id, "operator": op.name, "op_class": op.op_class, "rationale": gate.rationale,
        "probe": gate.kind, "dtype": gate.dtype, "lengths": list(gate.lengths(N_NATIVE)),
        "honest_floor": floor, "honest_passes_gate": passes(honest, ps),
        "trip_point": trip["trip_point"], "trip_sweep": trip,
        "defects": defects, "defect_onset": onset,
        "onset_defect": next((d["defect"] for d in caught if d["onset"] == onset), None),
        "margin_trip_over_floor": trip["trip_point"] / floor if floor > 0 else math.inf,
        "margin_onset_over_trip": onset / trip["trip_point"] if onset is not None else None,
    }
    row["clean_separation"] = bool(row["honest_passes_gate"] and onset is not None
                                   and floor < trip["trip_point"] < onset)
    m = [row["margin_trip_over_floor"], row["margin_onset_over_trip"]]
    row["thin_margin"] = any(v is None or v < THIN for v in m)
    return row


def sweep(seed: int = 20260829, gates: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """Every (gate, operator) pair, in a fixed order."""
    rows = []
    for gid in gates or tuple(GATES):
        gate = GATES[gid]
        for name in gate.ops:
            rows.append(calibrate_one(gate, OPERATORS[name], seed))
    return rows
