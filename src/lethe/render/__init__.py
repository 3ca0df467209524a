"""The shared rendering layer: tables (Markdown + booktabs LaTeX), figures (one style, deterministic bytes),
the claims ledger (``paper/claims.csv``) and the results book (``paper/book.md``).

Public API for other stages (documented in ``docs/rendering.md``)::

    from lethe.render import render_table, Column, save_figure, style, new_figure, PALETTE, PUBLISHED_TAG
"""

from lethe.render.style import OKABE_ITO, PALETTE, PUBLISHED_TAG, apply_style, new_figure, save_figure, style
from lethe.render.tables import Column, format_value, render_table, table_text, tex_escape

__all__ = [
    "Column",
    "OKABE_ITO",
    "PALETTE",
    "PUBLISHED_TAG",
    "apply_style",
    "format_value",
    "new_figure",
    "render_table",
    "save_figure",
    "style",
    "table_text",
    "tex_escape",
]
