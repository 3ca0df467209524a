"""The claims ledger: one row per quantitative claim of the paper, each value read from an intermediate.

The claim list (id, sentence, the paper's value, where the value lives, how to compare) is the committed spec
``paper/claims_spec.yaml``; this module turns it into ``paper/claims.csv`` at render time. No rendered value is
ever typed by hand: each one is looked up by key path (and optionally combined by a small expression, see
:mod:`lethe.render.keypath`) in the first listed source file that exists.

Status rule (also in ``docs/rendering.md``):

- ``reproduced``: the value was computed by this repository's code, i.e. read from a file under ``results/``.
  That includes re-aggregations of the authors' per-row records (``results/published/aggregates.json``): the
  arithmetic from rows to figure was redone here, even though the per-kernel verdicts are the paper's.
- ``published``: read as-is from the paper authors' released aggregate files under ``data/published/``.
- ``mismatch``: the value was found but, at the precision the paper prints, differs from the paper's value;
  the note gives both and the difference. A mismatch wins over the two statuses above.
- ``not-reproducible-here``: no source file exists (or none holds the key); the note gives the reason from the
  spec (e.g. needs a B200, needs the Hugging Face Hub, not yet run).

A source's kind defaults from its path (``data/published/`` -> published, anything else -> reproduced) and can be
set explicitly with ``kind:`` in the spec.
"""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from lethe.render.keypath import ExpressionError, KeyPathError, evaluate, load_document, resolve
from lethe.render.tables import write_text

STATUSES = ("reproduced", "published", "mismatch", "not-reproducible-here")
COLUMNS = ("claim_id", "sentence", "paper_value", "source", "rendered_value", "status", "note")
UNITS = ("count", "counts", "percent", "percent_range", "sci", "fraction", "float", "bool")
COMPARES = ("equal", "at_least", "at_most", "none")
NOT_AVAILABLE = "n/a"


class SpecError(ValueError):
    """The claims spec is malformed (a bad unit, a missing field): fail loudly rather than render a guess."""


# --------------------------------------------------------------------------------------------------- formatting
def _fmt_scalar(value: Any, unit: str, digits: int) -> str:
    if isinstance(value, bool) or unit == "bool":
        return "yes" if value else "no"
    if unit in ("count", "counts", "fraction"):
        if isinstance(value, float) and not value.is_integer():
            raise SpecError(f"count expected, got {value!r}")
        return f"{int(value):,}"
    if unit in ("percent", "percent_range"):
        return f"{100.0 * float(value):.{digits}f}%"
    if unit == "sci":
        mantissa, exp = f"{float(value):.{max(digits - 1, 0)}e}".split("e")
        return f"{mantissa}e{int(exp)}"
    if unit == "float":
        return f"{float(value):.{digits}f}"
    raise SpecError(f"unknown unit {unit!r}")


def format_value(value: Any, unit: str, digits: int = 1) -> str:
    """The value as the paper would print it: the same unit and the same number of digits.

    ``percent`` values are fractions (0.395 prints as 39.5%); ``sci`` keeps ``digits`` significant digits
    (3.3e-3); ``counts`` is a list shown as ``a / b / c``; ``fraction`` a pair shown as ``a/b``;
    ``percent_range`` a pair shown as ``lo%–hi%``.
    """
    if unit in ("counts", "fraction", "percent_range"):
        if not isinstance(value, list | tuple):
            raise SpecError(f"unit {unit} needs a list, got {value!r}")
        parts = [_fmt_scalar(v, unit, digits) for v in value]
        sep = {"counts": " / ", "fraction": "/", "percent_range": "–"}[unit]
        return sep.join(parts)
    return _fmt_scalar(value, unit, digits)


def _paper_as_fraction(paper: Any, unit: str) -> Any:
    """The spec writes percentages as the paper prints them (39.5); internally they are fractions."""
    if unit in ("percent", "percent_range"):
        if isinstance(paper, list | tuple):
            return [p / 100.0 for p in paper]
        return paper / 100.0
    return paper


# --------------------------------------------------------------------------------------------------- comparing
def compare(rendered: Any, paper: Any, unit: str, digits: int, how: str) -> tuple[bool, str]:
    """Whether ``rendered`` supports the paper's value, and a note describing any difference.

    ``equal`` compares at the paper's printed precision (both values formatted the same way), so 0.39537 supports
    "39.5%" but 0.4375 does not support "43.7%". ``at_least``/``at_most`` check a bound claim ("above 25%").
    """
    shown = format_value(rendered, unit, digits)
    paper_frac = _paper_as_fraction(paper, unit)
    if how == "none":
        return True, ""
    if how == "equal":
        expected = format_value(paper_frac, unit, digits)
        if shown == expected:
            return True, ""
        return False, f"rendered {shown} vs paper {expected}{_difference(rendered, paper_frac, unit)}"
    if how in ("at_least", "at_most"):
        values = rendered if isinstance(rendered, list | tuple) else [rendered]
        bound = format_value(paper_frac, unit, digits)
        # Compare at printed precision too, so a value that prints as the bound counts as meeting it.
        scale = 100.0 if unit.startswith("percent") else 1.0
        rounded = [round(float(v) * scale, digits) for v in values]
        limit = round(float(paper_frac) * scale, digits)
        ok = all(v >= limit for v in rounded) if how == "at_least" else all(v <= limit for v in rounded)
        word = "≥" if how == "at_least" else "≤"
        return ok, "" if ok else f"rendered {shown} is not {word} {bound}"
    raise SpecError(f"unknown comparison {how!r}")


def _difference(rendered: Any, paper: Any, unit: str) -> str:
    if isinstance(rendered, list | tuple) or isinstance(paper, list | tuple):
        return ""
    try:
        diff = float(rendered) - float(paper)
    except (TypeError, ValueError):
        return ""
    if unit.startswith("percent"):
        return f" (difference {100.0 * diff:+.2f} percentage points)"
    if unit in ("count", "fraction", "counts"):
        return f" (difference {diff:+,.0f})"
    return f" (difference {diff:+.3g})"


# --------------------------------------------------------------------------------------------------- the spec
@dataclass(frozen=True)
class Source:
    path: str
    keys: Mapping[str, str]
    expr: str
    kind: str
    note: str = ""

    @property
    def describe(self) -> str:
        if len(self.keys) == 1 and self.expr == next(iter(self.keys)):
            return f"{self.path}#{next(iter(self.keys.values()))}"
        bindings = "; ".join(f"{n}={k}" for n, k in self.keys.items())
        return f"{self.path}#{self.expr} [{bindings}]"


@dataclass(frozen=True)
class Claim:
    claim_id: str
    sentence: str
    paper: Any
    unit: str
    digits: int
    compare: str
    sources: Sequence[Source]
    unavailable: str
    note: str


def _source(entry: Mapping[str, Any], claim_id: str) -> Source:
    if "path" not in entry:
        raise SpecError(f"{claim_id}: a source needs a path")
    path = str(entry["path"])
    if "key" in entry:
        keys, expr = {"v": str(entry["key"])}, "v"
    elif "keys" in entry and "expr" in entry:
        keys, expr = {str(k): str(v) for k, v in entry["keys"].items()}, str(entry["expr"])
    else:
        raise SpecError(f"{claim_id}: a source needs 'key', or 'keys' and 'expr'")
    kind = entry.get("kind") or ("published" if path.startswith("data/published/") else "reproduced")
    if kind not in ("published", "reproduced"):
        raise SpecError(f"{claim_id}: source kind must be published or reproduced, got {kind!r}")
    return Source(path=path, keys=keys, expr=expr, kind=kind, note=str(entry.get("note", "")).strip())


def load_spec(path: str | os.PathLike[str]) -> list[Claim]:
    """Parse and check ``paper/claims_spec.yaml``; ids must be unique and every field well-formed."""
    with open(path, encoding="utf-8") as fh:
        raw = yaml.safe_load(fh)
    claims: list[Claim] = []
    seen: set[str] = set()
    for entry in raw.get("claims", []):
        cid = str(entry.get("id", ""))
        if not cid or cid in seen:
            raise SpecError(f"claim id missing or repeated: {cid!r}")
        seen.add(cid)
        for field in ("sentence", "paper", "unit", "sources"):
            if field not in entry:
                raise SpecError(f"{cid}: missing field {field!r}")
        unit = entry["unit"]
        how = entry.get("compare", "equal")
        if unit not in UNITS:
            raise SpecError(f"{cid}: unit must be one of {UNITS}, got {unit!r}")
        if how not in COMPARES:
            raise SpecError(f"{cid}: compare must be one of {COMPARES}, got {how!r}")
        sources = [_source(s, cid) for s in entry["sources"]]
        if not sources:
            raise SpecError(f"{cid}: at least one source is needed")
        claims.append(Claim(
            claim_id=cid, sentence=str(entry["sentence"]).strip(), paper=entry["paper"], unit=unit,
            digits=int(entry.get("digits", 1)), compare=how, sources=sources,
            unavailable=str(entry.get("unavailable", "not yet run")).strip(),
            note=str(entry.get("note", "")).strip(),
        ))
    if not claims:
        raise SpecError(f"{path}: no claims")
    return claims


# --------------------------------------------------------------------------------------------------- evaluating
class _DocCache:
    def __init__(self, root: Path):
        self.root = root
        self.docs: dict[str, Any] = {}

    def get(self, rel: str) -> Any:
        if rel not in self.docs:
            self.docs[rel] = load_document(self.root / rel)
        return self.docs[rel]


def _value(source: Source, cache: _DocCache) -> Any:
    doc = cache.get(source.path)
    names = {name: resolve(doc, key) for name, key in source.keys.items()}
    value = evaluate(source.expr, names)
    if isinstance(value, float) and math.isnan(value):
        raise ExpressionError("expression gave NaN")
    return value


def evaluate_claim(claim: Claim, root: str | os.PathLike[str], cache: _DocCache | None = None) -> dict[str, str]:
    """The ledger row for one claim (all fields strings, none empty)."""
    root = Path(root)
    cache = cache or _DocCache(root)
    problems: list[str] = []
    paper_shown = format_value(_paper_as_fraction(claim.paper, claim.unit), claim.unit, claim.digits)
    if claim.compare in ("at_least", "at_most"):
        paper_shown = ("≥ " if claim.compare == "at_least" else "≤ ") + paper_shown
    for source in claim.sources:
        if not (root / source.path).is_file():
            continue
        try:
            value = _value(source, cache)
            shown = format_value(value, claim.unit, claim.digits)
            ok, diff = compare(value, claim.paper, claim.unit, claim.digits, claim.compare)
        except (KeyPathError, ExpressionError, SpecError, TypeError, ValueError, ZeroDivisionError) as exc:
            problems.append(f"{source.path} present but unusable: {exc}")
            continue
        status = source.kind if ok else "mismatch"
        note = "; ".join(x for x in (diff, *problems, source.note, claim.note) if x)
        return _row(claim, paper_shown, source.describe, shown, status, note)
    missing = [s.path for s in claim.sources if not (root / s.path).is_file()]
    reason = claim.unavailable
    if missing:
        reason += f" ({', '.join(missing)} absent)"
    note = "; ".join(x for x in (reason, *problems, claim.note) if x)
    return _row(claim, paper_shown, claim.sources[0].describe, NOT_AVAILABLE, "not-reproducible-here", note)


def _row(claim: Claim, paper: str, source: str, rendered: str, status: str, note: str) -> dict[str, str]:
    return {
        "claim_id": claim.claim_id, "sentence": claim.sentence, "paper_value": paper, "source": source,
        "rendered_value": rendered, "status": status, "note": note or "-",
    }


def build_ledger(spec_path: str | os.PathLike[str], root: str | os.PathLike[str]) -> list[dict[str, str]]:
    """Every claim of the spec evaluated against the files under ``root`` (the repository root), in spec order."""
    cache = _DocCache(Path(root))
    return [evaluate_claim(c, root, cache) for c in load_spec(spec_path)]


def ledger_csv(rows: Sequence[Mapping[str, str]]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n", quoting=csv.QUOTE_MINIMAL)
    writer.writeheader()
    for row in rows:
        writer.writerow({k: row[k] for k in COLUMNS})
    return buf.getvalue()


def write_ledger(spec_path: str | os.PathLike[str], root: str | os.PathLike[str],
                 csv_path: str | os.PathLike[str]) -> list[dict[str, str]]:
    """Render ``paper/claims.csv``; returns the rows (for the book's summary)."""
    rows = build_ledger(spec_path, root)
    write_text(csv_path, ledger_csv(rows))
    return rows


def status_counts(rows: Sequence[Mapping[str, str]]) -> dict[str, int]:
    return {s: sum(1 for r in rows if r["status"] == s) for s in STATUSES}


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m lethe.render.ledger [--spec S] [--root R] [--out CSV]``: print (or write) the ledger."""
    import argparse

    parser = argparse.ArgumentParser(description="Render the claims ledger")
    parser.add_argument("--spec", default="paper/claims_spec.yaml")
    parser.add_argument("--root", default=".")
    parser.add_argument("--out", default=None, help="write the CSV here instead of printing a summary")
    args = parser.parse_args(argv)
    if args.out:
        rows = write_ledger(args.spec, args.root, args.out)
    else:
        rows = build_ledger(args.spec, args.root)
        for r in rows:
            print(f"{r['status']:<22} {r['claim_id']:<42} paper {r['paper_value']:<24} rendered {r['rendered_value']}")
    print(status_counts(rows))
    return 1 if any(r["status"] == "mismatch" for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
