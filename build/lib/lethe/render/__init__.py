"""The shared rendering layer: tables (Markdown + booktabs LaTeX), figures (one style, deterministic bytes),
the claims ledger (``paper/claims.csv``) and the results book (``paper/book.md``).

Public API for other stages (documented in ``docs/rendering.md``)::

    from lethe.render import render_table, Column
    from lethe.render.style import save_figure, style, new_figure, PALETTE, PUBLISHED_TAG

(`style` must come from lethe.render.style: once that submodule is imported, `lethe.render.style` is the module.)

Names are resolved lazily so that a stage rendering only tables does not pay for importing matplotlib.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Column": "lethe.render.tables",
    "format_value": "lethe.render.tables",
    "render_table": "lethe.render.tables",
    "table_text": "lethe.render.tables",
    "tex_escape": "lethe.render.tables",
    "OKABE_ITO": "lethe.render.style",
    "PALETTE": "lethe.render.style",
    "PUBLISHED_TAG": "lethe.render.style",
    "apply_style": "lethe.render.style",
    "new_figure": "lethe.render.style",
    "save_figure": "lethe.render.style",
    "style": "lethe.render.style",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'lethe.render' has no attribute {name!r}")
