"""Stratified, seeded sample selection over (gate x operator class) of the disputed cell.

The disputed cell is the set of kernels KernelBench's check accepts and the battery rejects. Each kernel is
filed under ONE stratum, its first failing channel in :data:`PRIORITY` -- tolerance-free channels first, since a
kernel that also fails a tolerance-free gate is audited for that (it needs no argument about tolerances), then
the thresholded gates. Within each (stratum, op_class) group, up to ``per_stratum`` kernels are drawn without
replacement by a generator seeded from (seed, stratum, op_class), so adding a stratum never reshuffles another
and the same seed always gives the same sample.
"""

from __future__ import annotations

import re
import zlib
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from lethe.audit import aggregate as agg

PRIORITY = ("EXC-01", "ORD-02", "aliasing", "crash", "pre_gate", "EXC-02", "CMP-03", "CMP-01", "ORD-01",
            "ORD-03", "PRC-01", "PRC-02", "RES-01", "RES-02", "CMP-02")
_CHANNEL_OF = {"aliasing": "aliasing", "crash": "crash", "pre_gate": "pre_gate"}


def channels(row: Mapping[str, Any]) -> list[str]:
    """Every failing gate plus the non-gate channels (aliasing, crash, pre_gate) of an audit row."""
    row = agg.normalize_row(row)
    out = {g for g, v in row["gates"].items() if isinstance(v, Mapping) and v.get("status") == "fail"}
    out |= {c for c in agg.channels(row) if c in _CHANNEL_OF}
    return sorted(out)


def stratum(row: Mapping[str, Any]) -> str:
    chans = set(channels(row))
    return next((c for c in PRIORITY if c in chans), "other")


def _group_seed(seed: int, key: tuple[str, str]) -> int:
    return zlib.crc32(f"{seed}|{key[0]}|{key[1]}".encode())


def select(disputed: Iterable[Mapping[str, Any]], seed: int, per_stratum: int = 2) -> dict[str, Any]:
    """The sample: ``{"seed", "per_stratum", "cell_size", "bucket_sizes", "selected": [...]}``."""
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
    rows = [agg.normalize_row(r) for r in disputed]
    for r in rows:
        groups[(stratum(r), str(r.get("op_class") or "unknown"))].append(r)
    selected = []
    for key in sorted(groups):
        members = sorted(groups[key], key=lambda r: agg._id_key(r["id"]))
        rng = np.random.default_rng(_group_seed(seed, key))
        idx = sorted(rng.choice(len(members), size=min(per_stratum, len(members)), replace=False).tolist())
        for i in idx:
            r = members[i]
            selected.append({"id": r["id"], "stratum": key[0], "op_class": key[1], "our_channels": channels(r),
                             "our_fail_reasons": {g: (v.get("reason") or "")[:300] for g, v in r["gates"].items()
                                                  if isinstance(v, Mapping) and v.get("status") == "fail"}})
    return {"seed": seed, "per_stratum": per_stratum, "cell_size": len(rows),
            "bucket_sizes": dict(sorted(Counter(stratum(r) for r in rows).items())), "n_selected": len(selected),
            "selected": selected}


def per_stratum_for(disputed: Iterable[Mapping[str, Any]], target: int) -> int:
    """The smallest per-group quota whose stratified sample holds at least ``min(target, cell size)`` kernels.

    Groups are (stratum, op_class) as in :func:`select`. A cell smaller than ``target`` gets every kernel; a
    larger one gets the same quota in every group, so small groups are taken whole and large ones are capped,
    which keeps rare gates and classes in the sample instead of letting the commonest stratum fill it."""
    sizes = list(Counter((stratum(r), str(r.get("op_class") or "unknown")) for r in disputed).values())
    want = min(int(target), sum(sizes))
    k = 0
    while sum(min(k, n) for n in sizes) < want:
        k += 1
    return k


def select_target(disputed: Iterable[Mapping[str, Any]], seed: int, target: int) -> dict[str, Any]:
    """:func:`select` with the quota of :func:`per_stratum_for`: a stratified sample of at least ``target``
    kernels (all of them while the cell is smaller), recorded with its ``target``."""
    rows = [agg.normalize_row(r) for r in disputed]
    sel = select(rows, seed, per_stratum=per_stratum_for(rows, target))
    sel["target"] = int(target)
    return sel


def money_cell_rows(rows: Iterable[Mapping[str, Any]], ids: Iterable[str], profile: str) -> list[Mapping[str, Any]]:
    """The verdict rows of the disputed cell's kernels ``ids`` under ``profile``; a kernel of the cell without
    a row under that profile is an error (the cell and the rows it was computed from have come apart)."""
    by = {r["id"]: r for r in rows if r.get("profile", profile) == profile}
    missing = sorted(set(ids) - set(by))
    if missing:
        raise KeyError(f"no {profile} row for disputed kernels {missing}")
    return [by[i] for i in sorted(set(ids), key=agg._id_key)]


def channels_by_profile(rows: Iterable[Mapping[str, Any]], kernel_id: str) -> dict[str, list[str]]:
    """The failing channels of one kernel under every profile it was verified with: the evidence of whether a
    rejection is a contract choice (it disappears under cuda-default or fast-math) or holds under every profile."""
    return {str(r.get("profile")): channels(r) for r in sorted(rows, key=lambda r: str(r.get("profile")))
            if r["id"] == kernel_id}


_KB_ID = re.compile(r"level_(\d+)_problem_(\d+)_sample_\d+$")


def problem_of(kernel_id: str) -> tuple[int, int] | None:
    """(level, problem) of a KernelBench-run kernel id ``level_<L>_problem_<P>_sample_<S>``; None otherwise."""
    m = _KB_ID.match(str(kernel_id))
    return (int(m.group(1)), int(m.group(2))) if m else None


def with_op_class(rows: Iterable[Mapping[str, Any]], classes: Mapping[tuple[int, int], str]) -> list[dict[str, Any]]:
    """Rows whose empty ``op_class`` is filled from their KernelBench problem's class (``classes``: (level,
    problem) -> class). The GPU rows leave op_class empty, and the class belongs to the problem, not to the
    candidate, so every kernel of one problem is stratified the same way."""
    out = []
    for r in rows:
        r = dict(r)
        if not r.get("op_class"):
            r["op_class"] = classes.get(problem_of(r["id"]) or (-1, -1), "")
        out.append(r)
    return out


def select_cells(cells: Mapping[str, tuple[Iterable[str], Iterable[Mapping[str, Any]]]], *, profile: str, seed: int,
                 target: int) -> dict[str, Any]:
    """The hand-audit selection over several corpora's disputed cells, each sampled on its own.

    ``cells``: corpus -> (the cell's kernel ids, that corpus's verdict rows under every profile). Each corpus
    is stratified by (stratum, op_class) under ``profile`` and sampled with :func:`select_target`, and every
    selected kernel carries its failing channels under each profile (:func:`channels_by_profile`). Returns
    ``{"profile", "seed", "target", "corpora": {corpus: selection}}``; bucket sizes are keyed
    ``"<corpus> <stratum>"``, the table rows of :func:`lethe.hand_audit.render.corpus_stratum_key`."""
    out: dict[str, Any] = {"profile": profile, "seed": seed, "target": int(target), "corpora": {},
                           "bucket_sizes": {}}
    for corpus in sorted(cells):
        ids, rows = cells[corpus]
        rows = [agg.normalize_row(r) for r in rows]
        sel = select_target(money_cell_rows(rows, list(ids), profile), seed, target)
        for s in sel["selected"]:
            s["channels_by_profile"] = channels_by_profile(rows, s["id"])
        out["corpora"][corpus] = sel
        out["bucket_sizes"].update({f"{corpus} {k}": v for k, v in sel["bucket_sizes"].items()})
    return out
