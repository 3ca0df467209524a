"""Figures inside prose (README.md, docs/*.md) rendered from the file they come from, and checked against it.

A figure in a sentence is written between two HTML comments, which Markdown viewers do not show::

    the floor is <!--= results/published/aggregates.json#k / n [k=floor.kernels; n=floor.denominator] | {:.1%} -->39.5%<!--/=-->

The opening comment names the source and a format, separated by ``|``. To keep prose lines short, a figure can
instead be written ``<!--=@name-->39.5%<!--/=-->`` with the source defined once elsewhere in the same file as
``<!--=def name: SOURCE | FORMAT -->`` (a block of definitions at the end of a section reads well). The source is a file with a key path
(``path#key``) or an expression over key paths (``path#expr [name=key; name=other/file.json#key]``), in the same
syntax as the claims ledger's ``source`` column (see :mod:`lethe.render.keypath`). It can also be a ledger line:
``claim:<claim id>`` (the first line of that claim with a value) or ``claim:<claim id>@<status>``. Then the
text is the ``value`` column of ``paper/claims.csv`` and the format is left empty. The format is a
:meth:`str.format` pattern; a list value fills its positional fields in order (``{0:.2f}-{1:.2f}x``).

``python -m lethe.render.docvalues FILE...`` reports every figure whose text differs from what its source gives
now (exit 1); ``--write`` rewrites those texts in place. ``tests/render/test_docvalues.py`` runs the check on
the README and the docs, so a hand-edited or stale figure fails the suite.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lethe.render.keypath import evaluate, load_document, resolve

MARK = re.compile(r"<!--=(?!def\s)(?P<spec>.*?)-->(?P<text>.*?)<!--/=-->", re.DOTALL)
DEFINE = re.compile(r"<!--=def\s+(?P<name>[\w.-]+):(?P<spec>.*?)-->", re.DOTALL)
# Markers shown as examples (fenced blocks, inline code) are text, not figures.
CODE = re.compile(r"^```.*?^```|`[^`\n]+`", re.DOTALL | re.MULTILINE)


def _in_code(text: str) -> list[tuple[int, int]]:
    return [(m.start(), m.end()) for m in CODE.finditer(text)]


def _outside(spans: list[tuple[int, int]], pos: int) -> bool:
    return not any(a <= pos < b for a, b in spans)
LEDGER = "paper/claims.csv"


class DocValueError(ValueError):
    """A marker whose source cannot be read or formatted (named with its file and line)."""


@dataclass(frozen=True)
class Figure:
    path: str
    line: int
    source: str
    fmt: str
    text: str
    start: int
    end: int


def _split(spec: str, where: str) -> tuple[str, str]:
    # a source never contains "|" (the expression language has no bitwise operators), so the first one splits
    source, _, fmt = spec.partition("|")
    source = source.strip()
    if not source:
        raise DocValueError(f"{where}: a figure needs a source")
    return source, fmt.strip()


def find(text: str, path: str = "<text>") -> list[Figure]:
    """Every marked figure of a document, in order; ``@name`` markers take the source of ``=def name:``."""
    code = _in_code(text)
    defs = {}
    for d in (d for d in DEFINE.finditer(text) if _outside(code, d.start())):
        where = f"{path}:{text.count(chr(10), 0, d.start()) + 1}"
        if d["name"] in defs:
            raise DocValueError(f"{where}: figure {d['name']!r} defined twice")
        defs[d["name"]] = _split(d["spec"], where)
    out = []
    for m in (m for m in MARK.finditer(text) if _outside(code, m.start())):
        line = text.count("\n", 0, m.start()) + 1
        spec = m["spec"].strip()
        if spec.startswith("@"):
            if spec[1:] not in defs:
                raise DocValueError(f"{path}:{line}: no definition '<!--=def {spec[1:]}: ... -->'")
            source, fmt = defs[spec[1:]]
        else:
            source, fmt = _split(spec, f"{path}:{line}")
        out.append(Figure(path=path, line=line, source=source, fmt=fmt, text=m["text"],
                          start=m.start("text"), end=m.end("text")))
    return out


def source_value(source: str, root: str | Path) -> Any:
    """The value a source string names: ``path#key`` or ``path#expr [name=key; name=file#key]``."""
    root = Path(root)
    if "#" not in source:
        raise DocValueError(f"source {source!r} names no key (expected path#key)")
    path, rest = source.split("#", 1)
    docs: dict[str, Any] = {}

    def doc(p: str) -> Any:
        if p not in docs:
            docs[p] = load_document(root / p)
        return docs[p]

    if rest.endswith("]") and " [" in rest:
        cut = rest.rindex(" [")
        expr, bindings = rest[:cut], rest[cut + 2:-1]
        names = {}
        for binding in bindings.split("; "):
            name, key = binding.split("=", 1)
            file, key = key.split("#", 1) if "#" in key else (path, key)
            names[name.strip()] = resolve(doc(file), key.strip())
        return evaluate(expr, names)
    return resolve(doc(path), rest)


def ledger_value(ref: str, root: str | Path) -> str:
    """The ``value`` column of a ledger line: ``claim id`` (first line with a value) or ``claim id@status``."""
    cid, _, status = ref.partition("@")
    with open(Path(root) / LEDGER, encoding="utf-8", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["claim_id"] == cid and r["value"] != "n/a"]
    if status:
        rows = [r for r in rows if r["status"] == status]
    if not rows:
        raise DocValueError(f"no ledger line with a value for {ref!r} in {LEDGER}")
    return rows[0]["value"]


def render(fig: Figure, root: str | Path) -> str:
    """The text a marked figure should carry now."""
    try:
        if fig.source.startswith("claim:"):
            if fig.fmt:
                raise DocValueError("a ledger reference takes the ledger's formatting: leave the format empty")
            return ledger_value(fig.source[len("claim:"):], root)
        value = source_value(fig.source, root)
        return fig.fmt.format(*value) if isinstance(value, list | tuple) else fig.fmt.format(value)
    except DocValueError as exc:
        raise DocValueError(f"{fig.path}:{fig.line}: {exc}") from None
    except (KeyError, ValueError, TypeError, IndexError, OSError, ZeroDivisionError) as exc:
        raise DocValueError(f"{fig.path}:{fig.line}: {fig.source!r}: {type(exc).__name__}: {exc}") from None


def check(paths: Sequence[str | Path], root: str | Path) -> list[str]:
    """One message per figure whose text differs from its source (empty when every figure is current)."""
    problems = []
    for p in paths:
        rel = str(Path(p).resolve().relative_to(Path(root).resolve())) if Path(p).is_absolute() else str(p)
        text = (Path(root) / rel).read_text(encoding="utf-8")
        for fig in find(text, rel):
            want = render(fig, root)
            if want != fig.text:
                problems.append(f"{rel}:{fig.line}: says {fig.text!r}, its source gives {want!r} ({fig.source})")
    return problems


def update(path: str | Path, root: str | Path) -> int:
    """Rewrite the figures of one document from their sources; returns how many changed."""
    full = Path(root) / path
    text = full.read_text(encoding="utf-8")
    figs = find(text, str(path))
    changed = 0
    for fig in reversed(figs):  # from the end, so earlier offsets stay valid
        want = render(fig, root)
        if want != fig.text:
            text = text[:fig.start] + want + text[fig.end:]
            changed += 1
    if changed:
        full.write_text(text, encoding="utf-8")
    return changed


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m lethe.render.docvalues [--write] [--root R] FILE...``: check (or rewrite) marked figures."""
    import argparse

    parser = argparse.ArgumentParser(description="Check or rewrite figures marked in Markdown prose")
    parser.add_argument("files", nargs="+")
    parser.add_argument("--root", default=".")
    parser.add_argument("--write", action="store_true", help="rewrite stale figures in place")
    args = parser.parse_args(argv)
    if args.write:
        for f in args.files:
            n = update(f, args.root)
            if n:
                print(f"{f}: {n} figure(s) rewritten")
        return 0
    problems = check(args.files, args.root)
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
