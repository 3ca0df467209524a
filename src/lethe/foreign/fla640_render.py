"""The fla #640 tables (``paper/tables/fla640.{md,tex}``) from the committed results (``results/foreign/fla640/``).

Three tables and an outcome paragraph, all computed from the files of the results calls listed in the current
result ``fla640.json`` (config ``results.fla640``; see :mod:`lethe.foreign.fla640_results`):

(a) the direct check: fla's forward and backward with the #640 guard bypassed, against the float64 oracle, one row
    per cell, and the exposed (K=64, BK=64) / control (K=128, BK=128) error ratio per tensor under each pair of
    cells measured in the same call;
(b) the verifier: one row per verified pair, its failing gates, the worst err/tol, and the probe results split by
    probe dtype, because a candidate that computes in bfloat16 is graded at float32 tolerance on the float32
    probes and at bfloat16 tolerance on the bfloat16 ones, and the two say different things;
(c) the gate evidence of every verified pair: which probes fail each gate, their dtype and err/tol, and whether
    the gate grades the forward or the backward pass (the #640 guard sits in the backward only, so a forward
    failure cannot be the miscompile).

Ratios, labels and signatures are recomputed here from the per-tensor errors and the thresholds recorded in
``direct.json`` (not copied from its ``comparisons``), and the outcome is chosen by rules over the same data, so a
different committed result renders a different table and a different outcome.
"""

from __future__ import annotations

import functools
import json
import re
import shlex
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lethe.foreign import fla640 as F
from lethe.foreign.fla640 import parse_pair
from lethe.foreign.fla640_results import load
from lethe.render.tables import Column, md_escape, table_text, tex_escape, write_text

STEM = "fla640"
LABEL = "tab:fla640"
GRADS = ("dq", "dk", "dv", "dg", "dbeta")
TENSORS = ("o", *GRADS)
PROBE_DTYPES = ("float32", "bfloat16", "float16")
SHORT = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "float64": "fp64"}
# Explicit mantissa bits: "finer than the compute dtype" is a statement about these, not about byte width
# (fp16 and bf16 are both two bytes, but fp16 resolves 8x finer).
MANTISSA = {"float64": 52, "float32": 23, "float16": 10, "bfloat16": 7}
EXPOSED_K, CONTROL_K = F.EXPOSED_K, F.CONTROL_K


def sci(x: float | None) -> str:
    """Compact scientific form for err/tol and errors: 2.8e6, 3.9e-3, 0.22, 199."""
    if x is None:
        return "–"
    if x != 0 and (abs(x) >= 1000 or abs(x) < 0.01):
        m, e = f"{x:.1e}".split("e")
        return f"{m}e{int(e)}"
    return f"{x:.3g}"


def ratio_text(r: float) -> str:
    return f"×{r:.2f}"


# ----------------------------------------------------------------------------------------------------------
# direct check


def label(rel: float | None, th: Mapping[str, float]) -> str:
    """run.py's label of one error, from the thresholds the run recorded (:func:`lethe.foreign.fla640.label`)."""
    return F.label(rel, th)


def _rel(cell: Mapping[str, Any], name: str) -> float | None:
    return cell.get("bypassed", {}).get("errors", {}).get(name, {}).get("rel_fro")


def comparisons(cells: Sequence[Mapping[str, Any]], th: Mapping[str, float]) -> list[dict[str, Any]]:
    """Exposed vs control per (op, dtype, T) and tensor, within one call's cells (same code, same seeds), in
    :data:`TENSORS` order (:func:`lethe.foreign.fla640.comparisons`)."""
    return F.comparisons(cells, th, TENSORS)


def _launched_bk(cell: Mapping[str, Any]) -> str:
    bks = sorted({int(x["BK"]) for x in cell.get("dqkwg_launches") or [] if x.get("BK") is not None})
    if bks:
        return "/".join(str(b) for b in bks)
    return f"{cell['BK_expected']} (expected)"


def direct_rows(calls: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for call in calls:
        doc = call["direct"]
        th = doc["thresholds"]
        cells = doc["cells"]
        comps = comparisons(cells, th)
        seen: set[tuple] = set()
        for c in cells:
            by = c.get("bypassed", {})
            errs = by.get("errors")
            worst = max((_rel(c, g) for g in GRADS if _rel(c, g) is not None), default=None)
            if errs:
                lab = label(worst, th)
            else:
                lab = "error: " + str(by.get("error") or c.get("error") or "no bypassed run")[:60]
            det = by.get("bitwise_deterministic")
            rows.append({
                "call": call["call"], "op": c["op"], "K": str(c["K"]), "BK": _launched_bk(c), "dtype": c["dtype"],
                "T": str(c["T"]),
                "refused": {True: "yes", False: "no"}.get(c.get("guarded", {}).get("refused"), "–"),
                **{t: (sci(_rel(c, t)) if _rel(c, t) is not None else None) for t in TENSORS},
                "det": (f"yes ({by.get('repeats')} runs)" if det else ("NO" if det is False else None)),
                "label": lab, "seconds": c.get("seconds"),
            })
            key = (c["op"], c["dtype"], c["T"])
            seen.add((*key, c["K"]))
            mine = [x for x in comps if (x["op"], x["dtype"], x["T"]) == key]
            # the ratio row follows whichever cell of the pair was measured second
            if mine and c["K"] in (EXPOSED_K, CONTROL_K) and {(*key, EXPOSED_K), (*key, CONTROL_K)} <= seen:
                sig = [x["tensor"] for x in mine if x["signature"]]
                rows.append({
                    "call": call["call"], "op": c["op"], "K": f"{EXPOSED_K}/{CONTROL_K}",
                    "BK": "exposed/control", "dtype": c["dtype"], "T": str(c["T"]), "refused": None,
                    **{t: None for t in TENSORS},
                    **{x["tensor"]: ratio_text(x["ratio"]) for x in mine},
                    "det": None, "label": ("SIGNATURE: " + ", ".join(sig)) if sig else "no signature",
                    "seconds": None,
                })
    return rows


DIRECT_COLUMNS = [
    Column("call", "Call"), Column("op", "Op"), Column("K", "K", align="r"), Column("BK", "BK launched", align="r"),
    Column("dtype", "Dtype"), Column("T", "T", align="r"), Column("refused", "Guard refused"),
    *[Column(t, t, align="r") for t in TENSORS],
    Column("det", "Bitwise deterministic"), Column("label", "Label"), Column("seconds", "Seconds", "{:.0f}"),
]


# ----------------------------------------------------------------------------------------------------------
# verifier


@functools.lru_cache(maxsize=32)
def probe_plan(pair_id: str, seed: int) -> dict[str, Any]:
    """The verifier's probe plan for the pair (dtype and action of every probe), from its reference source.

    The verdict evidence names probes but records no dtype for the gradient probe and no action for any; the
    plan is a pure function of (reference source, seed), so rebuilding it gives both.
    """
    from lethe.verifier.probes import build_plan
    from lethe.verifier.reference import load_source

    ref, _ = parse_pair(pair_id).sources()
    with tempfile.TemporaryDirectory(prefix="fla640-plan-") as wd:
        ns = load_source(ref, "fla640_plan_" + re.sub(r"\W", "_", pair_id), wd)
        return {p.id: p for p in build_plan(ns, seed)}


def probe_results(row: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Every probe with a graded numerical comparison in the row's evidence, merged over the gates that use it."""
    plan = probe_plan(row["id"], int(row["seed"]))
    out: dict[str, dict[str, Any]] = {}
    for gate, g in row["gates"].items():
        ev = json.loads(g.get("evidence") or "{}")
        for pid, p in (ev.get("probes") or {}).items():
            comps = list(p.get("outputs") or []) + list((p.get("checks") or {}).values())
            comps = [c for c in comps if "max_err_over_tol" in c]
            if not comps:
                continue  # a status-only entry (residency, repeat): no number to report
            probe = plan.get(pid)
            if probe is None:
                raise ValueError(f"{row['id']}: probe {pid!r} is not in the plan rebuilt from the generator")
            if p.get("dtype") is not None and p["dtype"] != probe.dtype:
                raise ValueError(f"{row['id']}: probe {pid} evidence dtype {p['dtype']} != plan {probe.dtype}")
            r = out.setdefault(pid, {"probe": pid, "dtype": probe.dtype, "action": probe.action, "gates": [],
                                     "fail": False, "err_over_tol": 0.0, "n_bad": 0, "new_nonfinite": 0,
                                     "lost_nonfinite": 0, "wrong_nonfinite": 0, "per_input": {}})
            for k, c in (p.get("checks") or {}).items():
                r["per_input"][k] = float(c["max_err_over_tol"])
            r["gates"].append(gate)
            r["fail"] = r["fail"] or p.get("status") == "fail" or any(not c.get("ok", True) for c in comps)
            r["err_over_tol"] = max(r["err_over_tol"], *(float(c["max_err_over_tol"]) for c in comps))
            for k in ("n_bad", "new_nonfinite", "lost_nonfinite", "wrong_nonfinite"):
                r[k] = max(r[k], sum(int(c.get(k, 0)) for c in comps))
    return out


def gate_evidence(row: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per gate: status, whether it grades the backward, and its failing and passing probes."""
    probes = probe_results(row)
    plan = probe_plan(row["id"], int(row["seed"]))
    out = []
    for gate, g in row["gates"].items():
        mine = [p for p in probes.values() if gate in p["gates"]]
        ev = json.loads(g.get("evidence") or "{}")
        actions = {plan[pid].action for pid in (ev.get("probes") or {}) if pid in plan}
        # probes this gate judged without a number (residency, repeat/overwrite): listed by status only
        for pid, p in (ev.get("probes") or {}).items():
            if pid in plan and pid not in {q["probe"] for q in mine} and p.get("status") in ("pass", "fail"):
                mine.append({"probe": pid, "dtype": plan[pid].dtype, "action": plan[pid].action,
                             "fail": p["status"] == "fail", "err_over_tol": None, "new_nonfinite": 0,
                             "lost_nonfinite": 0, "wrong_nonfinite": 0, "per_input": {}})
        out.append({"gate": gate, "status": g["status"], "reason": g.get("reason") or "",
                    "backward": "backward" in actions,
                    "failing": [p for p in mine if p["fail"]], "passing": [p for p in mine if not p["fail"]]})
    return out


def _dtype_cell(probes: Sequence[Mapping[str, Any]], dtype: str) -> str | None:
    mine = [p for p in probes if p["dtype"] == dtype]
    if not mine:
        return None
    bad = [p["err_over_tol"] for p in mine if p["fail"]]
    if bad:
        span = sci(min(bad)) if len(bad) == 1 else f"{sci(min(bad))}–{sci(max(bad))}"
        return f"{len(bad)} of {len(mine)} fail, err/tol {span}"
    return f"0 of {len(mine)} fail, max err/tol {sci(max(p['err_over_tol'] for p in mine))}"


def _control_id(p: F.Pair) -> str:
    return F.pair_id(p.op, CONTROL_K, p.compute_dtype, p.T)


def verifier_rows(calls: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    from lethe.verifier import api

    ran = {r["id"] for c in calls for r in c["rows"]}
    rows = []
    for call in calls:
        for r in call["rows"]:
            p = parse_pair(r["id"])
            ev = gate_evidence(r) if r["status"] == "gated" else []
            probes = list(probe_results(r).values()) if r["status"] == "gated" else []
            failing = [e for e in ev if e["status"] in ("fail", "error")]
            worst = max(((q["err_over_tol"], e["gate"], q["probe"]) for e in failing for q in e["failing"]
                         if q["err_over_tol"] is not None), default=None)
            if p.exposed:
                ctl = _control_id(p)
                control = f"{ctl}: " + ("ran" if ctl in ran else "did not run")
            elif p.K == CONTROL_K:
                control = "is the control"
            else:
                control = "–"
            rows.append({
                "call": call["call"], "pair": r["id"],
                "tile": f"BK={F.expected_bk(p.K)} ({'exposed' if p.exposed else 'control'})",
                "computes": p.compute_dtype or "probe dtype",
                "status": r["status"], "verdict": api.verdict(r),
                "failing": ", ".join(e["gate"] for e in failing) or None,
                "worst": (f"{sci(worst[0])} ({worst[1]}, {worst[2]})" if worst else None),
                **{dt: _dtype_cell(probes, dt) for dt in PROBE_DTYPES},
                "control": control,
            })
    return rows


VERIFIER_COLUMNS = [
    Column("call", "Call"), Column("pair", "Pair"), Column("tile", "Tile"), Column("computes", "Candidate computes in"),
    Column("status", "Status"), Column("verdict", "Verdict"), Column("failing", "Failing gates"),
    Column("worst", "Worst err/tol (gate, probe)"),
    *[Column(dt, f"{SHORT[dt]} probes") for dt in PROBE_DTYPES],
    Column("control", "K=128 control pair"),
]


def _probe_list(probes: Sequence[Mapping[str, Any]], with_err: bool) -> str | None:
    if not probes:
        return None
    if with_err:
        return "; ".join(f"{p['probe']} ({SHORT[p['dtype']]})"
                         + (f" {sci(p['err_over_tol'])}" if p["err_over_tol"] is not None else "") for p in probes)
    return ", ".join(f"{p['probe']} ({SHORT[p['dtype']]})" for p in probes)


def _nonfinite_text(probes: Sequence[Mapping[str, Any]]) -> str | None:
    parts = []
    for k, word in (("new_nonfinite", "new"), ("lost_nonfinite", "lost"), ("wrong_nonfinite", "wrong class")):
        n = sum(p[k] for p in probes)
        if n:
            parts.append(f"{n} {word}")
    return ", ".join(parts) or None


def gate_rows(calls: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for call in calls:
        for r in call["rows"]:
            if r["status"] != "gated":
                continue
            for e in gate_evidence(r):
                rows.append({
                    "pair": r["id"], "gate": e["gate"], "pass": "backward" if e["backward"] else "forward",
                    "status": e["status"], "failing": _probe_list(e["failing"], True),
                    "passing": _probe_list(e["passing"], False)
                    or (e["reason"] if e["status"] == "na" else None),
                    "nonfinite": _nonfinite_text(e["failing"] + e["passing"]),
                })
    return rows


GATE_COLUMNS = [
    Column("pair", "Pair"), Column("gate", "Gate"), Column("pass", "Grades"), Column("status", "Status"),
    Column("failing", "Failing probes (dtype) err/tol"), Column("passing", "Passing probes (dtype)"),
    Column("nonfinite", "Non-finite mismatches"),
]


# ----------------------------------------------------------------------------------------------------------
# outcome


def _span(xs: Sequence[float], fmt=sci) -> str:
    lo, hi = min(xs), max(xs)
    return fmt(lo) if fmt(lo) == fmt(hi) else f"{fmt(lo)}–{fmt(hi)}"


def _fate(provenance: Mapping[str, Any], pair_id: str) -> str:
    """What each call did with a verifier task, from the provenance (ran / skipped / not planned)."""
    task = f"verify {pair_id}"
    parts = []
    for c in provenance["calls"]:
        if task in c["tasks_run"]:
            parts.append(f"ran in {c['call']}")
        elif any(s["task"] == task for s in c["tasks_skipped"]):
            parts.append(f"skipped for the time budget in {c['call']}")
        else:
            parts.append(f"not in {c['call']}'s plan")
    return "; ".join(parts)


def direct_outcome(calls: Sequence[Mapping[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    comps, shapes, ths = [], [], []
    for call in calls:
        th = call["direct"]["thresholds"]
        mine = comparisons(call["direct"]["cells"], th)
        comps += mine
        ths.append(th)
        sh = call["direct"]["shapes"]
        shapes += sorted({f"{c['op']}, {c['dtype']}, T={c['T']}, B={sh['B']}, H={sh['H']}" for c in mine})
    if not comps:
        return ("Direct check: no exposed/control pair of cells was measured, so there is no ground truth for #640 "
                "on this machine.", comps)
    sig = [c for c in comps if c["signature"]]
    th = ths[0]
    rule = f"a signature needs an error ≥ {th['wrong_rel']:g} and ≥ ×{th['control_factor']:g} the control's"
    if sig:
        what = "; ".join(f"{c['op']} {c['dtype']} T={c['T']} {c['tensor']}: {sci(c['exposed_rel'])} against "
                         f"{sci(c['control_rel'])} ({ratio_text(c['ratio'])})" for c in sig)
        return f"Direct check: miscompile signature measured ({rule}): {what}.", comps
    grads = [c for c in comps if c["tensor"] in GRADS]
    rels = [c["exposed_rel"] for c in grads] + [c["control_rel"] for c in grads]
    return (f"Direct check: at the shapes run ({'; '.join(shapes)}), no miscompile signature was measured. With the "
            f"guard bypassed, the gradients of the exposed tile (K={EXPOSED_K}, BK=64) and of its control "
            f"(K={CONTROL_K}, BK=128) have relative Frobenius errors of {_span(rels)} against the float64 oracle, "
            f"exposed/control {_span([c['ratio'] for c in grads], ratio_text)}; {rule}.", comps)


def verifier_outcome(row: Mapping[str, Any], calls: Sequence[Mapping[str, Any]], provenance: Mapping[str, Any],
                     comps: Sequence[Mapping[str, Any]]) -> str:
    """The battery's answer on one exposed pair, and what it can and cannot say about #640."""
    from lethe.verifier import api

    p = parse_pair(row["id"])
    if row["status"] != "gated":
        return f"The exposed pair {p.id} did not reach the gates ({row['status']}: {row['error'][:120]})."
    ev = gate_evidence(row)
    failing = [e for e in ev if e["status"] in ("fail", "error")]
    probes = list(probe_results(row).values())
    cd = p.compute_dtype
    rows_by_id = {r["id"]: r for c in calls for r in c["rows"]}
    ctl_row = rows_by_id.get(_control_id(p))
    direct_T = sorted({c["T"] for c in comps if c["op"] == p.op and c["dtype"] == (cd or "float32")})
    truth = [c for c in comps if c["op"] == p.op and c["dtype"] == (cd or "float32") and c["signature"]]
    text = []
    if not failing:
        verdict = api.verdict(row)
        s = f"The battery passes the exposed pair {p.id} ({verdict})"
        text.append(s + (": a MISS, since the direct check measured a signature." if truth else "."))
        return " ".join(text)
    text.append(f"The battery fails the exposed pair {p.id} on {len(failing)} gates "
                f"({', '.join(e['gate'] for e in failing)}).")
    bad = [q for q in probes if q["fail"]]  # numeric probes only: a status-only probe has no dtype story
    same = [q for q in probes if cd is not None and q["dtype"] == cd]
    finer = cd is not None and all(MANTISSA[q["dtype"]] > MANTISSA[cd] for q in bad)
    if finer and same and not any(q["fail"] for q in same):
        dts = sorted({q["dtype"] for q in bad}, key=lambda d: -MANTISSA[d])
        # what candidate_source casts: every input but the gate g, which fla's layers pass in fp32
        cast = [n for n in F.OPS[p.op].inputs if n != "g"]
        kept = [n for n in F.OPS[p.op].inputs if n == "g"]
        text.append(
            f"The fail is precision-dominated: the candidate casts {', '.join(cast)} to {cd} around the fla call"
            + (f" ({', '.join(kept)} stays float32)" if kept else "") + ", every "
            f"failing probe is {' or '.join(dts)} (finer than {cd}, graded at its own dtype's tolerance; err/tol "
            f"{_span([q['err_over_tol'] for q in bad])}), and all {len(same)} {cd} probes pass (max err/tol "
            f"{sci(max(q['err_over_tol'] for q in same))}).")
    elif cd is not None:
        coarse = [q["probe"] for q in bad if MANTISSA[q["dtype"]] <= MANTISSA[cd]]
        text.append(f"Not all of it is precision: probes at or below the candidate's compute dtype {cd} fail too "
                    f"({', '.join(coarse) or 'none at that dtype were graded'}).")
    fwd = [e["gate"] for e in failing if not e["backward"]]
    bwd = [e for e in failing if e["backward"]]
    if fwd:
        text.append(f"{len(fwd)} of the {len(failing)} failing gates ({', '.join(fwd)}) grade the forward pass "
                    "only, which the #640 guard (in the backward) cannot reach.")
    names = F.OPS[p.op].inputs
    for e in bwd:
        dts = sorted({SHORT[q["dtype"]] for q in e["failing"]})
        per = {k: v for q in e["failing"] for k, v in q["per_input"].items()}
        grads = ", ".join("d" + names[int(k[5:])] if k.startswith("input") and int(k[5:]) < len(names) else k
                          for k in sorted(per))
        errs = list(per.values()) or [q["err_over_tol"] for q in e["failing"] if q["err_over_tol"] is not None]
        text.append(f"The backward gate {e['gate']} fails on {'/'.join(dts)} probes only"
                    + (f" ({grads}: err/tol {_span(errs)})." if per else f" (err/tol {_span(errs)})."))
    for e in failing:
        t = _nonfinite_text(e["failing"])
        if t:
            text.append(f"{e['gate']} ({'backward' if e['backward'] else 'forward'}) also counts non-finite "
                        f"mismatches ({t}).")
    if direct_T and p.T not in direct_T:
        text.append(f"The direct check measured T={'/'.join(str(t) for t in direct_T)}, not the pair's T={p.T}.")
    if ctl_row is None:
        text.append(f"The fail cannot be attributed to #640 without its K={CONTROL_K} control pair "
                    f"({_control_id(p)}), which did not run ({_fate(provenance, _control_id(p))}).")
    elif ctl_row["status"] != "gated":
        text.append(f"Its K={CONTROL_K} control pair {ctl_row['id']} did not reach the gates ({ctl_row['status']}), "
                    "so the fail cannot be attributed to #640.")
    else:
        cev = {e["gate"]: e for e in gate_evidence(ctl_row)}
        only = [e["gate"] for e in failing if cev[e["gate"]]["status"] not in ("fail", "error")]
        factor = calls[0]["direct"]["thresholds"]["control_factor"]
        seps = []
        for e in bwd:
            mine = [q["err_over_tol"] for q in e["failing"] if q["err_over_tol"] is not None]
            theirs = [q["err_over_tol"] for q in cev[e["gate"]]["failing"] if q["err_over_tol"] is not None]
            if mine and theirs:
                seps.append((e["gate"], max(mine) / max(max(theirs), 1e-30)))
        sep_text = "; ".join(f"{g} err/tol {ratio_text(x)} the control's" for g, x in seps)
        if truth:
            ground = "consistent with the direct check's signature"
        elif direct_T:
            ground = "but the direct check measured no signature, so it needs a look before it counts as a catch"
        else:
            ground = "with no direct measurement of this dtype to confirm it"
        if only or any(x >= factor for _, x in seps):
            text.append(f"Against its control {ctl_row['id']} the exposed pair differs"
                        + (f" (fails only here: {', '.join(only)})" if only else "")
                        + (f" ({sep_text})" if sep_text else "") + f": a #640 signal, {ground}.")
        else:
            text.append(f"Its control {ctl_row['id']} fails the same gates"
                        + (f" ({sep_text})" if sep_text else "")
                        + (": the battery does not separate the miscompile the direct check measured." if truth
                           else ": no #640 signal beyond precision."))
    return " ".join(text)


def outcome(data: Mapping[str, Any]) -> str:
    calls = data["calls"]
    direct, comps = direct_outcome(calls)
    parts = [direct]
    exposed = [r for c in calls for r in c["rows"] if parse_pair(r["id"]).exposed]
    if not exposed:
        parts.append("Verifier: no exposed pair was verified.")
    for r in exposed:
        parts.append(verifier_outcome(r, calls, data["provenance"], comps))
    return " ".join(parts)


# ----------------------------------------------------------------------------------------------------------
# notes and rendering


def _command(cmd: str) -> str:
    """The recorded command without its machine-specific --out path."""
    words = shlex.split(cmd or "")
    out, skip = [], False
    for w in words:
        if skip:
            skip = False
            continue
        if w == "--out":
            skip = True
            continue
        if w.startswith("--out="):
            continue
        out.append(w)
    return " ".join(out)


def device_note(prov: Mapping[str, Any]) -> str:
    res = [c for c in prov["calls"] if c["role"] == "results"]
    keys = ("gpu", "capability", "driver", "cuda_runtime", "torch", "triton", "fla", "python")
    envs = {tuple(c.get(k) for k in keys) for c in res}
    disp = {c.get("fla_dispatch_disabled") for c in res}
    guard = {json.dumps(c.get("guard_state"), sort_keys=True) for c in res}
    if len(envs) != 1:
        return "The results calls ran on different software or hardware: see provenance.json."
    e = dict(zip(keys, next(iter(envs)), strict=True))
    gs = json.loads(next(iter(guard))) if len(guard) == 1 else {}
    text = (f"Measured on one {e['gpu']} ({e['capability']}, driver {e['driver']}, CUDA runtime {e['cuda_runtime']}), "
            f"torch {e['torch']}, Triton {e['triton']}, fla-core {e['fla']}, Python {e['python']}")
    if disp == {True}:
        text += ", FLA_DISABLE_BACKEND_DISPATCH=1 (fla's Triton kernels, no TileLang backend)"
    if gs.get("would_refuse"):
        text += "; fla's #640 guard is active on this stack and was bypassed for the measurements"
    return text + "."


def call_notes(prov: Mapping[str, Any]) -> list[str]:
    out = []
    for c in prov["calls"]:
        what = "results" if c["role"] == "results" else "attempt, not a result"
        out.append(f"{c['call']} ({what}; commit {str(c['git_sha'])[:7]}, {c['utc_time']}, "
                   f"{_command(c['command'])}): " + " ".join(c["notes"]))
    return out


def texts(result: str | Path) -> tuple[str, str]:
    """The Markdown and LaTeX of the three tables and the outcome."""
    data = load(result)
    calls, prov = data["calls"], data["provenance"]
    th = calls[0]["direct"]["thresholds"] if calls else None
    a = table_text(
        direct_rows(calls), DIRECT_COLUMNS,
        caption="fla #640, direct check on the H200: fla's chunk_gated_delta_rule and relatives with the #640 guard "
                "bypassed, relative Frobenius error of the output and of each gradient against the float64 oracle "
                "on the same rounded inputs, and the exposed/control ratio per tensor.",
        label=f"{LABEL}-direct",
        notes=[("Guard refused = fla raised its #640 error with the guard in place (measured first, then "
                "bypassed). BK launched = the K tile of chunk_bwd_kernel_dqkwg seen by a spy on its launches. "
                "Bitwise deterministic = the bypassed forward and backward repeated with identical bits. "
                f"Label of a cell: worst gradient error ≤ {th['ok_rel']:g} ok, ≥ {th['wrong_rel']:g} wrong, "
                f"suspect between. Exposed/control rows: exposed error / control error per tensor; a "
                f"miscompile signature needs ≥ {th['wrong_rel']:g} and ≥ ×{th['control_factor']:g}.")
               if th else "No results call.",
               device_note(prov), *call_notes(prov)],
    )
    b = table_text(
        verifier_rows(calls), VERIFIER_COLUMNS,
        caption="fla #640, the verifier on the generated pairs (profile strict): status, failing gates, worst "
                "err/tol, and the probe results split by probe dtype.",
        label=f"{LABEL}-verifier",
        notes=["Probe columns count the probes with a graded numerical comparison in that dtype (merged over the "
               "gates that share a probe) and give the err/tol range of the failing ones, or the largest err/tol "
               "when none fails. The candidate casts q, k, v and beta to its compute dtype around the fla call, "
               "so fp32 and fp16 probes grade a bfloat16 computation at a finer dtype's tolerance."],
    )
    c = table_text(
        gate_rows(calls), GATE_COLUMNS,
        caption="fla #640, gate evidence of each verified pair: which probes fail each gate, their dtype and "
                "err/tol, and whether the gate grades the forward or the backward pass.",
        label=f"{LABEL}-gates",
        notes=["Grades = backward when a probe of the gate runs the backward pass (the gradient probe of CMP-02), "
               "forward otherwise; fla's #640 guard sits in the backward (chunk_bwd_dqkwg), so only a backward "
               "gate can see the miscompile. Non-finite mismatches: outputs non-finite in the candidate only "
               "(new), in the reference only (lost), or in both but of a different class (wrong class)."],
    )
    out = outcome(data)
    md = "\n".join([a.markdown, b.markdown, c.markdown, f"**Outcome.** {md_escape(out)}\n"])
    tex = "\n".join([a.latex, b.latex, c.latex, f"\\paragraph{{Outcome.}} {tex_escape(out)}\n"])
    return md, tex


def render(result: str | Path, tables_dir: str | Path) -> tuple[Path, Path]:
    """Write ``fla640.md`` and ``fla640.tex`` into ``tables_dir`` from the current result file ``result``."""
    md, tex = texts(result)
    tables_dir = Path(tables_dir)
    return write_text(tables_dir / f"{STEM}.md", md), write_text(tables_dir / f"{STEM}.tex", tex)
