"""The twelve gates: pure functions of (probe plan + reference results, candidate results, profile).

Nothing here executes candidate or reference code; every gate reads arrays and facts that the two sandboxed
processes returned. Each gate is one function whose docstring states the property and why it matters. A probe
the reference could not run is "na" for its gate (the reference decides what is valid); a probe the candidate
could not run for a reason that is not the candidate's fault (Triton interpreter limitation, no CUDA here, bf16
under the interpreter) is "na" too, with the reason; only a real disagreement is a "fail".
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from lethe.verifier import tolerance as tol
from lethe.verifier.battery import GATE_IDS
from lethe.verifier.profiles import Profile


@dataclass
class GateResult:
    status: str  # pass | fail | na | error
    reason: str = ""
    evidence: dict = field(default_factory=dict)
    seed: int = 0

    def to_row(self) -> dict:
        return {"status": self.status, "reason": self.reason,
                "evidence": json.dumps(_clean(self.evidence), sort_keys=True, allow_nan=False), "seed": self.seed}


@dataclass
class Bundle:
    """Everything a gate may read. ``ref``/``cand`` are the two processes' JSON results."""

    ref: dict
    ref_arrays: dict[str, np.ndarray]
    cand: dict
    cand_arrays: dict[str, np.ndarray]
    profile: Profile
    seed: int
    device: str = "cpu"
    constants: tol.Constants = tol.DEFAULT
    # Comparisons shared by the profiles and gates graded from one candidate run (verify_profiles): a
    # comparison's result is a function of (reference, output, dtype, tolerance, alternative reference,
    # NaN-skipping), so it is stored under exactly those (see compare_key) and computed once. Gates never
    # mutate what they read from it.
    memo: dict = field(default_factory=dict)
    # Values that depend on the reference alone (tolerances, floors, whether an output holds NaN), kept with the
    # reference between candidates graded against it (api.grade: a reward loop's steady state grades many
    # candidates of one cached reference); ``None`` keeps them in ``memo``, for this grading only. Computed by
    # the same code either way, so where they are kept never changes a result; gates never mutate them.
    ref_memo: RefMemo | None = None

    def ref_value(self, key: tuple, compute: Callable[[], Any]) -> Any:
        """``compute()``, a function of the reference's arrays and results alone, memoised under ``key`` with the
        reference (``ref_memo``), or in ``memo`` where there is none or it is full."""
        store = self.ref_memo if self.ref_memo is not None else self.memo
        if key in store:
            return store[key]
        if key in self.memo:
            return self.memo[key]
        v = compute()
        if store is self.memo or not store.put(key, v):
            self.memo[key] = v
        return v

    def probes(self, gate: str) -> list[dict]:
        return [p for p in self.ref.get("probes", []) if gate in p["gates"]]

    def cprobe(self, pid: str) -> dict | None:
        return self.cand.get("probes", {}).get(pid)

    def compare_key(self, *what) -> tuple:
        """Memo key of a comparison of the reference array ``what[0]`` (a key of ref_arrays) described by
        ``what`` (tolerance, output, alternative...). The profile enters compare() only through
        allow_nan_nonpropagation, and only where the reference rounded to the dtype is NaN; rounding never
        makes a NaN, so a reference without NaN gets one key for every profile."""
        skip_nan = self.profile.allow_nan_nonpropagation and self.ref_has_nan(what[0])
        return ("cmp", self.constants, *what, skip_nan)

    def ref_has_nan(self, name: str) -> bool:
        def has_nan() -> bool:
            r = self.ref_arrays[name]
            if not np.issubdtype(r.dtype, np.floating):
                return False
            if r.size >= TORCH_COMPARE_MIN_NUMEL:
                # a sum that is not NaN proves there is no NaN (one read pass, no mask); inf - inf needs
                # the mask
                rt = _as_t(r)
                return math.isnan(float(rt.sum())) and bool(torch.isnan(rt).any())
            return bool(np.isnan(r).any())

        return self.ref_value(("has_nan", name), has_nan)


class RefMemo(dict):
    """A reference's memo of reference-only values (:attr:`Bundle.ref_memo`), holding at most ``max_bytes`` of
    arrays: a value that would pass the cap is not kept (the grading that needed it keeps it for itself)."""

    def __init__(self, max_bytes: int):
        super().__init__()
        self.max_bytes = int(max_bytes)
        self.nbytes = 0

    def put(self, key: tuple, value: Any) -> bool:
        size = value.nbytes if isinstance(value, np.ndarray) else 0
        if self.nbytes + size > self.max_bytes:
            return False
        self[key] = value
        self.nbytes += size
        return True


def _clean(v: Any) -> Any:
    """JSON-safe, deterministic evidence: floats rounded to 6 significant digits, non-finite as strings."""
    if isinstance(v, dict):
        return {str(k): _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    if isinstance(v, (np.floating, float)):
        f = float(v)
        return float(f"{f:.6g}") if math.isfinite(f) else str(f)
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, np.bool_):
        return bool(v)
    return v


# ----------------------------------------------------------------------------------------------------------
# comparison helpers


_TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
                 "float64": torch.float64}


def round_to(a: np.ndarray, dtype: str) -> np.ndarray:
    """The float64 reference rounded to the contract dtype (so that overflow/underflow of the dtype count)."""
    return _round_t(torch.from_numpy(np.asarray(a, dtype=np.float64)), dtype).numpy()


def compare(ref: np.ndarray, cand: np.ndarray, dtype: str, tol_arr: np.ndarray | float, profile: Profile,
            alt_ref: np.ndarray | None = None) -> dict:
    """Elementwise comparison with IEEE non-finite semantics; returns a JSON-able summary with ``ok``.

    Non-finite values are compared by class (NaN, +Inf, -Inf) after rounding the reference to ``dtype``; a
    position where both agree is not a value mismatch. Under a profile that allows NaN non-propagation the
    positions where the reference is NaN are not graded. ``alt_ref`` (flush-to-zero reference) is accepted
    elementwise as an alternative when given.
    """
    ref = np.asarray(ref)
    cand = np.asarray(cand)
    if ref.shape != cand.shape:
        return {"ok": False, "why": "shape", "ref_shape": list(ref.shape), "cand_shape": list(cand.shape)}
    if not np.issubdtype(ref.dtype, np.floating):
        bad = ref != cand
        return {"ok": not bool(bad.any()), "why": "integer mismatch" if bad.any() else "",
                "n_bad": int(bad.sum()), "first_bad": np.argwhere(bad)[:5].tolist()}
    if ref.size >= TORCH_COMPARE_MIN_NUMEL:
        return _compare_torch(ref, cand, dtype, tol_arr, profile, alt_ref)
    return _compare_numpy(ref, cand, dtype, tol_arr, profile, alt_ref)


# Large outputs are compared with torch (the same IEEE operations, spread over the host's cores: a corpus audit
# compares millions of elements per probe); small ones with numpy, whose per-call overhead is far lower. Both
# return identical summaries (tests/verifier/test_compare_semantics.py): counts and maxima are exact, so the
# result does not depend on the backend or the thread count.
TORCH_COMPARE_MIN_NUMEL = 1 << 18


def _summary(n, n_bad, max_err, max_ratio, n_new, n_lost, n_wrong, n_agree) -> dict:
    return {"ok": n_bad == 0, "n": int(n), "n_bad": int(n_bad), "max_abs_err": float(max_err),
            "max_err_over_tol": float(max_ratio), "new_nonfinite": int(n_new), "lost_nonfinite": int(n_lost),
            "wrong_nonfinite": int(n_wrong), "agreeing_nonfinite": int(n_agree)}


def _compare_numpy(ref, cand, dtype, tol_arr, profile, alt_ref) -> dict:
    r = ref.astype(np.float64)
    c = cand.astype(np.float64)
    rc = round_to(r, dtype)
    rnan, cnan = np.isnan(rc), np.isnan(c)
    rinf, cinf = np.isinf(rc), np.isinf(c)
    rfin, cfin = ~(rnan | rinf), ~(cnan | cinf)
    skip = rnan if profile.allow_nan_nonpropagation else np.zeros_like(rnan)
    agree_nf = (rnan & cnan) | (rinf & cinf & (np.sign(rc) == np.sign(c)))
    new_nf = rfin & ~cfin & ~skip
    lost_nf = ~rfin & cfin & ~skip
    wrong_nf = ~rfin & ~cfin & ~agree_nf & ~skip
    both = rfin & cfin & ~skip
    t = np.broadcast_to(np.asarray(tol_arr, dtype=np.float64), r.shape)
    tsafe = np.maximum(t, 1e-300)
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.where(both, np.abs(c - r), 0.0)
        bad_val = both & (err > t)
        ratio = np.where(both, err / tsafe, 0.0)
        if alt_ref is not None:
            a = np.asarray(alt_ref, dtype=np.float64)
            bad_val &= ~(np.abs(c - a) <= t)
            ratio = np.minimum(ratio, np.where(both, np.abs(c - a) / tsafe, 0.0))
    bad = bad_val | new_nf | lost_nf | wrong_nf
    out = _summary(r.size, bad.sum(), err.max() if err.size else 0.0, ratio.max() if ratio.size else 0.0,
                   new_nf.sum(), lost_nf.sum(), wrong_nf.sum(), (agree_nf & ~skip).sum())
    if out["n_bad"]:
        idx = np.argwhere(bad)[:5]
        out["first_bad"] = idx.tolist()
        out["first_bad_values"] = [[float(r[tuple(i)]), float(c[tuple(i)])] for i in idx]
    return out


def _compare_torch(ref, cand, dtype, tol_arr, profile, alt_ref) -> dict:
    r, c = _as_t(ref), _as_t(cand)
    t = np.asarray(tol_arr, dtype=np.float64)
    # broadcast_to returns a read-only view, which _as_t would copy: a full-shape tolerance needs no broadcast
    t = _as_t(t if t.shape == ref.shape else np.broadcast_to(t, ref.shape))
    a = None if alt_ref is None else _as_t(alt_ref)
    # The clamp only changes elements below 1e-300 (or NaN, whose min is NaN): no copy when there are none.
    tsafe = t if t.numel() and float(t.min()) >= 1e-300 else torch.clamp(t, min=1e-300)
    if _all_finite_after_rounding(r, dtype) and math.isfinite(float(c.sum())):
        # Fast path (the common case): every value finite on both sides, nothing skipped. The maximum error is
        # taken before err is divided in place (same values as err / tsafe, without another array).
        err = (c - r).abs_()
        bad = err > t
        if a is not None:
            alt_err = (c - a).abs_()
            bad &= ~(alt_err <= t)
        max_err = float(err.max()) if err.numel() else 0.0
        ratio = err.div_(tsafe)
        if a is not None:
            ratio = torch.minimum(ratio, alt_err.div_(tsafe), out=ratio)
        out = _summary(r.numel(), int(torch.count_nonzero(bad)), max_err,
                       float(ratio.max()) if ratio.numel() else 0.0, 0, 0, 0, 0)
        return _first_bad(out, bad, r, c)
    # Exact path. The four non-finite classes (and the NaN skip) can only hold where the rounded reference or
    # the output is not finite, so they are computed on those positions alone (gathered: a NaN input row of a
    # matmul is one output row); ``both`` (finite on both sides, not skipped) is the complement of that set.
    # Counts and masks are the full-array ones restricted to where they can be true.
    low = r if dtype == "float64" else r.to(_TORCH_DTYPES[dtype])  # finite iff the rounded reference is
    special = ~(torch.isfinite(low).logical_and_(torch.isfinite(c)))
    del low
    idx = torch.nonzero(special.reshape(-1)).reshape(-1)
    rs, cs = _round_t(r.reshape(-1)[idx], dtype), c.reshape(-1)[idx]
    rnan, cnan = torch.isnan(rs), torch.isnan(cs)
    rinf, cinf = torch.isinf(rs), torch.isinf(cs)
    rfin, cfin = ~(rnan | rinf), ~(cnan | cinf)
    skip = rnan if profile.allow_nan_nonpropagation else torch.zeros_like(rnan)
    agree_nf = (rnan & cnan) | (rinf & cinf & (torch.sign(rs) == torch.sign(cs)))
    new_nf = rfin & ~cfin & ~skip
    lost_nf = ~rfin & cfin & ~skip
    wrong_nf = ~rfin & ~cfin & ~agree_nf & ~skip
    err = (c - r).abs_().masked_fill_(special, 0.0)  # where(both, |c - r|, 0)
    bad = (err > t).logical_and_(~special)
    ratio = (err / tsafe).masked_fill_(special, 0.0)
    if a is not None:
        alt_err = (c - a).abs_()
        bad &= ~(alt_err <= t)
        ratio = torch.minimum(ratio, alt_err.div_(tsafe).masked_fill_(special, 0.0), out=ratio)
    bad.view(-1)[idx] = new_nf | lost_nf | wrong_nf  # value mismatches never lie on these positions
    n_new, n_lost, n_wrong = int(new_nf.sum()), int(lost_nf.sum()), int(wrong_nf.sum())
    n_agree = int((agree_nf & ~skip).sum())
    out = _summary(r.numel(), int(bad.sum()), float(err.max()) if err.numel() else 0.0,
                   float(ratio.max()) if ratio.numel() else 0.0, n_new, n_lost, n_wrong, n_agree)
    return _first_bad(out, bad, r, c)


def _first_bad(out: dict, bad: torch.Tensor, r: torch.Tensor, c: torch.Tensor) -> dict:
    if out["n_bad"]:
        idx = torch.nonzero(bad)[:5].tolist()
        out["first_bad"] = idx
        out["first_bad_values"] = [[float(r[tuple(i)]), float(c[tuple(i)])] for i in idx]
    return out


def _all_finite_after_rounding(r: torch.Tensor, dtype: str) -> bool:
    """True only when every element of the float64 reference is finite and stays finite once rounded to
    ``dtype``. One read pass: min and max propagate NaN and are infinite when an element is, and |r| below the
    dtype's largest finite value cannot round to infinity; anything else takes the exact path."""
    if not r.numel():
        return True
    lo, hi = (float(v) for v in torch.aminmax(r))
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return False
    return max(-lo, hi) <= float(torch.finfo(_TORCH_DTYPES[dtype]).max)


def _as_t(x) -> torch.Tensor:
    """A float64 tensor over (a contiguous, writable copy only where needed of) a numpy array. float32 and
    float16 arrays are widened by torch (exact either way; torch spreads the copy over the host's cores)."""
    x = np.asarray(x)
    if x.dtype in (np.float32, np.float16) and x.flags.c_contiguous and x.flags.writeable:
        return torch.from_numpy(x).to(torch.float64)
    x = np.ascontiguousarray(x, dtype=np.float64)
    if not x.flags.writeable:
        x = x.copy()
    return torch.from_numpy(x)


def _round_t(r: torch.Tensor, dtype: str) -> torch.Tensor:
    """round_to on a float64 tensor (no copy for float64)."""
    if dtype == "float64":
        return r
    return r.to(_TORCH_DTYPES[dtype]).to(torch.float64)


def _cand_outputs(b: Bundle, pid: str, n: int, prefix: str = "o") -> list[np.ndarray] | None:
    outs = []
    for k in range(n):
        key = f"c/{pid}/{prefix}{k}"
        if key not in b.cand_arrays:
            return None
        outs.append(b.cand_arrays[key])
    return outs


def _probe_status(b: Bundle, meta: dict, gate: str) -> tuple[str, str] | None:
    """None when the probe is gradable; otherwise (status, reason) for this probe alone."""
    if meta.get("skip"):  # never run: the plan's own reason (a budget or interpreter rule), not the reference's
        return "na", meta["reason"]
    if meta["status"] != "ok":
        return "na", f"reference: {meta['reason']}"
    cp = b.cprobe(meta["id"])
    if cp is None:
        return "error", "candidate returned nothing for this probe"
    if "skipped" in cp:
        return "na", cp["skipped"]
    if "error" in cp:
        if cp.get("interp_limit"):
            return "na", f"Triton interpreter limitation, not auditable on CPU: {cp['error'][:200]}"
        if cp.get("no_cuda"):
            return "na", f"needs CUDA, not auditable here: {cp['error'][:200]}"
        return "fail", f"candidate raised on an input the reference accepts: {cp['error'][:300]}"
    return None


def _fold(gate: str, per_probe: dict[str, dict], b: Bundle, empty_reason: str) -> GateResult:
    """pass if every gradable probe passed; fail if any failed; na when none was gradable."""
    statuses = [v["status"] for v in per_probe.values()]
    ev = {"probes": per_probe, "profile": b.profile.name}
    if "fail" in statuses:
        bad = [k for k, v in per_probe.items() if v["status"] == "fail"]
        first = per_probe[bad[0]]
        return GateResult("fail", f"{bad[0]}: {first.get('reason', '')}"[:400], ev, b.seed)
    if "error" in statuses:
        bad = [k for k, v in per_probe.items() if v["status"] == "error"]
        return GateResult("error", f"{bad[0]}: {per_probe[bad[0]].get('reason', '')}"[:400], ev, b.seed)
    if "pass" in statuses:
        return GateResult("pass", "", ev, b.seed)
    reasons = sorted({v.get("reason", "") for v in per_probe.values()})
    return GateResult("na", (empty_reason + ("; " + reasons[0] if reasons else ""))[:400], ev, b.seed)


def _value_probe(b: Bundle, meta: dict, gate: str, tol_fn: Callable[[np.ndarray, str, int], np.ndarray],
                 alt_prefix: str | None = None, tol_key: tuple | None = None, cond: bool = False,
                 layer: bool = False, store: bool = False) -> dict:
    """Grade every output of one probe with ``tol_fn(ref, dtype, N)``. ``tol_key`` names the tolerance
    function (gates that grade a probe with the same one share its comparison); by default the gate does.
    ``cond``: raise the tolerance to the reference's conditioning floor where one was measured
    (tolerance.with_cond_floor on ``p/<id>/cond<k>``); ``layer``: and to the any-order layer model's spread
    (tolerance.with_layer_floor on ``p/<id>/layer<k>``, ORD-03's cancellation rows); ``store`` (or ``cond``): and to
    the storage model's floor (tolerance.with_store_floor on ``p/<id>/store<k>``) where one was measured: PRC-02's
    half-precision rows, and any probe whose floors the reference's second pass measured."""
    st = _probe_status(b, meta, gate)
    if st is not None:
        return {"status": st[0], "reason": st[1]}
    pid = meta["id"]
    n = len(meta["outputs"])
    cp = b.cprobe(pid)
    if cp.get("n_out", n) != n:
        return {"status": "fail", "reason": f"candidate returned {cp.get('n_out')} outputs, reference {n}"}
    outs = _cand_outputs(b, pid, n)
    if outs is None:
        return {"status": "error", "reason": "candidate output arrays missing"}
    summaries = []
    for k in range(n):
        nf = meta.get("N_floor", meta["N"])  # the floor's reduction length (reference._ReductionLengths)
        key = b.compare_key(f"p/{pid}/ref{k}", "value", tol_key or (gate,), meta["dtype"], meta["N"],
                            alt_prefix, nf)
        if key not in b.memo:
            r = b.ref_arrays[f"p/{pid}/ref{k}"]
            alt = b.ref_arrays.get(f"p/{pid}/{alt_prefix}{k}") if alt_prefix else None

            def bound(r=r, k=k, nf=nf) -> np.ndarray | float:
                t = tol_fn(r, meta["dtype"], meta["N"])
                if cond:
                    t = tol.with_cond_floor(t, b.ref_arrays.get(f"p/{pid}/cond{k}"), nf, b.constants)
                if layer:
                    t = tol.with_layer_floor(t, b.ref_arrays.get(f"p/{pid}/layer{k}"))
                if store or cond:
                    t = tol.with_store_floor(t, b.ref_arrays.get(f"p/{pid}/store{k}"), b.constants)
                return t
            # The bound is the reference's alone: named like the comparison (tol_key names the function), without
            # what only the comparison reads (the candidate's output, the alternative reference, NaN skipping).
            t = (b.ref_value(("tol", b.constants, f"p/{pid}/ref{k}", tol_key or (gate,), meta["dtype"], meta["N"],
                              cond, layer, store, nf), bound)
                 if np.issubdtype(r.dtype, np.floating) else 0.0)
            b.memo[key] = compare(r, outs[k], meta["dtype"], t, b.profile, alt_ref=alt)
        summaries.append(b.memo[key])
    ok = all(s["ok"] for s in summaries)
    reason = ""
    if not ok:
        k = next(i for i, s in enumerate(summaries) if not s["ok"])
        s = summaries[k]
        if s.get("why") == "shape":
            reason = f"output {k} shape {s['cand_shape']} != reference {s['ref_shape']}"
        else:
            reason = (f"output {k}: {s['n_bad']}/{s.get('n', '?')} elements out of contract "
                      f"(max |err| {s.get('max_abs_err', 0):.3g}, max err/tol {s.get('max_err_over_tol', 0):.3g}, "
                      f"new non-finite {s.get('new_nonfinite', 0)}, lost non-finite {s.get('lost_nonfinite', 0)})")
    out = {"status": "pass" if ok else "fail", "reason": reason, "outputs": summaries, "N": meta["N"],
           "dtype": meta["dtype"]}
    return _with_floor_note(out, meta) if cond else out


def _with_floor_note(res: dict, meta: dict) -> dict:
    """``res`` with ``floor``: why the probe's conditioning floor was not measured (reference.floor_refusal,
    an error while measuring), when it was not: the probe was then graded by the gate's own bound alone; and with
    ``second_pass``: what the reference's second pass measured of this probe after the candidate ran (its request,
    or why it could not: lethe.verifier.api.second_pass_requests), so that a row says which floors graded it."""
    cond = meta.get("cond") or {}
    if cond and not cond.get("draws"):
        res["floor"] = str(cond.get("reason", "not measured"))[:300]
    if meta.get("second_pass"):
        res["second_pass"] = meta["second_pass"]
    return res


def _vt(b: Bundle, rel_k: float | None = None):
    return lambda r, d, n: tol.value_tol(r, d, n, b.constants, rel_k=rel_k)


# tol_key of _vt(b) raised to the conditioning floor where the probe measured one (probes.measures_floor):
# CMP-01, CMP-03, PRC-01/02 and EXC-01/02 share their comparisons of one probe
VT_COND = ("value_tol", "cond")


# ----------------------------------------------------------------------------------------------------------
# the gates


def cmp_01(b: Bundle) -> GateResult:
    """CMP-01 values: on several random draws and on adversarial sets (zeros, large magnitude near the top of
    the dtype's safe range, small 1e-6, true subnormals, a longer reduction axis) every output is within the
    scale-aware tolerance of the float64 reference. Why: a single random fixed-shape allclose check misses
    kernels that are only right for the benign inputs it happens to draw (zeros pass loose allclose on
    small-output operators; large inputs expose overflow; a longer axis exposes a dropped tail block)."""
    per = {}
    for m in b.probes("CMP-01"):
        alt = "ftz" if (m["kind"] == "subnormal" and b.profile.allow_ftz) else None
        per[m["id"]] = _value_probe(b, m, "CMP-01", _vt(b), alt_prefix=alt, tol_key=VT_COND, cond=True)
    return _fold("CMP-01", per, b, "no value probe was gradable")


def cmp_02(b: Bundle) -> GateResult:
    """CMP-02 gradients: input (and, when weights were copied, parameter) gradients for a given upstream
    gradient match float64 autograd of the reference, itself cross-checked by central finite differences,
    within tolerance.grad_tol (the value tolerance with the backward's reductions of length N over
    gradient-scale terms accounted for). Why: training kernels ship custom backwards that are never exercised by
    forward-only checks. A candidate without an autograd graph is "na" (not differentiable), never "pass"."""
    per: dict[str, dict] = {}
    for m in b.probes("CMP-02"):
        pid = m["id"]
        st = _probe_status(b, m, "CMP-02")
        if st is not None:
            per[pid] = {"status": st[0], "reason": st[1]}
            continue
        cp = b.cprobe(pid)
        if cp.get("forward_only"):
            per[pid] = {"status": "na", "reason": f"forward-only candidate: {cp.get('reason', '')}"}
            continue
        fd = m.get("fd", {})
        if fd and not fd.get("ok", True):
            per[pid] = {"status": "na", "reason": "reference autograd not confirmed by finite differences", "fd": fd}
            continue
        n_all = [tuple(s["shape"]) for s in m["inputs"] if s["t"] == "tensor"] + \
            [tuple(o["shape"]) for o in m["outputs"]]
        checks, bad = {}, []
        for j in m.get("grad_inputs", []):
            r = b.ref_arrays[f"p/{pid}/gin{j}"]
            c = b.cand_arrays.get(f"c/{pid}/gin{j}")
            if c is None:
                c = np.zeros_like(r)  # a missing .grad is a zero gradient
            n = tol.reduction_length(n_all, [r.shape])
            key = b.compare_key(f"p/{pid}/gin{j}", "grad_tol", m["dtype"], n)
            if key not in b.memo:
                t = b.ref_value(("grad_tol", b.constants, f"p/{pid}/gin{j}", m["dtype"], n),
                                lambda r=r, j=j, n=n: tol.with_cond_floor(
                                    tol.grad_tol(r, m["dtype"], n, b.constants),
                                    b.ref_arrays.get(f"p/{pid}/gcond{j}"), n, b.constants))
                b.memo[key] = compare(r, c, m["dtype"], t, b.profile)
            s = b.memo[key]
            checks[f"input{j}"] = s
            if not s["ok"]:
                bad.append(f"input{j}")
        if b.cand.get("weights_copied"):
            for name in m.get("grad_params", []):
                r = b.ref_arrays[f"p/{pid}/gpar/{name}"]
                c = b.cand_arrays.get(f"c/{pid}/gpar/{name}")
                if c is None:
                    checks[f"param:{name}"] = {"ok": False, "why": "candidate has no gradient for this parameter"}
                    bad.append(f"param:{name}")
                    continue
                n = tol.reduction_length(n_all, [r.shape])
                key = b.compare_key(f"p/{pid}/gpar/{name}", "grad_tol", m["dtype"], n)
                if key not in b.memo:
                    t = b.ref_value(("grad_tol", b.constants, f"p/{pid}/gpar/{name}", m["dtype"], n),
                                    lambda r=r, name=name, n=n: tol.with_cond_floor(
                                        tol.grad_tol(r, m["dtype"], n, b.constants),
                                        b.ref_arrays.get(f"p/{pid}/gcondpar/{name}"), n, b.constants))
                    b.memo[key] = compare(r, c, m["dtype"], t, b.profile)
                s = b.memo[key]
                checks[f"param:{name}"] = s
                if not s["ok"]:
                    bad.append(f"param:{name}")
        per[pid] = _with_floor_note({"status": "fail" if bad else "pass", "checks": checks, "fd": fd,
                                     "params_checked": bool(b.cand.get("weights_copied")),
                                     "reason": f"gradient of {bad[0]} out of contract" if bad else ""}, m)
    return _fold("CMP-02", per, b, "no gradient probe was gradable")


def cmp_03(b: Bundle) -> GateResult:
    """CMP-03 shapes: with each shape knob (batch, length, width...) varied one at a time, to the primes next to
    its value and to a prime near half of it, the candidate returns the reference's output shapes and values.
    Why: generated kernels hard-code the one shape the benchmark uses (a baked-in size, slicing or padding to
    it) or drop the tail block when a size is not a multiple of BLOCK; primes are multiples of no block size.
    The reference, not the candidate, decides which shapes are valid. Variants run at every problem size under
    a per-problem cost budget (probes.Budget); when none could be graded the gate is "na" and says why for
    each planned variant (the budget's estimate, the interpreter rule, the reference's own error), never
    "pass" on the base shape alone."""
    per = {}
    for m in b.probes("CMP-03"):
        per[m["id"]] = _value_probe(b, m, "CMP-03", _vt(b), tol_key=VT_COND, cond=True)
    planned = [k for k in per if k != "rand0"]
    variants = [k for k in planned if per[k]["status"] in ("pass", "fail")]
    res = _fold("CMP-03", per, b, "no shape probe was gradable")
    if res.status == "pass" and not variants:
        if not planned:
            why = ("the reference has no shape knob (no module-level int read by get_inputs and not by "
                   "get_init_inputs, no floating input dimension >= 2): only the base shape was checked")
        else:
            first = planned[0]
            why = (f"none of {len(planned)} shape variants could be graded (only the base shape was checked): "
                   f"{first}: {per[first].get('reason', '')}")
            if len(planned) > 1:
                why += f" (and {len(planned) - 1} more, each with its reason in the evidence)"
        return GateResult("na", why[:600], res.evidence, b.seed)
    return res


def ord_01(b: Bundle) -> GateResult:
    """ORD-01 reordered summation: on same-sign inputs (where the output magnitude equals sum|terms|) and a
    long reduction axis, the candidate is within 4*eps(dtype)*sqrt(N)*scale of the exact result. Why: any
    summation order is allowed, but an error beyond what reordering can explain means a narrower accumulator
    or dropped/duplicated terms, which a 1e-2 allclose cannot see on well-scaled outputs."""
    c = b.constants

    def bound(r, d, n):
        return tol.ord01_bound(r, d, n, c)

    per = {m["id"]: _value_probe(b, m, "ORD-01", bound, tol_key=("ord01_bound", "cond"), cond=True)
           for m in b.probes("ORD-01")}
    return _fold("ORD-01", per, b, "no reduction probe was gradable")


def ord_02(b: Bundle) -> GateResult:
    """ORD-02 determinism and aliasing: five calls on the same input are byte-identical (fast-math: within the
    ORD-01 bound), the output shares no storage with an input, a parameter or buffer, and is not overwritten
    by a later call; inputs are not mutated unless the reference mutates them too. Why: nondeterministic
    atomics make training irreproducible, and a returned buffer that the next call overwrites (or that is the
    input) silently corrupts any caller that keeps results; the reference output cannot be aliased at all
    because the candidate runs in a process that never holds it."""
    per: dict[str, dict] = {}
    for m in b.probes("ORD-02"):
        pid = m["id"]
        st = _probe_status(b, m, "ORD-02")
        if st is not None:
            per[pid] = {"status": st[0], "reason": st[1]}
            continue
        cp = b.cprobe(pid)
        problems = []
        ev: dict[str, Any] = {}
        if cp.get("alias_input") and not m.get("ref_aliases_input"):
            problems.append("output aliases an input")
        if cp.get("alias_param"):
            problems.append("output aliases a parameter or buffer")
        mutated = sorted(set(cp.get("mutated_inputs", [])) - set(m.get("ref_mutates", [])))
        if mutated:
            problems.append(f"candidate mutates input(s) {mutated}")
        if m["action"] == "overwrite" and cp.get("overwritten_by_later_call"):
            problems.append("a later call overwrote an earlier returned output")
        if m["action"] == "repeat":
            n = len(m["outputs"])
            first = _cand_outputs(b, pid, n)
            diffs = []
            for i in range(1, 5):
                later = _cand_outputs(b, pid, n, prefix=f"r{i}/o")
                if first is None or later is None:
                    problems.append("repeat outputs missing")
                    break
                for k in range(n):
                    a, z = np.asarray(first[k]), np.asarray(later[k])
                    # byte equality does not depend on the profile: computed once per run
                    skey = ("same_bytes", pid, i, k)
                    if skey not in b.memo:
                        b.memo[skey] = (a.shape == z.shape and a.dtype == z.dtype
                                        and a.tobytes() == z.tobytes())
                    if b.memo[skey]:
                        continue
                    if b.profile.bitwise_determinism:
                        diffs.append(f"call {i + 1} output {k} differs bytewise from call 1")
                    else:
                        r = b.ref_arrays[f"p/{pid}/ref{k}"]
                        lim = tol.ord01_bound(r, m["dtype"], m["N"], b.constants)
                        dd = np.abs(a.astype(np.float64) - z.astype(np.float64))
                        same_nf = ~np.isfinite(dd) & (np.isnan(a) == np.isnan(z))
                        over = ~same_nf & ~(dd <= lim)
                        d = float(np.nanmax(np.where(same_nf, 0.0, dd)))
                        if over.any():
                            diffs.append(f"call {i + 1} output {k} differs by {d:.3g} > ORD-01 bound {lim:.3g}")
            ev["repeat_differences"] = diffs[:5]
            problems += diffs[:1]
        per[pid] = {"status": "fail" if problems else "pass", "reason": "; ".join(problems), **ev}
    return _fold("ORD-02", per, b, "no determinism probe was gradable")


def ord_03(b: Bundle) -> GateResult:
    """ORD-03 cancellation-prone reduction order, on two inputs. ``cancel``: rows of +B, many small terms, -B
    (B = 2^14, probes.cancellation_values); the candidate stays within gamma_N*sum|terms| (tolerance.ord03_bound),
    the worst case of fp32 summation in any order, so every fp32 order passes (vendor GEMMs' K-loops, which hold
    B for a whole K panel, included) and a running total narrower than fp32 (fp16, TF32, bf16), which rounds
    every small term away while it holds B, fails by ~450x. ``offset``: rows M + u whose mean is large against
    their spread, run only for operators that are invariant to the shift (norms, softmax: the reference decides,
    probes.offset_condition); the candidate stays within K_COND*sqrt(N) times the reference's own measured
    sensitivity to eps-relative input perturbations (tolerance.ord03_offset_bound), i.e. within what the
    problem's condition allows a backward-stable algorithm. Both bounds are raised to the conditioning floor
    (tolerance.with_cond_floor), and ``cancel``'s to the any-order error of every gemm/convolution layer carried
    to the output (reference._LayerRoundingRun, tolerance.with_layer_floor: a worst case, no margin): after a
    norm or a softmax the output's sum|terms| understates what a layer summed. Why: a narrow running total returns ~0 on the first
    while the exact answer is O(N); a one-pass variance E[x^2] - E[x]^2 keeps no correct digit on the second
    while a two-pass or Welford variance does; zero-mean random inputs expose neither."""
    c = b.constants

    def offset_probe(m: dict) -> dict:
        # _value_probe's grading, with a per-output bound: output k's sensitivity array is part of its bound.
        st = _probe_status(b, m, "ORD-03")
        if st is not None:
            return {"status": st[0], "reason": st[1]}
        pid, n = m["id"], len(m["outputs"])
        cp = b.cprobe(pid)
        if cp.get("n_out", n) != n:
            return {"status": "fail", "reason": f"candidate returned {cp.get('n_out')} outputs, reference {n}"}
        outs = _cand_outputs(b, pid, n)
        if outs is None:
            return {"status": "error", "reason": "candidate output arrays missing"}
        summaries = []
        for k in range(n):
            r = b.ref_arrays[f"p/{pid}/ref{k}"]
            if not np.issubdtype(r.dtype, np.floating):
                summaries.append(compare(r, outs[k], m["dtype"], 0.0, b.profile))
                continue
            sens = b.ref_arrays.get(f"p/{pid}/sens{k}")
            if sens is None:
                return {"status": "error", "reason": f"reference sensitivity of output {k} missing"}
            nf = m.get("N_floor", m["N"])
            key = b.compare_key(f"p/{pid}/ref{k}", "ord03_offset", m["dtype"], m["N"], nf)
            if key not in b.memo:
                t = b.ref_value(("ord03_offset", c, f"p/{pid}/ref{k}", m["dtype"], m["N"], nf),
                                lambda r=r, sens=sens, k=k, nf=nf: tol.with_store_floor(tol.with_cond_floor(
                                    tol.ord03_offset_bound(r, sens, m["dtype"], m["N"], c),
                                    b.ref_arrays.get(f"p/{pid}/cond{k}"), nf, c),
                                    b.ref_arrays.get(f"p/{pid}/store{k}"), c))
                b.memo[key] = compare(r, outs[k], m["dtype"], t, b.profile)
            summaries.append(b.memo[key])
        bad = [k for k, s in enumerate(summaries) if not s["ok"]]
        reason = ""
        if bad:
            s = summaries[bad[0]]
            reason = (f"output {bad[0]} shape {s['cand_shape']} != reference {s['ref_shape']}"
                      if s.get("why") == "shape" else
                      f"output {bad[0]}: {s['n_bad']}/{s.get('n', '?')} elements beyond the condition bound "
                      f"(max |err| {s.get('max_abs_err', 0):.3g}, max err/tol {s.get('max_err_over_tol', 0):.3g}, "
                      f"new non-finite {s.get('new_nonfinite', 0)}, lost non-finite {s.get('lost_nonfinite', 0)})")
        return _with_floor_note({"status": "fail" if bad else "pass", "reason": reason, "outputs": summaries,
                                 "N": m["N"], "dtype": m["dtype"], "offset": m.get("offset", {})}, m)

    per = {}
    for m in b.probes("ORD-03"):
        if m["kind"] == "offset":
            per[m["id"]] = offset_probe(m)
            continue
        scale = float(m.get("abs_scale", 0.0))
        per[m["id"]] = _value_probe(
            b, m, "ORD-03", lambda r, d, n, s=scale: tol.ord03_bound(r, max(s, tol.output_scale(r)), d, n, c),
            tol_key=("ord03_bound", scale, "cond", "layer"), cond=True, layer=True)
    return _fold("ORD-03", per, b, "no cancellation probe was gradable")


def _dtype_charged(b: Bundle, dtype: str, cp: dict | None) -> tuple[bool, str]:
    """A precision is charged when the candidate declares it (LETHE_DTYPES) or accepts it (runs without error)."""
    declared = b.cand.get("declared_dtypes")
    if declared is not None:
        return (dtype in declared or dtype == "float32"), f"declared {declared}"
    if cp is not None and "error" in cp and not cp.get("interp_limit") and not cp.get("no_cuda"):
        return False, f"candidate does not accept {dtype}: {cp['error'][:160]}"
    return True, "accepted"


def _precision_gate(b: Bundle, gate: str) -> dict:
    per = {}
    for m in b.probes(gate):
        cp = b.cprobe(m["id"])
        if m["dtype"] != "float32":
            charged, why = _dtype_charged(b, m["dtype"], cp)
            if not charged:
                per[m["id"]] = {"status": "na", "reason": why}
                continue
        # PRC-02 reads the storage floor where the reference measured one (its half-precision rows)
        store = gate == "PRC-02"
        if m["kind"] == "accum":
            scale = float(m.get("abs_scale", 0.0))
            per[m["id"]] = _value_probe(
                b, m, gate, lambda r, d, n, s=scale: tol.prc02_bracket_tol(r, s, d, n, b.constants),
                tol_key=("prc02_bracket_tol", scale, "cond") + (("store",) if store else ()), cond=True,
                store=store)
            continue
        per[m["id"]] = _value_probe(b, m, gate, _vt(b), tol_key=VT_COND + (("store",) if store else ()), cond=True,
                                    store=store)
    return per


def prc_01(b: Bundle) -> GateResult:
    """PRC-01 precisions: fed fp32, fp16 and bf16 inputs (weights rounded the same way), the candidate is
    within each dtype's own derived tolerance of the float64 reference on the same rounded values; a precision
    is charged only when the candidate declares or accepts it, and bf16 under the Triton interpreter is never
    charged (interpreter artifact). Why: kernels are advertised for half precision but tested only in fp32."""
    return _fold("PRC-01", _precision_gate(b, "PRC-01"), b, "no precision probe was gradable")


def prc_02(b: Bundle) -> GateResult:
    """PRC-02 accumulator width: fed fp16/bf16 inputs, the candidate returns what an fp32 accumulator returns, on
    two inputs. ``acc_*``: ones along an axis of 4099 (> 2048, where a serial fp16 running total stalls; > 256
    for bf16). ``accb_*``: bracketed rows +2^7, 2^-14 ..., -2^7 (probes.accumulation_values), on which a 16-bit
    total holding 2^7 rounds away every block sum of up to 1024 (fp16) / 8192 (bf16) small terms however
    precisely the block was summed, while every fp32 order is exact; graded with tolerance.prc02_bracket_tol.
    Why: a half-precision accumulator passes every random-input check at 1e-2 on short rows and silently
    saturates on long ones, and the common Triton pattern (``tl.sum`` of a block in fp32, the running total in
    the input dtype) sums ones exactly."""
    return _fold("PRC-02", _precision_gate(b, "PRC-02"), b, "no accumulation probe was gradable")


def exc_01(b: Bundle) -> GateResult:
    """EXC-01 non-finite propagation: with NaN, +Inf and -Inf injected at chosen input positions, the output's
    NaN/±Inf land in exactly the reference's positions with the same signs, no new non-finite value appears,
    and finite positions stay within CMP-01 tolerance (agreeing non-finite values are not value mismatches).
    Under fast-math, positions where the reference is NaN are not graded. Why: masking NaN hides divergence in
    training, and a kernel that spreads Inf across a row corrupts everything downstream."""
    per = {m["id"]: _value_probe(b, m, "EXC-01", _vt(b), tol_key=VT_COND, cond=True) for m in b.probes("EXC-01")}
    return _fold("EXC-01", per, b, "no non-finite probe was gradable")


def exc_02(b: Bundle) -> GateResult:
    """EXC-02 subnormals: on inputs strictly below the dtype's smallest normal, the output matches the
    reference under the profile: strict requires gradual underflow (the exact float64 result rounded to the
    dtype); cuda-default and fast-math also accept the flush-to-zero reference (inputs and outputs below the
    smallest normal flushed). Why: silent flush-to-zero changes results of tiny-gradient and
    normalisation paths; whether it is allowed is a contract choice, so it is graded per profile."""
    per = {}
    for m in b.probes("EXC-02"):
        alt = "ftz" if b.profile.allow_ftz else None
        per[m["id"]] = _value_probe(b, m, "EXC-02", _vt(b), alt_prefix=alt, tol_key=VT_COND, cond=True)
    return _fold("EXC-02", per, b, "no subnormal probe was gradable")


def res_01(b: Bundle) -> GateResult:
    """RES-01 placement and dtype: every output lives on the input's device and has the contract dtype (the
    probe's floating dtype for floating outputs, the reference's dtype otherwise). Why: a kernel that returns a
    CPU tensor or silently upcasts forces hidden copies and breaks callers that rely on the dtype."""
    per = {}
    for m in b.probes("RES-01"):
        st = _probe_status(b, m, "RES-01")
        if st is not None and st[0] == "fail":
            st = ("na", f"no output to place (graded by CMP-01/PRC-01): {st[1]}")
        if st is not None:
            per[m["id"]] = {"status": st[0], "reason": st[1]}
            continue
        cp = b.cprobe(m["id"])
        want_dev = b.device
        want_dt = [m["dtype"] if o["dtype"].startswith("float") else o["dtype"] for o in m["outputs"]]
        problems = []
        if any(d != want_dev for d in cp.get("devices", [])):
            problems.append(f"output device {cp.get('devices')} != input device {want_dev}")
        if cp.get("dtypes", want_dt)[: len(want_dt)] != want_dt:
            problems.append(f"output dtype {cp.get('dtypes')} != contract {want_dt}")
        per[m["id"]] = {"status": "fail" if problems else "pass", "reason": "; ".join(problems)}
    return _fold("RES-01", per, b, "no placement probe was gradable")


def res_02(b: Bundle) -> GateResult:
    """RES-02 hardware limits: every Triton kernel the candidate launched fits the launch limits of the GPU it
    ran on (read from the loaded binary) and of the sm_90a and sm_100a targets (compiled ahead of time on this
    host from the recorded launches): 255 registers/thread, 232,448 B shared memory per block, 512 TMEM
    columns on sm_100, 1,024 threads, and local-memory spill up to the profile's ``max_spill_bytes`` (strict:
    none; the other profiles report spills without failing them, since spilling is slow, not unlaunchable).
    Why: Triton compiles kernels that can never launch and only fails at load time on the target (or an
    autotuner silently drops the config), so the verifier compares the numbers itself."""
    reps = b.cand.get("resources") or []
    if not reps:
        why = "no compiled artifact"
        if b.cand.get("aot_error"):
            why += f" (AOT pass failed: {b.cand['aot_error'][:200]})"
        return GateResult("na", why, {"device": b.device}, b.seed)
    try:
        from lethe.aot.limits import check
    except Exception as exc:  # noqa: BLE001
        return GateResult("na", f"lethe.aot unavailable: {exc}", {}, b.seed)
    per = {}
    for i, rep in enumerate(reps):
        key = f"{rep.get('kernel', i)}@{rep.get('target', '?')}#{i}"
        figures = {k: rep.get(k) for k in ("target", "source", "registers", "shared_bytes", "tmem_columns",
                                           "spill_bytes", "num_warps", "num_stages")}
        if rep.get("error"):
            err = str(rep["error"])
            resource = any(w in err.lower() for w in ("out of resource", "shared memory", "tensor memory", "tmem"))
            per[key] = {"status": "fail" if resource else "na", "report": figures,
                        "reason": f"did not compile for {rep.get('target')}: {err[:200]}"}
            continue
        try:
            v = check(rep, max_spill_bytes=b.profile.max_spill_bytes)
        except Exception as exc:  # noqa: BLE001 - unknown target etc.
            per[key] = {"status": "na", "reason": f"cannot judge: {exc}"[:200], "report": figures}
            continue
        per[key] = {"status": "fail" if v else "pass", "reason": "; ".join(v), "report": figures}
    return _fold("RES-02", per, b, "no kernel report could be judged")


GATES: dict[str, Callable[[Bundle], GateResult]] = {
    "CMP-01": cmp_01, "CMP-02": cmp_02, "CMP-03": cmp_03, "ORD-01": ord_01, "ORD-02": ord_02,
    "ORD-03": ord_03, "PRC-01": prc_01, "PRC-02": prc_02, "EXC-01": exc_01, "EXC-02": exc_02,
    "RES-01": res_01, "RES-02": res_02,
}


def grade(b: Bundle, only: list[str] | None = None) -> dict[str, GateResult]:
    """Run every gate (or ``only`` those); a gate that raises is recorded as "error", never crashes the row."""
    out = {}
    for gid in GATE_IDS:
        if only and gid not in only:
            out[gid] = GateResult("na", "not requested", {}, b.seed)
            continue
        try:
            out[gid] = GATES[gid](b)
        except Exception as exc:  # noqa: BLE001 - a verifier bug must show up as "error", not a pass
            out[gid] = GateResult("error", f"gate raised {type(exc).__name__}: {exc}"[:400], {}, b.seed)
    return out


def grade_process(payload: dict, arrays: dict[str, np.ndarray], work) -> tuple[dict, dict]:
    """Sandbox entry point of ``lethe.verifier.api.grade(..., isolated=True)``: :func:`grade` for every profile
    named in ``payload``, over the reference's (``r/``) and the candidate's (``c/``) arrays, one memo shared as
    in-process. Trusted code on data only: it never imports or runs a candidate. ``memory_error`` says a gate
    ran out of memory under the sandbox's cap, which the caller answers by grading in its own process."""
    from lethe.verifier import profiles as PR

    torch.set_num_threads(max(1, int(payload.get("threads") or 1)))
    ref_arrays = {k[2:]: v for k, v in arrays.items() if k.startswith("r/")}
    cand_arrays = {k[2:]: v for k, v in arrays.items() if k.startswith("c/")}
    constants = tol.Constants(**payload["constants"])
    memo: dict = {}
    out: dict[str, dict] = {}
    memory_error = False
    for name in payload["profiles"]:
        b = Bundle(ref=payload["ref"], ref_arrays=ref_arrays, cand=payload["cand"], cand_arrays=cand_arrays,
                   profile=PR.get(name), seed=int(payload["seed"]), device=payload["device"], constants=constants,
                   memo=memo)
        results = grade(b, only=payload["only_gates"])
        memory_error |= any(r.reason.startswith("gate raised MemoryError") for r in results.values())
        out[name] = {g: r.to_row() for g, r in results.items()}
    return {"gates": out, "memory_error": memory_error}, {}
