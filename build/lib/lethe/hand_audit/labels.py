"""The label file format for human verdicts on hand-audited kernels (documented in data/hand_audit/README.md).

One CSV per labelled set, UTF-8, comma-separated, header row, one row per audited kernel, rows sorted by id::

    id,corpus,stratum,op_class,our_channels,kb_paper_era,kb_hardened,label,labeller,note

* ``our_channels`` -- the battery's failing channels, ``;``-separated (``EXC-01;CMP-01``);
* ``kb_paper_era`` / ``kb_hardened`` -- ``pass`` / ``fail`` / empty when not run;
* ``label`` -- the human verdict, one of :data:`LABELS`: ``defect`` (the battery is right: the kernel violates
  the contract), ``false_alarm`` (the kernel is correct; the battery is wrong), ``unclear`` (the auditor could
  not decide), ``unlabelled`` (not yet audited);
* ``labeller`` -- who decided (initials or handle; empty while unlabelled), ``note`` -- one line of evidence.

CSV (not JSON) so a human can label in any spreadsheet or editor and a diff shows one verdict per line.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

FIELDS = ("id", "corpus", "stratum", "op_class", "our_channels", "kb_paper_era", "kb_hardened", "label",
          "labeller", "note")
LABELS = ("defect", "false_alarm", "unclear", "unlabelled")


class LabelFileError(ValueError):
    pass


def _id_key(i: str) -> tuple[int, int | str]:
    return (0, int(i)) if str(i).isdigit() else (1, str(i))


def validate(rows: list[dict[str, str]]) -> None:
    seen = set()
    for n, r in enumerate(rows, start=2):
        if r["label"] not in LABELS:
            raise LabelFileError(f"line {n}: label {r['label']!r} not in {LABELS}")
        if r["label"] != "unlabelled" and not r["labeller"].strip():
            raise LabelFileError(f"line {n}: a verdict needs a labeller")
        for k in ("kb_paper_era", "kb_hardened"):
            if r[k] not in ("pass", "fail", ""):
                raise LabelFileError(f"line {n}: {k}={r[k]!r} must be pass, fail or empty")
        if r["id"] in seen:
            raise LabelFileError(f"line {n}: duplicate id {r['id']}")
        seen.add(r["id"])


def dumps(rows: Iterable[Mapping[str, Any]]) -> str:
    out = sorted(({k: "" if r.get(k) is None else str(r.get(k)) for k in FIELDS} for r in rows),
                 key=lambda r: _id_key(r["id"]))
    validate(out)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=FIELDS, lineterminator="\n")
    w.writeheader()
    w.writerows(out)
    return buf.getvalue()


def read(path: str | Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        if tuple(reader.fieldnames or ()) != FIELDS:
            raise LabelFileError(f"{path}: header {reader.fieldnames} != {list(FIELDS)}")
        rows = [dict(r) for r in reader]
    validate(rows)
    return rows


def _kb(v: Mapping[str, Any] | None) -> str:
    if not v or v.get("correct") is None:
        return ""
    return "pass" if v["correct"] else "fail"


def from_published_sample(pub: Mapping[str, Any], corpus: str) -> list[dict[str, Any]]:
    """The authors' ``failure_sample_selected.json`` as label rows.

    The release carries the selection and the machine verdicts but no human verdicts, so every row is
    ``unlabelled``; the authors' fail reasons go in ``note`` (truncated) as the evidence an auditor starts from.
    """
    rows = []
    for s in pub["selected"]:
        reasons = "; ".join(f"{g}: {r}" for g, r in sorted(s.get("our_fail_reasons", {}).items()))
        rows.append({"id": s["id"], "corpus": corpus, "stratum": s["stratum"], "op_class": s["op_class"],
                     "our_channels": ";".join(s.get("our_channels", [])),
                     "kb_paper_era": _kb(s.get("ext_paper_era")), "kb_hardened": _kb(s.get("ext_hardened")),
                     "label": "unlabelled", "labeller": "",
                     "note": " ".join(reasons.split())[:240]})
    return rows


def from_selection(selection: Mapping[str, Any], corpus: str) -> list[dict[str, Any]]:
    """A fresh, unlabelled label file for a selection made by :func:`lethe.hand_audit.sample.select`."""
    return [{"id": s["id"], "corpus": corpus, "stratum": s["stratum"], "op_class": s["op_class"],
             "our_channels": ";".join(s["our_channels"]), "kb_paper_era": "pass", "kb_hardened": "",
             "label": "unlabelled", "labeller": "", "note": ""} for s in selection["selected"]]
