"""Stratified, seeded sample selection over (gate x operator class) of the disputed cell.

The disputed cell is the set of kernels KernelBench's check accepts and the battery rejects. Each kernel is
filed under ONE stratum, its first failing channel in :data:`PRIORITY` -- tolerance-free channels first, since a
kernel that also fails a tolerance-free gate is audited for that (it needs no argument about tolerances), then
the thresholded gates. Within each (stratum, op_class) group, up to ``per_stratum`` kernels are drawn without
replacement by a generator seeded from (seed, stratum, op_class), so adding a stratum never reshuffles another
and the same seed always gives the same sample.
"""

from __future__ import annotations

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
