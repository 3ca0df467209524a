"""The label file format for human verdicts on hand-audited kernels (documented in data/hand_audit/README.md).

One CSV per labelled set, UTF-8, comma-separated, header row, one row per audited kernel, rows sorted by
(corpus, id)::

    id,corpus,stratum,op_class,our_channels,kb_paper_era,kb_hardened,label,labeller,note

* ``our_channels`` -- the battery's failing channels, ``;``-separated (``EXC-01;CMP-01``);
* ``kb_paper_era`` / ``kb_hardened`` -- ``pass`` / ``fail`` / empty when not run;
* ``label`` -- the human verdict, one of :data:`LABELS`: ``defect`` (the battery is right: the kernel gets
  something wrong that no accepted semantics allows), ``convention`` (the kernel implements a recognised
  different semantics exactly -- flush-to-zero, NaN-ignoring max, TF32, approximate intrinsics -- which the
  contract forbids), ``false_alarm`` (the kernel is correct; the battery is wrong), ``unclear`` (the auditor
  could not decide), ``unlabelled`` (not yet audited);
* ``labeller`` -- who decided (initials or handle; empty while unlabelled), ``note`` -- one line of evidence.

A kernel with several failing gates gets the most severe verdict over them (:data:`SEVERITY`): one real
defect makes the battery's rejection right whatever the other gates found; ``false_alarm`` only when every
failing gate is the battery's fault. A kernel may sit in the disputed cell of more than one corpus (the mixed
GPU corpus copies leaderboard kernels), so the key is (corpus, id).

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
LABELS = ("defect", "convention", "false_alarm", "unclear", "unlabelled")
# Kernel verdict from per-gate verdicts: the first of these that any failing gate received.
SEVERITY = ("defect", "convention", "unclear", "false_alarm")


class LabelFileError(ValueError):
    pass


def _id_key(i: str) -> tuple[int, int | str]:
    return (0, int(i)) if str(i).isdigit() else (1, str(i))


def _row_key(r: Mapping[str, str]) -> tuple[str, tuple[int, int | str]]:
    return (r["corpus"], _id_key(r["id"]))


def kernel_label(gate_labels: Iterable[str]) -> str:
    """The kernel's verdict from its failing gates' verdicts (:data:`SEVERITY`); ``unlabelled`` if none."""
    given = set(gate_labels)
    unknown = given - set(SEVERITY)
    if unknown:
        raise LabelFileError(f"gate verdicts {sorted(unknown)} not in {SEVERITY}")
    return next((lab for lab in SEVERITY if lab in given), "unlabelled")


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
        if (r["corpus"], r["id"]) in seen:
            raise LabelFileError(f"line {n}: duplicate id {r['id']} in corpus {r['corpus']}")
        seen.add((r["corpus"], r["id"]))


def dumps(rows: Iterable[Mapping[str, Any]]) -> str:
    out = sorted(({k: "" if r.get(k) is None else str(r.get(k)) for k in FIELDS} for r in rows),
                 key=_row_key)
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
    """A fresh, unlabelled label file for a selection made by :func:`lethe.hand_audit.sample.select`.

    ``kb_paper_era`` is ``pass`` because selection is from the disputed cell, which KernelBench's check accepted
    (for the GPU corpora that check is KernelBench's own code at 48642c5c, which the paper-era replica copies)."""
    return [{"id": s["id"], "corpus": corpus, "stratum": s["stratum"], "op_class": s["op_class"],
             "our_channels": ";".join(s["our_channels"]), "kb_paper_era": "pass", "kb_hardened": "",
             "label": "unlabelled", "labeller": "", "note": ""} for s in selection["selected"]]


def merge(labelled: Iterable[Mapping[str, Any]], fresh: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The label file after a new selection: every labelled row kept as it is (a verdict is never dropped or
    reset by re-selecting), plus the fresh rows whose (corpus, id) is not there yet, so a later device run's
    kernels are appended unlabelled and the auditor labels only those."""
    out = [dict(r) for r in labelled]
    have = {(str(r["corpus"]), str(r["id"])) for r in out}
    out += [dict(r) for r in fresh if (str(r["corpus"]), str(r["id"])) not in have]
    return out
