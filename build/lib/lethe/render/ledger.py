"""The claims ledger: every quantitative claim of the paper, with a status that says exactly what was done.

The claim list is the committed spec ``paper/claims_spec.yaml``; this module turns it into ``paper/claims.csv`` at
render time. A claim carries one or more *evidence* entries, and each entry becomes one line of the ledger with
its own status, value and source, so a figure that was both re-aggregated here and published by the authors shows
both values side by side. No rendered value is typed by hand: each one is looked up by key path (and optionally
combined by a small expression, see :mod:`lethe.render.keypath`) in the file the entry names.

Status vocabulary (documented once, in ``docs/rendering.md``; see :data:`STATUS_MEANING`):

- ``reproduced``: this repository measured or computed it from its own runs (a file under ``results/``);
- ``re-aggregated``: this repository's code recomputed it from the authors' released per-row records;
- ``replicated on <corpus>``: the same measurement made here on another corpus or kernel set;
- ``published``: read from the authors' released aggregates (``data/published/``), not recomputed;
- ``not reproducible here``: with the reason (needs a B200, needs the Hugging Face Hub, source not located, ...).

Whether a value supports the paper's figure is a separate column, ``agrees``: ``yes``, ``no`` (the note gives both
values and the difference) or ``not compared`` (a replication on another corpus, or a claim the seed text states
without a figure), and ``-`` on lines that carry no value.
"""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from lethe.render.keypath import ExpressionError, KeyPathError, evaluate, load_document, resolve
from lethe.render.tables import write_text

REPRODUCED = "reproduced"
REAGGREGATED = "re-aggregated"
REPLICATED = "replicated on"
PUBLISHED = "published"
NOT_HERE = "not reproducible here"
# Summary order: from the strongest evidence this repository can give to none.
STATUS_FAMILIES = (REPRODUCED, REAGGREGATED, REPLICATED, PUBLISHED, NOT_HERE)
STATUS_MEANING = {
    REPRODUCED: "measured or computed by this repository from its own runs (results/)",
    REAGGREGATED: "recomputed by this repository's code from the authors' released per-row records",
    REPLICATED: "the same measurement made here on another corpus or kernel set (named in the status)",
    PUBLISHED: "read from the authors' released aggregates (data/published/), not recomputed",
    NOT_HERE: "no value here; the note gives the reason",
}
COLUMNS = ("claim_id", "sentence", "paper_value", "status", "value", "agrees", "source", "note")
AGREES = ("yes", "no", "not compared", "-")
UNITS = ("count", "counts", "percent", "percent_range", "sci", "fraction", "float", "floats", "float_range", "bool")
COMPARES = ("equal", "at_least", "at_most", "above", "below", "none")
NOT_AVAILABLE = "n/a"
NOT_LOCATED = "source not located"
NOT_STATED = "not stated"


class SpecError(ValueError):
    """The claims spec is malformed (a bad unit, a missing field): fail loudly rather than render a guess."""


def status_family(status: str) -> str:
    """The vocabulary entry a status belongs to (``replicated on fixture`` -> ``replicated on``)."""
    if status.startswith(REPLICATED + " ") and status[len(REPLICATED) + 1:].strip():
        return REPLICATED
    if status in STATUS_FAMILIES and status != REPLICATED:
        return status
    raise SpecError(f"status {status!r} is not in the vocabulary {STATUS_FAMILIES} (replicated needs a corpus)")


# --------------------------------------------------------------------------------------------------- formatting
def _fmt_scalar(value: Any, unit: str, digits: int, suffix: str) -> str:
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
    if unit in ("float", "floats", "float_range"):
        return f"{float(value):.{digits}f}{suffix}"
    raise SpecError(f"unknown unit {unit!r}")


def format_value(value: Any, unit: str, digits: int = 1, suffix: str = "") -> str:
    """The value as the paper would print it: the same unit and the same number of digits.

    ``percent`` values are fractions (0.395 prints as 39.5%); ``sci`` keeps ``digits`` significant digits
    (3.3e-3); ``counts`` and ``floats`` are lists shown as ``a / b / c``; ``fraction`` a pair shown as ``a/b``;
    ``percent_range`` and ``float_range`` a pair shown as ``lo–hi``. ``suffix`` (``×``, `` ms``) follows each
    float.
    """
    if unit in ("counts", "fraction", "percent_range", "floats", "float_range"):
        if not isinstance(value, list | tuple):
            raise SpecError(f"unit {unit} needs a list, got {value!r}")
        parts = [_fmt_scalar(v, unit, digits, suffix) for v in value]
        sep = {"counts": " / ", "floats": " / ", "fraction": "/", "percent_range": "–", "float_range": "–"}[unit]
        return sep.join(parts)
    return _fmt_scalar(value, unit, digits, suffix)


def _paper_as_fraction(paper: Any, unit: str) -> Any:
    """The spec writes percentages as the paper prints them (39.5); internally they are fractions."""
    if unit in ("percent", "percent_range"):
        if isinstance(paper, list | tuple):
            return [p / 100.0 for p in paper]
        return paper / 100.0
    return paper


# --------------------------------------------------------------------------------------------------- comparing
def compare(rendered: Any, paper: Any, unit: str, digits: int, how: str, suffix: str = "") -> tuple[bool, str]:
    """Whether ``rendered`` supports the paper's value, and a note describing any difference.

    ``equal`` compares at the paper's printed precision (both values formatted the same way), so 0.39537 supports
    "39.5%" but 0.4375 does not support "43.7%". ``at_least``/``at_most`` check a bound claim at printed
    precision (a value that prints as the bound meets it); ``above``/``below`` check a strict bound ("exceeds
    25%") on the unrounded value, so 2/8 does not exceed 25%.
    """
    shown = format_value(rendered, unit, digits, suffix)
    if how == "none":
        return True, ""
    paper_frac = _paper_as_fraction(paper, unit)
    if how == "equal":
        expected = format_value(paper_frac, unit, digits, suffix)
        if shown == expected:
            return True, ""
        return False, f"rendered {shown} vs paper {expected}{_difference(rendered, paper_frac, unit)}"
    if how in ("at_least", "at_most", "above", "below"):
        values = rendered if isinstance(rendered, list | tuple) else [rendered]
        bound = format_value(paper_frac, unit, digits, suffix)
        if how in ("at_least", "at_most"):
            # Compare at printed precision, so a value that prints as the bound counts as meeting it.
            scale = 100.0 if unit.startswith("percent") else 1.0
            vals = [round(float(v) * scale, digits) for v in values]
            limit = round(float(paper_frac) * scale, digits)
        else:
            vals, limit = [float(v) for v in values], float(paper_frac)
        test = {"at_least": lambda v: v >= limit, "at_most": lambda v: v <= limit,
                "above": lambda v: v > limit, "below": lambda v: v < limit}[how]
        ok = all(test(v) for v in vals)
        word = {"at_least": "≥", "at_most": "≤", "above": ">", "below": "<"}[how]
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
class Evidence:
    """One line of the ledger: a status and, unless the status is ``not reproducible here``, a value's source.

    ``keys`` maps an expression name to ``(path, key path)``; the path is the entry's own file unless the key was
    written ``other/file.json#key.path``.
    """

    status: str
    path: str = ""
    keys: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    expr: str = ""
    compare: str = "equal"
    note: str = ""
    reason: str = ""
    located: bool = True
    known_disagreement: str = ""

    @property
    def paths(self) -> list[str]:
        return sorted({p for p, _ in self.keys.values()} | ({self.path} if self.path else set()))

    @property
    def describe(self) -> str:
        """The source column: enough to recompute the value by hand (file, expression, key bindings)."""
        if not self.path:
            return NOT_LOCATED if not self.located else "-"

        def key(p: str, k: str) -> str:
            return k if p == self.path else f"{p}#{k}"

        if len(self.keys) == 1 and self.expr == next(iter(self.keys)):
            p, k = next(iter(self.keys.values()))
            return f"{self.path}#{key(p, k)}"
        bindings = "; ".join(f"{n}={key(p, k)}" for n, (p, k) in self.keys.items())
        return f"{self.path}#{self.expr} [{bindings}]"


@dataclass(frozen=True)
class Claim:
    claim_id: str
    sentence: str
    paper: Any
    unit: str
    digits: int
    suffix: str
    evidence: Sequence[Evidence]
    note: str


def _default_status(path: str) -> str:
    if path.startswith("data/published/"):
        return PUBLISHED
    if path.startswith("results/published/"):
        return REAGGREGATED
    return REPRODUCED


def _check_status_path(status: str, path: str, cid: str) -> None:
    """A status must match where its value lives: only the release is published, only results/ is ours."""
    fam = status_family(status)
    if fam == PUBLISHED and not path.startswith("data/published/"):
        raise SpecError(f"{cid}: a published value must come from data/published/, not {path}")
    if fam == REAGGREGATED and not path.startswith(("data/published/", "results/published/")):
        raise SpecError(f"{cid}: a re-aggregated value is computed from the released records, not {path}")
    if fam in (REPRODUCED, REPLICATED) and not path.startswith("results/"):
        raise SpecError(f"{cid}: a {fam} value must come from this repository's results/, not {path}")


def _evidence(entry: Mapping[str, Any], cid: str, paper: Any) -> Evidence:
    status = str(entry.get("status") or "")
    note = str(entry.get("note", "")).strip()
    how = str(entry.get("compare", "equal" if paper is not None else "none"))
    if how not in COMPARES:
        raise SpecError(f"{cid}: compare must be one of {COMPARES}, got {how!r}")
    if status == NOT_HERE or ("path" not in entry and not status):
        if "reason" not in entry:
            raise SpecError(f"{cid}: a '{NOT_HERE}' entry needs a reason")
        return Evidence(status=NOT_HERE, reason=str(entry["reason"]).strip(), note=note,
                        located=bool(entry.get("located", True)))
    if "path" not in entry:
        raise SpecError(f"{cid}: an evidence entry needs a path (or status '{NOT_HERE}' and a reason)")
    path = str(entry["path"])
    if "key" in entry:
        raw_keys, expr = {"v": str(entry["key"])}, "v"
    elif "keys" in entry and "expr" in entry:
        raw_keys, expr = {str(k): str(v) for k, v in entry["keys"].items()}, str(entry["expr"])
    else:
        raise SpecError(f"{cid}: an evidence entry needs 'key', or 'keys' and 'expr'")
    keys = {n: (tuple(k.split("#", 1)) if "#" in k else (path, k)) for n, k in raw_keys.items()}
    status = status or _default_status(path)
    status_family(status)
    for p in {path} | {p for p, _ in keys.values()}:
        _check_status_path(status, p, cid)
    if paper is None and how != "none":
        raise SpecError(f"{cid}: a claim the paper states without a figure cannot be compared")
    return Evidence(status=status, path=path, keys=keys, expr=expr, compare=how, note=note,
                    reason=str(entry.get("unavailable", "")).strip(),
                    known_disagreement=str(entry.get("known_disagreement", "")).strip())


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
        for fld in ("sentence", "paper", "unit", "evidence"):
            if fld not in entry:
                raise SpecError(f"{cid}: missing field {fld!r}")
        unit = entry["unit"]
        if unit not in UNITS:
            raise SpecError(f"{cid}: unit must be one of {UNITS}, got {unit!r}")
        evidence = [_evidence(e, cid, entry["paper"]) for e in entry["evidence"] or []]
        if not evidence:
            raise SpecError(f"{cid}: at least one evidence entry is needed")
        claims.append(Claim(
            claim_id=cid, sentence=str(entry["sentence"]).strip(), paper=entry["paper"], unit=unit,
            digits=int(entry.get("digits", 1)), suffix=str(entry.get("suffix", "")), evidence=evidence,
            note=str(entry.get("note", "")).strip(),
        ))
    if not claims:
        raise SpecError(f"{path}: no claims")
    return claims


def spec_files(path: str | os.PathLike[str]) -> list[str]:
    """Every file the spec reads (evidence paths and ``other/file.json#key`` keys), sorted: the ledger's inputs."""
    return sorted({p for claim in load_spec(path) for ev in claim.evidence for p in ev.paths})


# --------------------------------------------------------------------------------------------------- evaluating
class _DocCache:
    def __init__(self, root: Path):
        self.root = root
        self.docs: dict[str, Any] = {}

    def get(self, rel: str) -> Any:
        if rel not in self.docs:
            self.docs[rel] = load_document(self.root / rel)
        return self.docs[rel]


def evidence_value(ev: Evidence, cache: _DocCache) -> Any:
    """The raw value of an evidence entry: its key paths resolved in their files, then its expression."""
    names = {name: resolve(cache.get(p), key) for name, (p, key) in ev.keys.items()}
    value = evaluate(ev.expr, names)
    if isinstance(value, float) and math.isnan(value):
        raise ExpressionError("expression gave NaN")
    return value


def _paper_shown(claim: Claim) -> str:
    if claim.paper is None:
        return NOT_STATED
    shown = format_value(_paper_as_fraction(claim.paper, claim.unit), claim.unit, claim.digits, claim.suffix)
    how = {e.compare for e in claim.evidence if e.status != NOT_HERE}
    prefix = {"at_least": "≥ ", "at_most": "≤ ", "above": "> ", "below": "< "}
    if len(how) == 1 and next(iter(how)) in prefix:
        shown = prefix[next(iter(how))] + shown
    return shown


def evaluate_evidence(claim: Claim, ev: Evidence, root: Path, cache: _DocCache, first: bool) -> dict[str, str]:
    """One ledger line (all fields strings, none empty)."""
    paper = _paper_shown(claim)
    extra = claim.note if first else ""
    if ev.status == NOT_HERE:
        return _row(claim, paper, NOT_HERE, NOT_AVAILABLE, "-", ev.describe, _join(ev.reason, ev.note, extra))
    missing = [p for p in ev.paths if not (root / p).is_file()]
    if missing:
        why = _join(ev.reason or "not computed in this checkout", f"{', '.join(missing)} absent")
        return _row(claim, paper, NOT_HERE, NOT_AVAILABLE, "-", ev.describe, _join(why, ev.note, extra))
    try:
        value = evidence_value(ev, cache)
        shown = format_value(value, claim.unit, claim.digits, claim.suffix)
        ok, diff = compare(value, claim.paper, claim.unit, claim.digits, ev.compare, claim.suffix)
    except (KeyPathError, ExpressionError, SpecError, TypeError, ValueError, ZeroDivisionError) as exc:
        why = f"{ev.describe.split('#')[0]} present but unusable: {exc}"
        return _row(claim, paper, NOT_HERE, NOT_AVAILABLE, "-", ev.describe, _join(why, ev.note, extra))
    agrees = "not compared" if ev.compare == "none" else ("yes" if ok else "no")
    known = ev.known_disagreement if agrees == "no" else ""
    return _row(claim, paper, ev.status, shown, agrees, ev.describe, _join(diff, known, ev.note, extra))


def _join(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


def _row(claim: Claim, paper: str, status: str, value: str, agrees: str, source: str, note: str) -> dict[str, str]:
    return {
        "claim_id": claim.claim_id, "sentence": claim.sentence, "paper_value": paper, "status": status,
        "value": value, "agrees": agrees, "source": source, "note": note or "-",
    }


def evaluate_claim(claim: Claim, root: str | os.PathLike[str], cache: _DocCache | None = None) -> list[dict[str, str]]:
    """The ledger lines of one claim, one per evidence entry, in spec order."""
    root = Path(root)
    cache = cache or _DocCache(root)
    return [evaluate_evidence(claim, ev, root, cache, i == 0) for i, ev in enumerate(claim.evidence)]


def build_ledger(spec_path: str | os.PathLike[str], root: str | os.PathLike[str]) -> list[dict[str, str]]:
    """Every claim of the spec evaluated against the files under ``root`` (the repository root), in spec order."""
    cache = _DocCache(Path(root))
    return [row for c in load_spec(spec_path) for row in evaluate_claim(c, root, cache)]


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
    """Ledger lines per status, in vocabulary order; each ``replicated on <corpus>`` is counted on its own."""
    order = {s: i for i, s in enumerate(STATUS_FAMILIES)}
    statuses = sorted({r["status"] for r in rows}, key=lambda s: (order[status_family(s)], s))
    return {s: sum(1 for r in rows if r["status"] == s) for s in statuses}


def summary(rows: Sequence[Mapping[str, str]]) -> dict[str, Any]:
    """The book's one-screen summary: per status the lines and the claims they touch, then agreement."""
    order = {s: i for i, s in enumerate(STATUS_FAMILIES)}
    claims = list(dict.fromkeys(r["claim_id"] for r in rows))
    per_status = []
    for status, n in status_counts(rows).items():
        touched = {r["claim_id"] for r in rows if r["status"] == status}
        per_status.append({"status": status, "lines": n, "claims": len(touched),
                           "meaning": STATUS_MEANING[status_family(status)]})
    with_value = {r["claim_id"] for r in rows if r["value"] != NOT_AVAILABLE}
    disagree = [c for c in claims if any(r["claim_id"] == c and r["agrees"] == "no" for r in rows)]
    only_not_here = [c for c in claims if c not in with_value]
    best = {}
    for c in claims:
        fams = [order[status_family(r["status"])] for r in rows if r["claim_id"] == c]
        best[c] = STATUS_FAMILIES[min(fams)]
    strongest = {s: sum(1 for c in claims if best[c] == s) for s in STATUS_FAMILIES}
    return {"claims": len(claims), "lines": len(rows), "per_status": per_status, "with_value": len(with_value),
            "disagree": disagree, "only_not_here": only_not_here, "strongest": strongest}


def unexplained_disagreements(spec_path: str | os.PathLike[str], rows: Sequence[Mapping[str, str]]) -> list[str]:
    """Claim ids with a line that disagrees with the paper although the spec declares no reason for it."""
    evidence = [ev for c in load_spec(spec_path) for ev in c.evidence]
    if len(evidence) != len(rows):
        raise SpecError("the rows were not built from this spec")
    return [r["claim_id"] for ev, r in zip(evidence, rows, strict=True)
            if r["agrees"] == "no" and not ev.known_disagreement]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m lethe.render.ledger [--spec S] [--root R] [--out CSV]``: print (or write) the ledger.

    Exits 1 when a value disagrees with the paper and the spec gives no ``known_disagreement`` for it.
    """
    import argparse

    parser = argparse.ArgumentParser(description="Render the claims ledger")
    parser.add_argument("--spec", default="paper/claims_spec.yaml")
    parser.add_argument("--root", default=".")
    parser.add_argument("--out", default=None, help="write the CSV here instead of printing every line")
    args = parser.parse_args(argv)
    if args.out:
        rows = write_ledger(args.spec, args.root, args.out)
    else:
        rows = build_ledger(args.spec, args.root)
        for r in rows:
            print(f"{r['status']:<24} {r['agrees']:<12} {r['claim_id']:<40} paper {r['paper_value']:<22} "
                  f"value {r['value']}")
    print(status_counts(rows))
    unexplained = unexplained_disagreements(args.spec, rows)
    if unexplained:
        print(f"disagreements without a declared reason: {unexplained}")
    return 1 if unexplained else 0


if __name__ == "__main__":
    raise SystemExit(main())
