"""Root causes of a failed verdict: the failing gates grouped by what most likely went wrong.

One defect fails several gates: a running total kept in fp16 fails PRC-02 (its accumulator probes), ORD-01
(same-sign long rows), ORD-03 (cancellation rows) and, on long enough random rows, CMP-01 and CMP-03 too. A
reward loop wants the one defect, not seven gate names. The grouping works on the failing (gate, probe) pairs
of a verdict, because the probe says which inputs exposed the failure:

1. each failing pair gets a *symptom* from its probe (``SYMPTOMS``; RES-01/RES-02/ORD-02 from the gate alone,
   since their probes name launches or properties, not inputs);
2. the value symptoms collapse into one root when one of them explains the rest (:func:`_value_root`): errors on
   ordinary random inputs explain errors on every other value probe; a narrow accumulator explains the random-
   input errors too when its own probes (all-ones / same-sign / bracketed rows, where any fp32 order is exact)
   err at least as much as the random inputs do, since an accumulator's error is largest exactly there;
3. property symptoms (non-determinism, aliasing, output dtype/device, hardware limits) stay causes of their own.

This is an inference from recorded evidence, not a proof: the red-team measurement (``measure``) says how often
the root named matches the defect each member was built with.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

#: symptom -> (what it means, probe-id pattern that shows it). Tried in order; the first match wins.
SYMPTOMS: dict[str, tuple[str, str]] = {
    "narrow_accumulator": ("a sum or product accumulated narrower than fp32 (or in an order that loses terms)",
                           r"(acc_|accb_|ord01|cancel|long_)"),
    "unstable_formula": ("a formula that cancels catastrophically (e.g. a one-pass variance)", r"offset$"),
    "subnormal_handling": ("subnormal inputs flushed or mishandled", r"subnormal$"),
    "nonfinite_handling": ("NaN/Inf not propagated as the reference does", r"nonfinite$"),
    "shape_specialisation": ("correct only at the benchmark's shape (hard-coded size, dropped tail)", r"shape_"),
    "wrong_gradient": ("the backward disagrees with the reference's gradient", r"grad$"),
    "reduced_precision": ("computes or stores narrower than the declared precision", r"prc_"),
    "wrong_values": ("wrong outputs on ordinary inputs", r"(rand\d+|zeros)$"),
    "extreme_magnitudes": ("wrong outputs on inputs of very large or very small magnitude", r"(large|small)$"),
}
#: Causes read from the gate alone (its probes are launches or properties, not inputs).
GATE_CAUSES = {"RES-02": ("hardware_limit", "a launched kernel exceeds a GPU's launch limits"),
               "RES-01": ("output_dtype_or_device", "the output has the wrong dtype or device")}
ORD02_CAUSES = {"repeat": ("non_deterministic", "repeated calls on the same input differ"),
                "overwrite": ("aliasing_or_stale_state", "the output aliases an input or a buffer a later call "
                                                         "overwrites")}
ORD02_DEFAULT = ("aliasing_or_stale_state", ORD02_CAUSES["overwrite"][1])
#: The symptoms whose evidence is the size of an error, and which one value defect can therefore explain.
VALUE_SYMPTOMS = tuple(SYMPTOMS)
#: Probes where any fp32 summation order is exact up to rounding: a narrow accumulator errs most here.
ACCUMULATOR_PROBES = r"(acc_|accb_|ord01)"
CAUSE_WORDS = {k: v[0] for k, v in SYMPTOMS.items()} | {v[0]: v[1] for v in GATE_CAUSES.values()} | \
    {v[0]: v[1] for v in ORD02_CAUSES.values()}


def symptom(gate: str, probe: str) -> str:
    """The symptom of one failing (gate, probe) pair (see ``SYMPTOMS``); ``unexplained`` when none matches."""
    if gate in GATE_CAUSES:
        return GATE_CAUSES[gate][0]
    if gate == "ORD-02":
        return ORD02_CAUSES.get(probe, ORD02_DEFAULT)[0]
    for name, (_, pattern) in SYMPTOMS.items():
        if re.search(pattern, probe):
            return name
    return "unexplained"


def _pairs(gates: Mapping[str, Any]) -> list[tuple[str, str, float | None]]:
    """(gate, probe, that probe's largest err/tol in the gate) for every failing pair of a Verdict's gates."""
    out = []
    for g, v in gates.items():
        if v.status not in ("fail", "error"):
            continue
        per_probe: dict[str, float | None] = {}
        for c in v.checks:
            if not c.ok:
                m = c.max_err_over_tol
                old = per_probe.get(c.probe)
                per_probe[c.probe] = m if old is None else (old if m is None else max(old, m))
        if not per_probe:
            per_probe = {"(no probe named)": v.margin}
        out.extend((g, p, m) for p, m in per_probe.items())
    return out


def _worst(ms: Iterable[float | None]) -> float | None:
    vals = [m for m in ms if m is not None]
    return max(vals) if vals else None


def _value_root(by_symptom: Mapping[str, list[tuple[str, str, float | None]]]) -> str | None:
    """The value symptom that explains every other value symptom present, or None if there are none.

    A narrow accumulator when its order-exact probes are out of contract by the size of their error (err/tol
    > 1, not a non-finite or shape failure) and err at least as much as the random inputs (or those pass); else wrong values on random inputs when those fail; else, with a single value symptom
    present, that one; else None (several independent value symptoms, none explaining the others)."""
    present = [s for s in VALUE_SYMPTOMS if s in by_symptom]
    if not present:
        return None
    if "narrow_accumulator" in by_symptom:
        acc = _worst(m for _, p, m in by_symptom["narrow_accumulator"] if re.search(ACCUMULATOR_PROBES, p))
        rand = _worst(m for _, _, m in by_symptom.get("wrong_values", []))
        if acc is not None and acc > 1 and (rand is None or acc >= rand):
            return "narrow_accumulator"
    if "wrong_values" in by_symptom:
        return "wrong_values"
    return present[0] if len(present) == 1 else None


def root_causes(verdict) -> list[dict[str, Any]]:
    """The root causes of a :class:`~lethe.verifier.verdict.Verdict`, worst first:
    ``[{"cause", "words", "gates", "probes", "worst_margin", "explains"}]`` (``explains``: the other symptoms
    folded into this cause). Empty for a passing verdict; one ``row_status`` cause for a row that never reached
    grading (it failed to compile, load or finish: no gate evidence to group)."""
    if verdict.passed:
        return []
    if verdict.status != "gated":
        return [{"cause": f"row_{verdict.status}", "words": verdict.error[:200] or verdict.status, "gates": [],
                 "probes": [], "worst_margin": None, "explains": []}]
    by_symptom: dict[str, list[tuple[str, str, float | None]]] = {}
    for g, p, m in _pairs(verdict.gates):
        by_symptom.setdefault(symptom(g, p), []).append((g, p, m))
    root = _value_root(by_symptom)
    groups: dict[str, dict[str, Any]] = {}
    for s, pairs in by_symptom.items():
        owner = root if (root is not None and s in VALUE_SYMPTOMS) else s
        grp = groups.setdefault(owner, {"cause": owner, "words": CAUSE_WORDS.get(owner, owner), "pairs": [],
                                        "explains": set()})
        grp["pairs"].extend(pairs)
        if s != owner:
            grp["explains"].add(s)
    out = []
    for grp in groups.values():
        pairs = grp.pop("pairs")
        out.append({**grp, "gates": sorted({g for g, _, _ in pairs}), "probes": sorted({p for _, p, _ in pairs}),
                    "worst_margin": _worst(m for _, _, m in pairs), "explains": sorted(grp["explains"])})
    return sorted(out, key=lambda c: (-len(c["gates"]), c["cause"]))


#: The defect each red-team member was built with, read from its id prefix (the gate it targets).
INTENDED_CAUSES = {"cmp01": {"wrong_values", "extreme_magnitudes"}, "cmp02": {"wrong_gradient"},
                   "cmp03": {"shape_specialisation"}, "exc01": {"nonfinite_handling"},
                   "exc02": {"subnormal_handling"}, "ord01": {"narrow_accumulator"},
                   "ord02": {"non_deterministic", "aliasing_or_stale_state"},
                   "ord03": {"narrow_accumulator", "unstable_formula"}, "prc01": {"reduced_precision"},
                   "prc02": {"narrow_accumulator"}, "res01": {"output_dtype_or_device"},
                   "res02": {"hardware_limit"}}


def measure(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Over failing verdict rows: failing gates vs root causes per row, how many collapse to one cause, and (for
    red-team ids, whose prefix names the defect) whether the first cause is the one the member was built with."""
    from lethe.verifier.verdict import Verdict

    recs, not_judged = [], 0
    for row in rows:
        v = Verdict.from_row(dict(row))
        if v.status in ("ref_broken", "not_auditable"):  # the kernel was never judged: no cause of its own
            not_judged += 1
            continue
        if v.passed:
            continue
        causes = root_causes(v)
        intended = INTENDED_CAUSES.get(str(row["id"]).split("_")[0])
        recs.append({"id": v.id, "profile": v.profile, "device": v.device, "failed_gates": len(v.failed_gates),
                     "causes": [c["cause"] for c in causes],
                     "first_is_intended": None if intended is None else bool(causes and causes[0]["cause"]
                                                                             in intended),
                     "intended_among": None if intended is None else any(c["cause"] in intended for c in causes)})
    judged = [r for r in recs if r["first_is_intended"] is not None]
    return {"failing": len(recs), "not_judged": not_judged, "one_cause": sum(1 for r in recs if len(r["causes"]) == 1),
            "failed_gates": sum(r["failed_gates"] for r in recs), "causes": sum(len(r["causes"]) for r in recs),
            "with_intent": len(judged), "first_is_intended": sum(1 for r in judged if r["first_is_intended"]),
            "intended_among": sum(1 for r in judged if r["intended_among"]), "rows": recs}


def measure_corpora(rows_by_corpus: Mapping[str, Iterable[Mapping[str, Any]]]) -> dict[str, Any]:
    """The causes document: :func:`measure` per corpus of committed rows (one profile)."""
    return {"schema": "lethe.causes/1", "corpora": {c: measure(rows) for c, rows in rows_by_corpus.items()}}


def render(doc: Mapping[str, Any], md: str, tex: str) -> None:
    """The root-cause table: per corpus, failing rows, failed gates against causes, rows with one cause, and (on
    the red team) how often the first cause is the defect the member was built with; the misses are named."""
    from lethe.render.tables import render_table

    recs = []
    for corpus, m in doc["corpora"].items():
        misses = [r["id"] for r in m["rows"] if r["first_is_intended"] is False]
        recs.append({"corpus": corpus, "failing": m["failing"], "gates": m["failed_gates"], "causes": m["causes"],
                     "one": m["one_cause"],
                     "first": f"{m['first_is_intended']} of {m['with_intent']}" if m["with_intent"] else "–",
                     "among": f"{m['intended_among']} of {m['with_intent']}" if m["with_intent"] else "–",
                     "misses": ", ".join(misses) or "–"})
    render_table(recs, [("corpus", "rows (strict)"), ("failing", "failing rows"), ("gates", "failed gates"),
                        ("causes", "root causes"), ("one", "rows with one cause"),
                        ("first", "first cause = built-in defect"), ("among", "built-in defect among causes"),
                        ("misses", "first cause is another")],
                 "Failed gates grouped into root causes (Verdict.reward()['causes'])", "tab:verifier-causes",
                 md, tex,
                 notes=["Built-in defect: the gate family a red-team member's id names (e.g. prc02 = a narrow "
                        "accumulator); the mixed run has no such label.",
                        "Rows whose reference is broken or that cannot be audited are not counted (no verdict of "
                        "the kernel's own)."])
