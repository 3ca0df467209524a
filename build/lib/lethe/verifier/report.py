"""Human-readable verifier output: the one-row summary ``lethe verify`` prints, and the calibration table.

The summary shows text that the candidate or the reference wrote (error strings, exception messages, stdout
and stderr tails inside reasons). That text is escaped before it reaches a terminal (:func:`escape`), so a
kernel cannot print a line that looks like the verifier's own (a fake ``verdict: pass``), move the cursor,
or recolour the screen.

The calibration table is rendered from committed verdict rows (results/verifier/calibration.parquet);
byte-deterministic (sorted rows, fixed float formats, no timestamps).
"""

from __future__ import annotations

import json
import re
import statistics

from lethe.verifier import fixtures as F

# C0 controls, DEL, C1 controls (0x80-0x9f: CSI 0x9b starts an escape sequence on some terminals), and the
# Unicode line separators and bidirectional overrides that can make text display as something else.
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escape(text) -> str:
    """``text`` with every control character written visibly as an escape: newline as \\n, carriage return
    as \\r, tab as \\t, ESC as \\x1b, other C0/C1 controls as \\xNN and the Unicode separators and
    direction overrides as \\uNNNN. The result is one line that displays as exactly what it contains."""

    def one(m: re.Match) -> str:
        c = m.group()
        return _NAMED.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")

    return _CONTROLS.sub(one, str(text))


_MARK = {"pass": "ok  ", "fail": "FAIL", "na": "n/a ", "error": "ERR "}


def human_summary(row: dict, verdict: str, *, rows_path: str | None = None) -> str:
    """What ``lethe verify`` prints for one row: a header, the isolation, the error (if any), one line per gate
    with its margin, the failures grouped by the probe that exposed them (each probe said in words), the replay
    command, and the verdict. Every field is escaped (:func:`escape`), so each printed line is one of these and
    nothing else."""
    from lethe.verifier.verdict import Verdict, describe_probe

    v = Verdict.from_row(row)
    lines = [f"{escape(row['id'])}  status={escape(row['status'])}  profile={escape(row['profile'])}  "
             f"device={escape(row['device'])}  seed={row['seed']}  {row['seconds']:.1f}s"]
    iso = row.get("isolation", "")
    lines.append(f"  isolation: {escape(iso)}" + ("" if row.get("tamper_proof") else "  [NOT tamper-proof]"))
    if row.get("error"):
        lines.append(f"  error: {escape(row['error'][:500])}")
    for gid, g in v.gates.items():
        margin = f"  err/tol {g.margin:.3g}" if g.margin is not None and g.status in ("pass", "fail") else ""
        reason = f"  {escape(g.reason[:160])}" if g.reason else ""
        lines.append(f"  {escape(gid)}  {_MARK.get(g.status, escape(g.status))}{margin}{reason}")
    groups = v.by_probe()
    if groups:
        lines.append("failures by probe (one probe failing several gates is usually one cause):")
        for pid, gates in groups.items():
            lines.append(f"  {escape(pid)} ({escape(describe_probe(pid))}): {', '.join(gates)}")
            for gname in gates:
                for c in v.gates[gname].checks:
                    if c.probe == pid and not c.ok:
                        lines.append(f"    {gname} {escape(c.words())}")
                        break
    if v.failed_gates:
        target = rows_path or "ROWS.parquet"
        hint = "" if rows_path else "   (store the row first: lethe verify ... --out ROWS.parquet)"
        lines.append(f"replay: {escape(v.replay_command(target))}{hint}")
    lines.append(f"verdict: {escape(verdict)}")
    return "\n".join(lines)


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
