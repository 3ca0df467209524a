"""The two jinja2 environments every rendered file goes through (Markdown/CSV-like text, and LaTeX).

Templates live in ``paper/templates/`` so a reader finds the layout of every paper table next to the paper.
Both environments fail on an undefined variable (a typo must not render as an empty cell) and keep
whitespace handling fixed, so output bytes depend only on the template and the data.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import jinja2

REPO_ROOT = Path(__file__).resolve().parents[3]
TEMPLATE_DIR = Path(os.environ.get("LETHE_TEMPLATE_DIR", REPO_ROOT / "paper" / "templates"))


def _common(**kwargs) -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        **kwargs,
    )


@functools.cache
def markdown_env() -> jinja2.Environment:
    """Default ``{{ }}`` / ``{% %}`` delimiters: fine for Markdown, which has no braces of its own."""
    return _common()


@functools.cache
def latex_env() -> jinja2.Environment:
    """LaTeX-friendly delimiters (``\\VAR{}``, ``\\BLOCK{}``, ``\\#{}``) because LaTeX is full of braces and %."""
    return _common(
        block_start_string=r"\BLOCK{",
        block_end_string="}",
        variable_start_string=r"\VAR{",
        variable_end_string="}",
        comment_start_string=r"\#{",
        comment_end_string="}",
        line_statement_prefix=None,
        line_comment_prefix=None,
    )
