"""Paper tables drawn from the authors' released aggregates that no other stage renders.

- ``published_gate_counts``: pass / fail / error / not-applicable per gate over the audited Dr. Kernel rows.
- ``published_second_corpus``: the Sakana second-corpus audit, failures by gate, with and without precision gates.

Both print the paper's own figures (``data/published/``), and their captions say so.
"""

from __future__ import annotations

import os
from pathlib import Path

from lethe.render.figures import GATE_ORDER
from lethe.render.keypath import load_document
from lethe.render.style import PUBLISHED_TAG
from lethe.render.tables import Column, render_table

PRECISION_GATES = ("PRC-01", "PRC-02")


def _share(k: int, n: int) -> float | None:
    return k / n if n else None


def gate_counts(published: Path, tables: Path) -> None:
    drk = load_document(published / "audit_drkernel.json")["accepted_only"]
    gates = drk["gates_overall"]
    rows = []
    for g in [g for g in GATE_ORDER if g in gates] + sorted(g for g in gates if g not in GATE_ORDER):
        c = gates[g]
        decided = c.get("pass", 0) + c.get("fail", 0)
        rows.append({"gate": g, "pass": c.get("pass", 0), "fail": c.get("fail", 0), "error": c.get("error", 0),
                     "na": c.get("na", 0), "fail_share": _share(c.get("fail", 0), decided)})
    render_table(
        rows,
        [Column("gate", "Gate"), Column("pass", "Pass"), Column("fail", "Fail"), Column("error", "Error"),
         Column("na", "N/A"), Column("fail_share", "Fail / (pass + fail)", "{:.1%}")],
        caption=f"Verdicts per contract gate over the {drk['gated']:,} gated kernels of the Dr. Kernel cold-start "
        f"audit (accepted rows); {PUBLISHED_TAG}.",
        label="tab:published-gate-counts",
        md_path=tables / "published_gate_counts.md",
        tex_path=tables / "published_gate_counts.tex",
        notes=["Source: data/published/audit_drkernel.json (accepted_only.gates_overall). Error: the gate itself "
               "raised; N/A: the gate does not apply to the kernel."],
    )


def second_corpus(published: Path, tables: Path) -> None:
    sak = load_document(published / "audit_sakana.json")
    n = sak["compiled_denominator"]
    fails = sak["gate_fail_counts"]
    order = sorted(fails, key=lambda g: (-fails[g], g))
    rows = [{"gate": g, "kernels": fails[g], "share": _share(fails[g], n),
             "precision": "yes" if g in PRECISION_GATES else "no"} for g in order]
    rows.append({"gate": "any non-precision gate", "kernels": sak["contract_findings_excl_precision"],
                 "share": _share(sak["contract_findings_excl_precision"], n), "precision": "no"})
    render_table(
        rows,
        [Column("gate", "Gate"), Column("precision", "Precision gate"), Column("kernels", "Kernels failing"),
         Column("share", f"Share of {n:,} compiled", "{:.1%}")],
        caption=f"Second corpus ({sak['corpus']}, kernels labelled correct): contract failures by gate; "
        f"{PUBLISHED_TAG}.",
        label="tab:published-second-corpus",
        md_path=tables / "published_second_corpus.md",
        tex_path=tables / "published_second_corpus.tex",
        notes=[f"Source: data/published/audit_sakana.json. {sak['audited_rows']:,} rows audited, {n:,} compiled. "
               "The precision gates fail on almost every kernel because the archive's kernels are fp32-only, so "
               "the paper leads with the non-precision residual."],
    )


TABLES = {
    "published_gate_counts": (("audit_drkernel.json",), gate_counts),
    "published_second_corpus": (("audit_sakana.json",), second_corpus),
}


def render_all(published: str | os.PathLike[str], tables: str | os.PathLike[str],
               stems: tuple[str, ...] | None = None) -> list[str]:
    """Render every table (or those named in ``stems``) whose inputs exist; returns the stems rendered."""
    published, tables = Path(published), Path(tables)
    done = []
    for stem, (inputs, fn) in TABLES.items():
        if stems is not None and stem not in stems:
            continue
        if all((published / i).is_file() for i in inputs):
            fn(published, tables)
            done.append(stem)
    return done
