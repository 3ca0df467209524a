"""The results book ``paper/book.md``: every rendered table and figure in the paper's order, then the ledger.

The order lives in ``paper/templates/book.yaml``. Rendered files that are not in that list (a stage added a
table later) are appended in a final section rather than dropped, so the book always shows everything the
workflow renders. Tables are embedded as their Markdown text; figures are linked relative to ``paper/``.
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from lethe.render.env import TEMPLATE_DIR, markdown_env
from lethe.render.figures import FIGURES
from lethe.render.ledger import COLUMNS, summary
from lethe.render.tables import Column, table_text, write_text

FIGURE_SUFFIXES = (".png",)
TABLE_SUFFIXES = (".md",)


def _caption_for_figure(root: Path, stem: str, fallback: str) -> str:
    for spec in FIGURES:
        if spec.stem == stem:
            return spec.caption
    rst = root / "workflow" / "report" / f"{stem}.rst"
    if rst.is_file():
        return " ".join(rst.read_text(encoding="utf-8").split())
    return fallback


def _item(root: Path, book_dir: str, entry: Mapping[str, Any], number: str) -> dict[str, Any]:
    path = str(entry["path"])
    full = root / path
    kind = "figure" if path.endswith(FIGURE_SUFFIXES) else "table"
    item: dict[str, Any] = {
        "path": path, "title": entry.get("title", Path(path).stem), "source": entry.get("source", "see rule"),
        "kind": kind, "exists": full.is_file(), "number": number,
    }
    if not item["exists"]:
        return item
    if kind == "figure":
        stem = Path(path).stem
        pdf = Path(path).with_suffix(".pdf")
        item["pdf"] = str(pdf) if (root / pdf).is_file() else ""
        item["link"] = posixpath.relpath(path, book_dir)
        item["caption"] = _caption_for_figure(root, stem, item["title"])
    else:
        # Demote headings inside an embedded table so they nest under the book's own.
        lines = full.read_text(encoding="utf-8").rstrip("\n").splitlines()
        item["body"] = "\n".join("###" + ln if ln.startswith("#") else ln for ln in lines)
    return item


def book_sections(root: str | os.PathLike[str], rendered: Iterable[str], order_path: str | os.PathLike[str] | None = None,
                  book_path: str = "paper/book.md") -> list[dict[str, Any]]:
    """Sections of the book: the ordered ones from ``book.yaml``, then anything else in ``rendered``."""
    root = Path(root)
    order_path = Path(order_path) if order_path else TEMPLATE_DIR / "book.yaml"
    spec = yaml.safe_load(order_path.read_text(encoding="utf-8"))
    book_dir = posixpath.dirname(book_path) or "."
    listed: set[str] = set()
    sections = []
    rendered = sorted(set(rendered))
    for s_i, section in enumerate(spec["sections"], start=1):
        entries = []
        for entry in section["items"]:
            if "glob" in entry:
                # A family of per-corpus outputs: whichever of them the workflow renders, in name order.
                for path in (p for p in rendered if fnmatch.fnmatchcase(p, entry["glob"])):
                    if path not in listed:
                        stem = Path(path).stem
                        entries.append({**entry, "path": path, "title": f"{entry.get('title', '')} ({stem})"})
            else:
                entries.append(entry)
            for e in entries:
                listed.add(str(e["path"]))
        items = [_item(root, book_dir, e, f"{s_i}.{i_i}") for i_i, e in enumerate(entries, start=1)]
        sections.append({"title": section["title"], "items": items})
    extra = sorted({p for p in rendered if p.endswith(FIGURE_SUFFIXES + TABLE_SUFFIXES)} - listed - {book_path})
    if extra:
        s_i = len(sections) + 1
        items = [_item(root, book_dir, {"path": p, "source": "see its rule in workflow/rules/"}, f"{s_i}.{i}")
                 for i, p in enumerate(extra, start=1)]
        sections.append({"title": "Further rendered tables and figures", "items": items})
    return sections


def render_book(root: str | os.PathLike[str], rendered: Iterable[str], ledger_rows: Sequence[Mapping[str, str]],
                out_path: str | os.PathLike[str], order_path: str | os.PathLike[str] | None = None,
                book_path: str = "paper/book.md") -> str:
    """Write the book to ``out_path``; ``rendered`` lists the workflow's render targets (relative to ``root``).

    Links are written relative to ``book_path`` (where the book lives in the repository), not to ``out_path``,
    so rendering into a scratch folder gives the same bytes as rendering in place.
    """
    root = Path(root)
    sections = book_sections(root, rendered, order_path, book_path=book_path)
    ledger = table_text(
        ledger_rows, [Column(c, c, align="l") for c in COLUMNS],
        caption="Claims ledger (paper/claims.csv)", label="tab:claims-ledger",
    ).markdown
    text = markdown_env().get_template("book.md.j2").render(
        sections=sections, ledger=summary(ledger_rows), ledger_table=ledger.rstrip("\n"),
    )
    text = "\n".join(line.rstrip() for line in text.splitlines())
    while "\n\n\n" in text:
        text = text.replace("\n\n\n", "\n\n")
    text = text.rstrip("\n") + "\n"
    write_text(out_path, text)
    return text
