"""The verifier's calibration table: expected vs observed gate status for every fixture, per profile.

Rendered from committed verdict rows (results/verifier/calibration.parquet); byte-deterministic (sorted rows,
fixed float formats, no timestamps).
"""

from __future__ import annotations

import json
import statistics

from lethe.verifier import fixtures as F


def calibration_table(rows: list[dict]) -> list[dict]:
    """One line per CALIBRATION case and per conforming reference, with the observed status from ``rows``."""
    by_key = {(r["id"], r["profile"]): r for r in rows}
    out = []
    for ref in F.CONFORMING_REFS:
        r = by_key.get((f"{ref}:conforming", "strict"))
        failing = sorted(g for g, v in (r or {}).get("gates", {}).items() if v["status"] in ("fail", "error"))
        out.append({"gate": "all", "reference": ref, "candidate": "conforming", "profile": "strict",
                    "expected": "no fail", "observed": (", ".join(failing) or "no fail") if r else "missing",
                    "max_ratio": _max_ratio(r, None) if r else None, "seconds": r["seconds"] if r else None})
    for gate, ref, cand, profile, expected, _kb in F.CALIBRATION:
        r = by_key.get((f"{ref}:{cand}", profile))
        obs = r["gates"][gate]["status"] if r and r["status"] == "gated" else (r["status"] if r else "missing")
        out.append({"gate": gate, "reference": ref, "candidate": cand, "profile": profile, "expected": expected,
                    "observed": obs, "max_ratio": _max_ratio(r, gate) if r else None,
                    "seconds": r["seconds"] if r else None})
    return out


def _max_ratio(row: dict, gate: str | None) -> float | None:
    """Largest max_err_over_tol over the gate's probes (all gates when None)."""
    best = None
    for g, v in row.get("gates", {}).items():
        if gate is not None and g != gate:
            continue
        for p in json.loads(v["evidence"]).get("probes", {}).values():
            for o in list(p.get("outputs", [])) + list(p.get("checks", {}).values()):
                x = o.get("max_err_over_tol") if isinstance(o, dict) else None
                if isinstance(x, (int, float)):
                    best = x if best is None else max(best, x)
    return best


def _fmt(x: float | None, spec: str) -> str:
    return "–" if x is None else format(x, spec)


def render_markdown(table: list[dict]) -> str:
    agree = sum(1 for t in table if t["observed"] == t["expected"])
    secs = [t["seconds"] for t in table if t["seconds"] is not None]
    lines = [
        "| gate | reference | candidate | profile | expected | observed | max err/tol | s/kernel |",
        "|---|---|---|---|---|---|---:|---:|",
    ]
    for t in table:
        lines.append(f"| {t['gate']} | {t['reference']} | {t['candidate']} | {t['profile']} | {t['expected']} | "
                     f"{t['observed']} | {_fmt(t['max_ratio'], '.3g')} | {_fmt(t['seconds'], '.1f')} |")
    lines.append("")
    lines.append(f"{agree}/{len(table)} cases observed as expected; median wall time per kernel "
                 f"{_fmt(statistics.median(secs) if secs else None, '.1f')} s (sandboxed, one run per kernel "
                 f"graded under every profile).")
    return "\n".join(lines) + "\n"


def render_latex(table: list[dict]) -> str:
    def esc(s: str) -> str:
        return s.replace("_", r"\_").replace("&", r"\&")

    lines = [r"\begin{tabular}{llllllrr}", r"\toprule",
             r"gate & reference & candidate & profile & expected & observed & err/tol & s \\", r"\midrule"]
    for t in table:
        lines.append(" & ".join([esc(t["gate"]), esc(t["reference"]), esc(t["candidate"]), esc(t["profile"]),
                                 esc(t["expected"]), esc(t["observed"]), _fmt(t["max_ratio"], ".3g"),
                                 _fmt(t["seconds"], ".1f")]) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines) + "\n"
