"""The hand-audit summary table: per stratum, cell size, sample size and the human verdicts so far."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from lethe.hand_audit import labels as L
from lethe.render import Column, render_table

COLUMNS = [Column("stratum", "stratum", align="l"), Column("cell", "in disputed cell"),
           Column("selected", "sampled"), Column("classes", "op classes", align="l"),
           Column("kb_hardened_pass", "hardened KB pass"), Column("defect", "defect"),
           Column("convention", "convention"), Column("false_alarm", "false alarm"), Column("unclear", "unclear"),
           Column("unlabelled", "unlabelled")]


# The GPU cells are judged by KernelBench's own check only (no hardened replica run).
GPU_COLUMNS = [c for c in COLUMNS if c.key != "kb_hardened_pass"]


def stratum_key(r: Mapping[str, str]) -> str:
    return r["stratum"]


def corpus_stratum_key(r: Mapping[str, str]) -> str:
    """Table row of a label-file row that pools several corpora: ``<corpus> <stratum>``."""
    return f"{r['corpus']} {r['stratum']}"


def summary_rows(rows: list[Mapping[str, str]], bucket_sizes: Mapping[str, int] | None = None,
                 key: Callable[[Mapping[str, str]], str] = stratum_key) -> list[dict[str, Any]]:
    """One row per table group (``key``: the stratum, or corpus and stratum), then the total. ``bucket_sizes``
    (same keys) are the disputed cell's sizes per group; groups of the cell with no sampled kernel are listed
    with zeros, so the table shows what the sample leaves out."""
    by: dict[str, list[Mapping[str, str]]] = {}
    for r in rows:
        by.setdefault(key(r), []).append(r)
    strata = list(dict.fromkeys([*(bucket_sizes or {}), *sorted(by)]))
    out = []
    for s in strata:
        members = by.get(s, [])
        c = Counter(r["label"] for r in members)
        out.append({"stratum": s, "cell": (bucket_sizes or {}).get(s), "selected": len(members),
                    "classes": ", ".join(sorted({r["op_class"] for r in members})),
                    "kb_hardened_pass": sum(r["kb_hardened"] == "pass" for r in members),
                    **{k: c.get(k, 0) for k in L.LABELS}})
    out.append({"stratum": "total", "cell": sum((bucket_sizes or {}).values()) if bucket_sizes else None,
                "selected": len(rows), "classes": "", "kb_hardened_pass": sum(r["kb_hardened"] == "pass" for r in rows),
                **{k: sum(o[k] for o in out) for k in L.LABELS}})
    return out


def render_summary(label_path: str | Path, md: str | Path, tex: str | Path, caption: str, label: str,
                   bucket_sizes: Mapping[str, int] | None = None, notes: list[str] | None = None,
                   rows: list[Mapping[str, str]] | None = None,
                   key: Callable[[Mapping[str, str]], str] = stratum_key, columns: list[Column] | None = None) -> None:
    """Render the summary of a label file (or of ``rows`` already read and merged from it); ``columns``
    defaults to :data:`COLUMNS`."""
    rows = L.read(label_path) if rows is None else rows
    L.validate([{k: str(r[k]) for k in L.FIELDS} for r in rows])
    render_table(summary_rows(rows, bucket_sizes, key), columns or COLUMNS, caption, label, md, tex, notes=notes)
