"""Second-corpus summaries: gate breakdown, precision-dominated raw rate vs residual, three-way agreement,
and audit throughput. Pure functions over verdict rows (``lethe.verdict/1``) and KernelBench check rows.

Why a residual: the archive's kernels are fp32-only, so the precision gates (PRC-01, PRC-02) flag nearly every
row and the raw finding rate says little. The paper leads with the rate after removing those two gates; we
report both, per contract profile.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

PRECISION_GATES = ("PRC-01", "PRC-02")
FAILING = ("fail", "error")


def failed(row: Mapping[str, Any], exclude: Iterable[str] = ()) -> list[str]:
    """Gates of a gated row that failed or errored, minus ``exclude``."""
    skip = set(exclude)
    return sorted(g for g, v in (row.get("gates") or {}).items() if v["status"] in FAILING and g not in skip)


def gate_breakdown(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per-profile counts over gated rows: per-gate failures, raw finding rate, residual without precision."""
    out: dict[str, Any] = {}
    for profile in sorted({r["profile"] for r in rows}):
        mine = [r for r in rows if r["profile"] == profile]
        gated = [r for r in mine if r["status"] == "gated"]
        per_gate = Counter(g for r in gated for g in failed(r))
        raw = sum(1 for r in gated if failed(r))
        residual = sum(1 for r in gated if failed(r, PRECISION_GATES))
        out[profile] = {
            "rows": len(mine),
            "status_counts": dict(sorted(Counter(r["status"] for r in mine).items())),
            "gated": len(gated),
            "findings_raw": raw,
            "rate_raw": raw / len(gated) if gated else None,
            "findings_excl_precision": residual,
            "rate_excl_precision": residual / len(gated) if gated else None,
            "gate_fail_counts": dict(sorted(per_gate.items(), key=lambda kv: (-kv[1], kv[0]))),
        }
    return out


def battery_pass(row: Mapping[str, Any]) -> bool | None:
    """True when gated with no failing gate, False when gated with one; None when never gated."""
    if row["status"] != "gated":
        return None
    return not failed(row)


def three_way(verdicts: Sequence[Mapping[str, Any]], kb_rows: Sequence[Mapping[str, Any]],
              labels: Mapping[str, bool], profile: str = "strict") -> list[dict[str, Any]]:
    """Counts over (Sakana's Correct label, KernelBench paper-era accept, battery pass) for one profile.

    A row enters only when all three verdicts exist (KernelBench timeouts and never-gated rows are left out
    and counted in ``excluded``).
    """
    kb = {r["id"]: r for r in kb_rows}
    cells: Counter = Counter()
    excluded = 0
    for v in verdicts:
        if v["profile"] != profile:
            continue
        k = kb.get(v["id"])
        bp = battery_pass(v)
        if k is None or bp is None or k.get("outcome") == "timeout" or v["id"] not in labels:
            excluded += 1
            continue
        cells[(bool(labels[v["id"]]), bool(k.get("correct")), bp)] += 1
    table = [
        {"sakana_correct": s, "kernelbench_accepts": kbv, "battery_passes": b, "kernels": cells[(s, kbv, b)]}
        for s in (True, False) for kbv in (True, False) for b in (True, False)
    ]
    table.append({"sakana_correct": None, "kernelbench_accepts": None, "battery_passes": None,
                  "kernels": excluded, "note": "excluded: KernelBench timeout or never gated"})
    return table


def _pct(xs: Sequence[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def throughput(seconds: Sequence[float]) -> dict[str, Any]:
    """Median and p90 of per-kernel seconds (linear interpolation between order statistics)."""
    return {"n": len(seconds), "median": statistics.median(seconds) if seconds else None,
            "p90": _pct(list(seconds), 0.9)}


def published_elapsed(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The paper's per-kernel times (``elapsed_s`` of its gated rows, measured on a B200)."""
    return throughput([float(r["elapsed_s"]) for r in rows if r.get("status") == "gated" and r.get("elapsed_s")])


# ---- per-kernel time of the full battery, and the throughput summary committed as throughput.json ----

BATTERY_PHASES = ("reference_s", "candidate_s", "grade_s", "aot_s")
DETAIL_PHASES = ("reference_s", "candidate_s", "candidate_child_s", "candidate_load_s", "candidate_probes_s",
                 "grade_s", "aot_s")
WARM_REFERENCE_S = 1.0  # a reference phase under this found the float64 reference already cached


def battery_seconds(timing: Mapping[str, Any]) -> float:
    """Seconds one kernel took through the whole battery, every profile graded.

    A verdict row's ``seconds`` is cumulative when that profile's row was made, so the first profile's row leaves
    out the grading of the others; the phases add up to the whole: reference + candidate process + grading of
    every profile (+ ahead-of-time compilation where it ran).
    """
    return float(sum(float(timing.get(k) or 0.0) for k in BATTERY_PHASES))


def is_cold(timing: Mapping[str, Any]) -> bool:
    """True when this kernel paid the float64 reference (the first kernel of its task); later ones hit the cache."""
    return float(timing.get("reference_s") or 0.0) >= WARM_REFERENCE_S


def _summary(xs: Sequence[float], digits: int = 3) -> dict[str, Any]:
    t = throughput(list(xs))
    return {"n": t["n"], **{k: (round(t[k], digits) if t[k] is not None else None) for k in ("median", "p90")}}


def throughput_summary(timings: Sequence[Mapping[str, Any]], compile_rows: Sequence[Mapping[str, Any]], *,
                       compile_wall_s: float | None, workers: int | None,
                       published: Mapping[str, Mapping[str, Any]] | None = None,
                       kb_rows: Sequence[Mapping[str, Any]] = (),
                       scaling: Sequence[Mapping[str, Any]] | str = "not measured",
                       goal: Mapping[str, float] | None = None) -> dict[str, Any]:
    """What throughput.json holds: per-kernel battery seconds (all, cold, warm), phase medians, compilation,
    KernelBench's check, the paper's published per-kernel times, and the goal against what was measured.

    ``timings``: one dict per audited kernel (the experiment's timings.jsonl); only gated kernels count.
    ``compile_rows``: one per build attempt (``compiled``, ``compile_seconds``).
    """
    gated = [t for t in timings if t.get("status") == "gated"]
    full = [battery_seconds(t) for t in gated]
    cold = [t for t in gated if is_cold(t)]
    warm = [t for t in gated if not is_cold(t)]
    builds = [c for c in compile_rows if "compile_seconds" in c]
    built = [float(c["compile_seconds"]) for c in builds if c.get("compiled")]
    out: dict[str, Any] = {
        "kernels_audited": len(timings),
        "kernels_timed": len(gated),
        "per_kernel_s": {**_summary(full),
                         "definition": "reference_s + candidate_s + grade_s (+ aot_s): the whole battery, every "
                                       "contract profile graded from one candidate run; compilation excluded"},
        "per_kernel_cold_s": {**_summary([battery_seconds(t) for t in cold]),
                              "ids": [t["id"] for t in cold],
                              "reference_s": [round(float(t["reference_s"]), 3) for t in cold]},
        "per_kernel_warm_s": _summary([battery_seconds(t) for t in warm]),
        "phases_s": {k: _summary([float(t[k]) for t in gated if t.get(k) is not None])
                     for k in DETAIL_PHASES if any(t.get(k) is not None for t in gated)},
        "phases_warm_s": {k: _summary([float(t[k]) for t in warm if t.get(k) is not None])
                          for k in DETAIL_PHASES if any(t.get(k) is not None for t in warm)},
        "compile_s": {**_summary(built), "builds": len(builds), "built": len(built),
                      "failed": len(builds) - len(built), "wall_parallel": compile_wall_s, "workers": workers,
                      "wall_per_build": (round(compile_wall_s / len(builds), 3)
                                         if compile_wall_s and builds else None)},
        "scaling": list(scaling) if not isinstance(scaling, str) else scaling,
    }
    if kb_rows:
        out["kernelbench_s"] = _summary([float(k["seconds"]) for k in kb_rows if k.get("seconds") is not None])
    if published:
        out["published_b200_s"] = {k: dict(v) for k, v in published.items()}
    if goal:
        med = out["per_kernel_s"]["median"]
        out["goal"] = {**goal, "measured_kernels": len(gated), "measured_median_s": med,
                       "measured_warm_median_s": out["per_kernel_warm_s"]["median"],
                       "met": bool(len(gated) >= goal["kernels"] and med is not None
                                   and med < goal["per_kernel_s"])}
    return out


def kb_outcomes(kb_rows: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """KernelBench check outcomes (correct, incorrect, compile_fail, timeout, ...) with their counts."""
    return dict(sorted(Counter(str(k.get("outcome")) for k in kb_rows).items()))


def gate_status_counts(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, dict[str, int]]]:
    """profile -> gate -> {status: rows} over gated rows (pass, fail, na, error)."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for r in rows:
        if r["status"] != "gated":
            continue
        per = out.setdefault(r["profile"], {})
        for g, v in (r.get("gates") or {}).items():
            c = per.setdefault(g, {})
            c[v["status"]] = c.get(v["status"], 0) + 1
    return {p: {g: dict(sorted(c.items())) for g, c in sorted(per.items())} for p, per in sorted(out.items())}
