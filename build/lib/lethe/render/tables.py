"""Render one tidy table as Markdown and as a booktabs LaTeX float, byte-deterministically.

Every stage renders its paper tables through :func:`render_table` so that all tables share one look and one
number format. Cells are formatted once, in Python, with a fixed format per column; the templates only lay out
strings. Nothing time- or machine-dependent reaches the output, so re-rendering on a clean clone gives the same
bytes (CI checks that with ``git diff --exit-code``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lethe.render.env import latex_env, markdown_env

Formatter = str | Callable[[Any], str] | None

#: Shown for a missing value (None or NaN), so a gap is visible rather than printed as "nan".
MISSING_MD = "–"
MISSING_TEX = "--"


@dataclass(frozen=True)
class Column:
    """One output column: which key of a row it shows, its header, its format and its alignment.

    ``fmt`` is a ``str.format`` pattern with one field (``"{:,}"``, ``"{:.1%}"``, ``"{:.2e}"``), a callable
    returning a string, or None for the default format (integers with thousands separators, floats with three
    decimals, booleans as yes/no). ``align`` is ``"l"``, ``"r"`` or ``"c"``; None right-aligns numbers and
    left-aligns everything else, judged from the first non-missing value.
    """

    key: str
    header: str | None = None
    fmt: Formatter = None
    align: str | None = None

    @property
    def title(self) -> str:
        return self.header if self.header is not None else self.key


ColumnSpec = Column | str | Sequence[Any] | Mapping[str, Any]


def as_column(spec: ColumnSpec) -> Column:
    """Accept the short forms ``"key"``, ``(key, header)``, ``(key, header, fmt)``, a dict, or a Column."""
    if isinstance(spec, Column):
        return spec
    if isinstance(spec, str):
        return Column(spec)
    if isinstance(spec, Mapping):
        return Column(**spec)
    return Column(*spec)


def is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def format_value(value: Any, fmt: Formatter = None) -> str:
    """The one place a number becomes text, so every table prints the same value the same way."""
    if is_missing(value):
        return ""
    if callable(fmt):
        return str(fmt(value))
    if isinstance(fmt, str):
        return fmt.format(value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int) or (hasattr(value, "dtype") and getattr(value.dtype, "kind", "") in "iu"):
        return f"{int(value):,}"
    if isinstance(value, float) or (hasattr(value, "dtype") and getattr(value.dtype, "kind", "") == "f"):
        return f"{float(value):.3f}"
    return str(value)


_TEX_ESCAPES = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "<": r"\textless{}",
    ">": r"\textgreater{}",
    "–": "--",
    "—": "---",
    "×": r"$\times$",
    "≥": r"$\geq$",
    "≤": r"$\leq$",
}


def tex_escape(text: str) -> str:
    """Escape LaTeX specials so that identifiers like ``EXC-02`` or ``ext_pass`` print literally."""
    return "".join(_TEX_ESCAPES.get(ch, ch) for ch in str(text))


def md_escape(text: str) -> str:
    """Escape the characters that would break a Markdown table cell."""
    return str(text).replace("|", r"\|").replace("\n", " ")


def _default_align(rows: Sequence[Mapping[str, Any]], key: str) -> str:
    for row in rows:
        value = row.get(key)
        if is_missing(value):
            continue
        numeric = isinstance(value, int | float) and not isinstance(value, bool)
        return "r" if numeric or hasattr(value, "dtype") else "l"
    return "l"


def _records(rows: Any) -> list[Mapping[str, Any]]:
    if hasattr(rows, "to_dict"):  # a pandas DataFrame
        return list(rows.to_dict("records"))
    return list(rows)


@dataclass(frozen=True)
class RenderedTable:
    markdown: str
    latex: str


def table_text(
    rows: Iterable[Mapping[str, Any]] | Any,
    columns: Sequence[ColumnSpec],
    caption: str,
    label: str,
    notes: Sequence[str] | None = None,
) -> RenderedTable:
    """Both renderings as strings (what :func:`render_table` writes), for callers that embed tables."""
    records = _records(rows)
    cols = [as_column(c) for c in columns]
    if not cols:
        raise ValueError("a table needs at least one column")
    aligns = [c.align or _default_align(records, c.key) for c in cols]
    bad = [a for a in aligns if a not in ("l", "r", "c")]
    if bad:
        raise ValueError(f"alignment must be l, r or c, got {bad}")
    raw = []
    for i, row in enumerate(records):
        missing = [c.key for c in cols if c.key not in row]
        if missing:
            raise KeyError(f"row {i} of table {label!r} has no key(s) {missing}")
        raw.append([format_value(row[c.key], c.fmt) for c in cols])
    md_cells = [[md_escape(v) if v != "" else MISSING_MD for v in r] for r in raw]
    tex_cells = [[tex_escape(v) if v != "" else MISSING_TEX for v in r] for r in raw]
    notes = list(notes or [])
    markdown = markdown_env().get_template("table.md.j2").render(
        caption=md_escape(caption), label=label, headers=[md_escape(c.title) for c in cols],
        aligns=aligns, cells=md_cells, notes=[md_escape(n) for n in notes],
    )
    latex = latex_env().get_template("table.tex.j2").render(
        caption=tex_escape(caption), label=label, headers=[tex_escape(c.title) for c in cols],
        aligns=aligns, cells=tex_cells, notes=[tex_escape(n) for n in notes],
    )
    return RenderedTable(markdown=_one_trailing_newline(markdown), latex=_one_trailing_newline(latex))


def _one_trailing_newline(text: str) -> str:
    return text.rstrip("\n") + "\n"


def write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write UTF-8 with Unix newlines whatever the platform, creating the folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        fh.write(text)
    return path


def render_table(
    rows: Iterable[Mapping[str, Any]] | Any,
    columns: Sequence[ColumnSpec],
    caption: str,
    label: str,
    md_path: str | os.PathLike[str],
    tex_path: str | os.PathLike[str],
    notes: Sequence[str] | None = None,
) -> RenderedTable:
    """Write ``rows`` (a list of dicts or a DataFrame) as ``md_path`` (Markdown) and ``tex_path`` (booktabs).

    ``columns`` lists what to show, in order (see :class:`Column` for the short forms). ``caption`` and
    ``notes`` are plain text: LaTeX and Markdown escaping happen here. ``label`` becomes the LaTeX ``\\label``
    and the Markdown anchor (conventionally ``tab:<name>``). Rows keep their given order: sort before calling.
    """
    rendered = table_text(rows, columns, caption, label, notes)
    write_text(md_path, rendered.markdown)
    write_text(tex_path, rendered.latex)
    return rendered
