"""The pre-registered robustness test of the tolerance-free floor (docs/audit.md, "Pre-registered").

Hypothesis, as committed before any corpus it applies to was audited: the floor is robust to legitimate
semantics if at least 90% of the strict-profile EXC-01/EXC-02 failures persist under the environment-matched
profile -- ``fast-math`` for kernels compiled with fast math, ``cuda-default`` for every other kernel.

Pure functions over verdict rows (one row per kernel and profile, all three profiles graded from one candidate
run) and a per-kernel fast-math flag read statically from the candidate source (:func:`fast_math_compiled`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from lethe.audit import aggregate as agg

THRESHOLD = 0.90
GATES = ("EXC-01", "EXC-02")
_FAST_MATH = re.compile(r"(?<![\w-])(--use_fast_math|-use_fast_math|-ffast-math|-Ofast)(?![\w-])")


def fast_math_compiled(cand_src: str) -> bool:
    """Does the candidate ask its compiler for fast math (``load_inline``'s flags, read from the source)?"""
    return bool(_FAST_MATH.search(cand_src or ""))


def matched_profile(fast_math: bool) -> str:
    return "fast-math" if fast_math else "cuda-default"


def _fails(row: Mapping[str, Any] | None) -> bool:
    if not row or row.get("status") != "gated":
        return False
    gates = row.get("gates") or {}
    return any((gates.get(g) or {}).get("status") == "fail" for g in GATES)


def evaluate(rows: Iterable[Mapping[str, Any]], fast_math: Mapping[str, bool], *,
             require_accepted: bool = True) -> dict[str, Any]:
    """The test on one corpus: population, persisted, rate, verdict, and the three profiles' floors."""
    by_profile: dict[str, dict[str, dict]] = {}
    for raw in rows:
        r = agg.normalize_row(raw)
        by_profile.setdefault(r["profile"], {})[str(r["id"])] = r
    strict = by_profile.get("strict", {})
    den_ids = [i for i, r in sorted(strict.items())
               if agg.drop_reason(r, require_accepted=require_accepted) is None]
    population = [i for i in den_ids if _fails(strict[i])]
    persisted, flipped = [], []
    for i in population:
        prof = matched_profile(bool(fast_math.get(i)))
        (persisted if _fails(by_profile.get(prof, {}).get(i)) else flipped).append({"id": i, "matched": prof})
    n = len(population)
    rate = len(persisted) / n if n else None
    keep = set(den_ids)
    floors = {p: {"floor": agg.floor([r for i, r in sorted(rs.items()) if i in keep]),
                  "floor_with_exc02": agg.floor([r for i, r in sorted(rs.items()) if i in keep],
                                                agg.FLOOR_WITH_EXC02_CHANNELS)}
              for p, rs in sorted(by_profile.items())}
    return {"threshold": THRESHOLD, "denominator": len(den_ids), "population": n, "persisted": len(persisted),
            "rate": rate, "verdict": "no evidence" if not n else ("robust" if rate >= THRESHOLD else "not robust"),
            "fast_math_kernels": sum(1 for i in den_ids if fast_math.get(i)),
            "flipped": flipped, "floors": floors}
