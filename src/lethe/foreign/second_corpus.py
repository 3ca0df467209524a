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
