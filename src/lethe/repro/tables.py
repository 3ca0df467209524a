"""The repro table (paper/tables/repro.{md,tex}) from results/repro/summary.json (lethe.repro.measure)."""

from __future__ import annotations

import json
from pathlib import Path

from lethe.render import render_table


def _yes(v) -> str:
    return "yes" if v is True else "no" if v is False else "-"


COLUMNS = [("corpus", "Corpus"), ("id", "Kernel"), ("gate", "Gate"), ("probe", "Probe"),
           ("original_elements", "Input elements", "{:,}"), ("elements", "Shrunk", "{:,}"),
           ("shrink_factor", "Factor", "{:.4g}"), ("reproduced", "Fails standalone", _yes),
           ("bitwise", "Bit for bit", _yes), ("status", "Status")]


def table_rows(summary: dict) -> list[dict]:
    """One row per case, in the summary's order; a case without a repro shows why in its status."""
    rows = []
    for c in summary["cases"]:
        status = "written" if c["status"] == "written" else f"{c['status']}: {c.get('reason', '')[:90]}"
        rows.append({"corpus": c["corpus"], "id": c["id"], "gate": c.get("gate") or "-", "probe": c.get("probe"),
                     "original_elements": c.get("original_elements"), "elements": c.get("elements"),
                     "shrink_factor": c.get("shrink_factor"), "reproduced": c.get("reproduced"),
                     "bitwise": c.get("bitwise"), "status": status})
    return rows


def render(summary_path: str | Path, md_path: str | Path, tex_path: str | Path) -> None:
    summary = json.loads(Path(summary_path).read_text())
    tot = summary["totals"]["all"]
    caption = (f"Standalone repros: {tot['written']} of {tot['cases']} recorded failures written; median shrink "
               f"factor {tot['median_shrink_factor']:.4g}; {tot['reproduced']}/{tot['written']} fail standalone, "
               f"{tot['bitwise']}/{tot['written']} bit for bit.")
    per = "; ".join(f"{name}: {t['written']}/{t['cases']} written, median factor "
                    f"{t['median_shrink_factor']:.4g}, {t['reproduced']} fail standalone, {t['bitwise']} bit for bit"
                    for name, t in sorted(summary["totals"].items()) if name != "all" and t["written"])
    notes = [f"Per corpus: {per}.",
             f"Standalone run: {summary['python']}; lethe unimportable, no PYTHONPATH. Shrinking budget "
             f"{summary['budget_s']:g} s per case (lethe.repro.measure).",
             "Factor: recorded probe's input elements over the shrunk case's. Fails standalone: the repro's "
             "contract test fails. Bit for bit: the candidate's output on the stored input equals what the "
             "verifier's sandbox saw."]
    render_table(table_rows(summary), COLUMNS, caption, "tab:repro", md_path, tex_path, notes=notes)
