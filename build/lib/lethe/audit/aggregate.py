"""Aggregation of verdict rows into the paper's corpus figures: funnel, tolerance-free floor, channels.

Every function here is pure: it takes verdict rows (dicts) and returns plain dicts of counts and rates, so the
same code grades the paper's published per-row records (``data/published/audit_rows.jsonl.gz``) and this
project's own audit output, and the two can be compared figure by figure.

Row shape (``lethe.verifier.records``; the published records use the same keys)::

    {"id": "21", "op_class": "softmax", "status": "gated" | "cand_native_fail" | "cand_load_fail"
     | "sandbox_timeout" | "not_auditable" | "ref_broken", "final_speedup": 0.34, "error": "..." | None,
     "output_aliasing": bool, "profile": "strict", "gates": {"EXC-01": {"status": "pass|fail|na|error",
     "reason": "..."}, ...}}

The row-level rules were recovered from the published records (see ``docs/audit.md``); each is a named
constant in :class:`Rules` so that a different verifier vocabulary can be mapped without touching the maths.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# Denominator drop reasons, in funnel order. The names are the published ones (audit_floor_ablation.json).
NOT_ACCEPTED = "not_accepted"
REFERENCE_NOT_EXECUTABLE = "reference_not_executable"
TOOLCHAIN_ARTIFACT = "toolchain_or_compile_artifact"
# Our own pipeline adds one reason the paper's records never needed (0 there): no verdict exists because no
# candidate could be extracted or the harness itself failed. Charging either to the kernel would be wrong.
NO_VERDICT = "no_verdict"
DROP_REASONS = (NOT_ACCEPTED, NO_VERDICT, REFERENCE_NOT_EXECUTABLE, TOOLCHAIN_ARTIFACT)

# The tolerance-free floor: each channel is a violation that needs no numerical tolerance to call.
FLOOR_CHANNELS = ("exc01", "ord02", "aliasing", "crash", "pre_gate")
# EXC-02 is held out of the headline floor (the paper reports the floor with and without it).
FLOOR_WITH_EXC02_CHANNELS = (*FLOOR_CHANNELS, "exc02")
# Every channel a row can carry; cmp03_* split CMP-03 failures into hard rejections and value mismatches.
ALL_CHANNELS = ("exc01", "ord02", "aliasing", "crash", "pre_gate", "exc02", "cmp03_hard", "cmp03_value")


@dataclass(frozen=True)
class Rules:
    """Row-level classification rules; the defaults reproduce the paper's published aggregates exactly.

    Why each default holds (evidence in docs/audit.md):
    - ``gated_status``: only rows that reached the gates have gate verdicts; every other status is a failure
      before gating (or a drop).
    - ``reference_statuses``: the published "reference executable" step removes ``ref_broken`` (the float64
      reference raised) and ``not_auditable`` (the harness could not build a floating-point input for the
      reference), 51 accepted rows, all ``not_auditable``.
    - ``artifact_error``: a candidate that never ran because the Triton toolchain rejected it is a property of
      the compiler version, not of the kernel's contract; exactly these four leading exception names give the
      published 281. ``unpickle`` catches sandbox transport failures (none occur in the published records).
    - ``crash_reason``: a gate that crashed with a CUDA error (device-side assert, illegal address) is a
      memory-safety finding; other gate exceptions (e.g. an op the gate harness cannot apply, CUDA OOM at a
      stress shape) are not. This gives the published 16 (accepted) / 18 (all).
    - ``cmp03_hard_reason``: a CMP-03 failure is a shape *rejection* when the candidate raised at some
      non-native shape (it refuses inputs the reference accepts); every other CMP-03 failure (values beyond
      tolerance, NaN, or an output of the wrong shape) is a value mismatch. Counting output-shape mismatches as
      hard too gives 91/73 rather than the published 72/70. "candidate raised on an input" is lethe.verifier's
      wording of the same event.
    """

    gated_status: str = "gated"
    no_verdict_statuses: frozenset[str] = frozenset({"no_candidate", "harness_error"})
    reference_statuses: frozenset[str] = frozenset({"ref_broken", "not_auditable"})
    artifact_error: re.Pattern[str] = field(
        default_factory=lambda: re.compile(
            r"^\s*(?:triton\.[\w.]*\.)?(CompilationError|UnsupportedLanguageConstruct|OutOfResources|PTXASError)\b"
        )
    )
    unpickle_error: re.Pattern[str] = field(default_factory=lambda: re.compile(r"unpickl", re.IGNORECASE))
    artifact_statuses: frozenset[str] = frozenset({"toolchain_artifact"})
    crash_reason: re.Pattern[str] = field(default_factory=lambda: re.compile(r"CUDA error"))
    # lethe.verifier's own vocabulary: the candidate process died (signal, sticky CUDA error) while it ran
    # the probes. The published records have no such status; it is a crash finding, not a failure to start.
    crash_statuses: frozenset[str] = frozenset({"crash"})
    cmp03_hard_reason: re.Pattern[str] = field(
        default_factory=lambda: re.compile(r"exception —|candidate raised on an input")
    )


DEFAULT_RULES = Rules()


# ----------------------------------------------------------------------------------------------- row level


def normalize_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row with ``gates`` as a dict and missing/NaN fields made explicit.

    Parquet round trips store ``gates`` as a JSON string and turn ``None`` into NaN; aggregation must see the
    same row whichever file format it came from.
    """
    out = dict(row)
    gates = out.get("gates")
    if isinstance(gates, str):
        gates = json.loads(gates) if gates else {}
    out["gates"] = dict(gates) if gates else {}
    err = out.get("error")
    if isinstance(err, float) and math.isnan(err):
        err = None
    out["error"] = err
    fs = out.get("final_speedup")
    if fs is None or (isinstance(fs, float) and math.isnan(fs)):
        fs = None
    out["final_speedup"] = fs
    out["id"] = str(out.get("id"))
    return out


def is_accepted(row: Mapping[str, Any]) -> bool:
    """The corpus's own acceptance predicate: final_speedup > 0 (missing speedup = not accepted)."""
    fs = row.get("final_speedup")
    return fs is not None and not (isinstance(fs, float) and math.isnan(fs)) and fs > 0


def is_gated(row: Mapping[str, Any], rules: Rules = DEFAULT_RULES) -> bool:
    return row.get("status") == rules.gated_status


def reference_executable(row: Mapping[str, Any], rules: Rules = DEFAULT_RULES) -> bool:
    """False when the reference itself could not be run, so no verdict about the candidate is possible."""
    return row.get("status") not in rules.reference_statuses


def is_toolchain_artifact(row: Mapping[str, Any], rules: Rules = DEFAULT_RULES) -> bool:
    """True for a candidate that failed before gating because the toolchain rejected it.

    Such a failure says nothing about the candidate's contract under a different compiler, so it is dropped
    from the denominator rather than counted as a finding.
    """
    if is_gated(row, rules) or not reference_executable(row, rules) or row.get("status") in rules.no_verdict_statuses:
        return False
    if row.get("status") in rules.artifact_statuses:
        return True
    err = row.get("error") or ""
    return bool(rules.artifact_error.match(err) or rules.unpickle_error.search(err))


def drop_reason(
    row: Mapping[str, Any], *, require_accepted: bool = True, rules: Rules = DEFAULT_RULES
) -> str | None:
    """The first funnel stage that removes this row, or None when it stays in the denominator."""
    if require_accepted and not is_accepted(row):
        return NOT_ACCEPTED
    if row.get("status") in rules.no_verdict_statuses:
        return NO_VERDICT
    if not reference_executable(row, rules):
        return REFERENCE_NOT_EXECUTABLE
    if is_toolchain_artifact(row, rules):
        return TOOLCHAIN_ARTIFACT
    return None


def _gate_status(row: Mapping[str, Any], gid: str) -> str | None:
    g = row.get("gates", {}).get(gid)
    return g.get("status") if isinstance(g, Mapping) else None


def _gate_reason(row: Mapping[str, Any], gid: str) -> str:
    g = row.get("gates", {}).get(gid)
    return (g.get("reason") or "") if isinstance(g, Mapping) else ""


def is_crash(row: Mapping[str, Any], rules: Rules = DEFAULT_RULES) -> bool:
    """True when some gate crashed with a CUDA error while the candidate ran under it (or, in this project's
    verifier, the candidate process itself died while running the probes)."""
    if row.get("status") in rules.crash_statuses:
        return True
    if not is_gated(row, rules):
        return False
    return any(
        isinstance(g, Mapping) and g.get("status") == "error" and rules.crash_reason.search(g.get("reason") or "")
        for g in row.get("gates", {}).values()
    )


def any_gate_fail(row: Mapping[str, Any], rules: Rules = DEFAULT_RULES) -> bool:
    return is_gated(row, rules) and any(
        isinstance(g, Mapping) and g.get("status") == "fail" for g in row.get("gates", {}).values()
    )


def channels(row: Mapping[str, Any], rules: Rules = DEFAULT_RULES) -> frozenset[str]:
    """Every finding channel a row in the denominator carries.

    ``pre_gate`` is a candidate that failed to load, run or finish before the gates for a reason that is not a
    toolchain artifact: it shipped as accepted yet cannot execute, which needs no tolerance to call.
    """
    found: set[str] = set()
    if not is_gated(row, rules):
        if (reference_executable(row, rules) and not is_toolchain_artifact(row, rules)
                and row.get("status") not in rules.no_verdict_statuses):
            found.add("crash" if row.get("status") in rules.crash_statuses else "pre_gate")
        return frozenset(found)
    if _gate_status(row, "EXC-01") == "fail":
        found.add("exc01")
    if _gate_status(row, "ORD-02") == "fail":
        found.add("ord02")
    if _gate_status(row, "EXC-02") == "fail":
        found.add("exc02")
    if row.get("output_aliasing") is True:
        found.add("aliasing")
    if is_crash(row, rules):
        found.add("crash")
    if _gate_status(row, "CMP-03") == "fail":
        hard = rules.cmp03_hard_reason.search(_gate_reason(row, "CMP-03"))
        found.add("cmp03_hard" if hard else "cmp03_value")
    return frozenset(found)


def is_violation(row: Mapping[str, Any], rules: Rules = DEFAULT_RULES) -> bool:
    """Any violation: a failed gate, a CUDA crash during gating, or a non-artifact failure before gating.

    Output aliasing alone is not counted here: the published 62.1% leaves it out (9 accepted rows alias their
    output without failing any gate; adding them gives 1,648 rather than the published 1,639).
    """
    ch = channels(row, rules)
    return any_gate_fail(row, rules) or "crash" in ch or "pre_gate" in ch


# ------------------------------------------------------------------------------------------------ corpus level


def _rate(k: int, n: int) -> float | None:
    """A rate rounded to four places, the precision the paper publishes (None on an empty denominator)."""
    return round(k / n, 4) if n else None


def funnel(
    rows: Sequence[Mapping[str, Any]], *, require_accepted: bool = True, rules: Rules = DEFAULT_RULES
) -> dict[str, Any]:
    """Stage counts of the denominator funnel and, for every dropped row, its reason.

    Stages: all rows -> accepted (final_speedup > 0) -> has a verdict -> reference executable -> not a
    toolchain artifact. "has a verdict" removes nothing from the published records.
    With ``require_accepted=False`` the first step keeps every row (the published "all" view).
    """
    reasons = {r["id"]: drop_reason(r, require_accepted=require_accepted, rules=rules) for r in rows}
    dropped = Counter(v for v in reasons.values() if v is not None)
    n0 = len(rows)
    n1 = n0 - dropped[NOT_ACCEPTED]
    n1v = n1 - dropped[NO_VERDICT]
    n2 = n1v - dropped[REFERENCE_NOT_EXECUTABLE]
    n3 = n2 - dropped[TOOLCHAIN_ARTIFACT]
    return {
        "rows": n0,
        "accepted": n1,
        "has_verdict": n1v,
        "reference_executable": n2,
        "not_toolchain_artifact": n3,
        "dropped": {k: dropped[k] for k in DROP_REASONS},
        "dropped_ids": {k: sorted((i for i, v in reasons.items() if v == k), key=_id_key) for k in DROP_REASONS},
    }


def _id_key(i: str) -> tuple[int, int | str]:
    return (0, int(i)) if i.isdigit() else (1, i)


def denominator(
    rows: Iterable[Mapping[str, Any]], *, require_accepted: bool = True, rules: Rules = DEFAULT_RULES
) -> list[Mapping[str, Any]]:
    """The rows that survive the funnel: the population every rate is over."""
    return [r for r in rows if drop_reason(r, require_accepted=require_accepted, rules=rules) is None]


def floor(
    den: Sequence[Mapping[str, Any]], chans: Sequence[str] = FLOOR_CHANNELS, rules: Rules = DEFAULT_RULES
) -> dict[str, Any]:
    """Kernels carrying at least one of ``chans`` (a union, so a kernel counts once), over the denominator."""
    wanted = set(chans)
    k = sum(1 for r in den if channels(r, rules) & wanted)
    return {"kernels": k, "denominator": len(den), "rate": _rate(k, len(den))}


def any_violation(den: Sequence[Mapping[str, Any]], rules: Rules = DEFAULT_RULES) -> dict[str, Any]:
    k = sum(1 for r in den if is_violation(r, rules))
    return {"kernels": k, "denominator": len(den), "rate": _rate(k, len(den))}


def per_channel(den: Sequence[Mapping[str, Any]], rules: Rules = DEFAULT_RULES) -> dict[str, int]:
    """Rows per channel (a row may count in several channels)."""
    c: Counter[str] = Counter()
    for r in den:
        c.update(channels(r, rules))
    return {ch: c[ch] for ch in ALL_CHANNELS}


def per_gate(den: Sequence[Mapping[str, Any]], rules: Rules = DEFAULT_RULES) -> dict[str, dict[str, int]]:
    """Gate-status counts over the gated rows of the denominator: {gate: {pass|fail|na|error: n}}."""
    out: dict[str, Counter[str]] = defaultdict(Counter)
    for r in den:
        if not is_gated(r, rules):
            continue
        for gid, g in r.get("gates", {}).items():
            if isinstance(g, Mapping) and g.get("status"):
                out[gid][g["status"]] += 1
    return {gid: dict(sorted(out[gid].items())) for gid in sorted(out)}


def per_gate_fail(den: Sequence[Mapping[str, Any]], rules: Rules = DEFAULT_RULES) -> dict[str, int]:
    return {gid: c.get("fail", 0) for gid, c in per_gate(den, rules).items()}


def class_sensitivity(
    den: Sequence[Mapping[str, Any]], chans: Sequence[str] = FLOOR_CHANNELS, rules: Rules = DEFAULT_RULES
) -> dict[str, dict[str, Any]]:
    """Per operator class: its size, its own floor, and the corpus floor with that class removed.

    The second figure answers whether one class (reduction, in the paper) carries the headline on its own.
    """
    wanted = set(chans)
    by_cls: dict[str, list[bool]] = defaultdict(list)
    for r in den:
        by_cls[str(r.get("op_class"))].append(bool(channels(r, rules) & wanted))
    total_k = sum(sum(v) for v in by_cls.values())
    total_n = len(den)
    out = {}
    for cls in sorted(by_cls):
        hits = by_cls[cls]
        out[cls] = {
            "kernels": len(hits),
            "findings": sum(hits),
            "own_floor_rate": _rate(sum(hits), len(hits)),
            "corpus_floor_without_class": _rate(total_k - sum(hits), total_n - len(hits)),
        }
    return out


def per_class_findings(den: Sequence[Mapping[str, Any]], rules: Rules = DEFAULT_RULES) -> dict[str, dict[str, Any]]:
    """Per class: gated rows, pre-gate findings, gate-or-crash findings and the any-violation rate."""
    out: dict[str, dict[str, int]] = defaultdict(lambda: Counter())
    for r in den:
        c = out[str(r.get("op_class"))]
        c["kernels"] += 1
        ch = channels(r, rules)
        if is_gated(r, rules):
            c["gated"] += 1
            if any_gate_fail(r, rules) or "crash" in ch:
                c["gate_or_crash_findings"] += 1
        elif "crash" in ch:
            c["gate_or_crash_findings"] += 1
        elif "pre_gate" in ch:
            c["pre_gate_findings"] += 1
    result = {}
    for cls in sorted(out):
        c = out[cls]
        k = c["gate_or_crash_findings"] + c["pre_gate_findings"]
        result[cls] = {
            "kernels": c["kernels"],
            "gated": c["gated"],
            "pre_gate_findings": c["pre_gate_findings"],
            "gate_or_crash_findings": c["gate_or_crash_findings"],
            "any_violation_rate": _rate(k, c["kernels"]),
        }
    return result


def summarize(
    rows: Iterable[Mapping[str, Any]], *, require_accepted: bool = True, rules: Rules = DEFAULT_RULES
) -> dict[str, Any]:
    """Every corpus figure for one population of rows (one profile, one corpus)."""
    rows = [normalize_row(r) for r in rows]
    den = denominator(rows, require_accepted=require_accepted, rules=rules)
    gated = [r for r in den if is_gated(r, rules)]
    fl = floor(den, FLOOR_CHANNELS, rules)
    return {
        "funnel": funnel(rows, require_accepted=require_accepted, rules=rules),
        "status_counts": dict(sorted(Counter(str(r.get("status")) for r in rows
                                             if not require_accepted or is_accepted(r)).items())),
        "floor": fl,
        "floor_with_exc02": floor(den, FLOOR_WITH_EXC02_CHANNELS, rules),
        "floor_with_cmp03_hard": floor(den, (*FLOOR_CHANNELS, "cmp03_hard"), rules),
        "floor_with_cmp03_any": floor(den, (*FLOOR_CHANNELS, "cmp03_hard", "cmp03_value"), rules),
        "any_violation": any_violation(den, rules),
        "gated": len(gated),
        "any_gate_fail": sum(1 for r in gated if any_gate_fail(r, rules)),
        "per_channel": per_channel(den, rules),
        "per_gate": per_gate(den, rules),
        "per_gate_fail": per_gate_fail(den, rules),
        "class_sensitivity": class_sensitivity(den, FLOOR_CHANNELS, rules),
        "per_class_findings": per_class_findings(den, rules),
    }


def by_profile(
    rows: Iterable[Mapping[str, Any]], *, require_accepted: bool = True, rules: Rules = DEFAULT_RULES
) -> dict[str, dict[str, Any]]:
    """Floor, floor with EXC-02 and any-violation rate under each contract profile the rows were graded in.

    Rows without a ``profile`` key (the published records) are grouped under ``"unspecified"``.
    """
    groups: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[str(r.get("profile") or "unspecified")].append(normalize_row(r))
    out = {}
    for prof in sorted(groups):
        den = denominator(groups[prof], require_accepted=require_accepted, rules=rules)
        out[prof] = {
            "floor": floor(den, FLOOR_CHANNELS, rules),
            "floor_with_exc02": floor(den, FLOOR_WITH_EXC02_CHANNELS, rules),
            "any_violation": any_violation(den, rules),
            "per_channel": per_channel(den, rules),
        }
    return out


def aggregate(
    rows: Iterable[Mapping[str, Any]], *, require_accepted: bool = True, rules: Rules = DEFAULT_RULES
) -> dict[str, Any]:
    """The figures of the headline profile plus the floor under every profile present.

    When rows carry several profiles, the headline figures are those of ``strict`` when present (the paper's
    contract), otherwise of the single profile in the rows; rows are never pooled across profiles, since the
    same kernel appears once per profile.
    """
    rows = [normalize_row(r) for r in rows]
    profiles = sorted({str(r.get("profile") or "unspecified") for r in rows})
    head = "strict" if "strict" in profiles else profiles[0] if profiles else "unspecified"
    head_rows = [r for r in rows if str(r.get("profile") or "unspecified") == head]
    out = summarize(head_rows, require_accepted=require_accepted, rules=rules)
    out["headline_profile"] = head
    out["by_profile"] = by_profile(rows, require_accepted=require_accepted, rules=rules)
    return out
