"""The differential between KernelBench's check and the battery: 2x2 contingency tables and the disputed cell.

Pure functions over rows. Inputs:

* battery verdict rows (``lethe.verifier.records`` shape, as the audit writes them: ``id``, ``op_class``,
  ``status``, ``final_speedup``, ``output_aliasing``, ``gates``);
* KernelBench check rows (:func:`lethe.kernelbench.check.to_row` plus ``id``), one per (id, variant).

The population is the audit's denominator (accepted, reference executable, not a toolchain artefact; the rules
are ``lethe.audit.aggregate``'s so the differential and the audit count the same kernels). A kernel the
KernelBench driver would not record (retry drop, timeout) is left out and counted, never guessed.

"Battery rejects" is ``lethe.audit.aggregate.is_violation`` -- a failed gate, a CUDA crash under a gate, or a
non-artefact failure before gating -- the same predicate behind the paper's any-violation rate (the published
paper-era column sums 1,487 + 152 = 1,639 = its 62.1 % headline numerator). The disputed cell ("accepted by
KernelBench, rejected by the battery") is broken down by failing gate (a kernel counts once under every gate it
fails) and by whether any tolerance-free channel (``FLOOR_CHANNELS``) fires.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from lethe.audit import aggregate as agg

CELLS = ("ext_pass_our_pass", "ext_pass_our_fail", "ext_fail_our_pass", "ext_fail_our_fail")
NO_GATE = "pre_gate_or_crash"
VARIANT_LABEL = {"paper": "paper-era (48642c5c, atol=rtol=1e-2)", "hardened": "hardened (main, fp32 atol=rtol=1e-4)"}


def battery_rejects(row: Mapping[str, Any]) -> bool:
    return agg.is_violation(row)


def failing_gates(row: Mapping[str, Any]) -> list[str]:
    """Gates with status ``fail``; a rejected row without one is filed under :data:`NO_GATE`."""
    gates = sorted(g for g, v in row.get("gates", {}).items() if isinstance(v, Mapping) and v.get("status") == "fail")
    return gates or [NO_GATE]


def is_tolerance_free(row: Mapping[str, Any]) -> bool:
    """True when the rejection needs no numerical tolerance to call (a tolerance-free floor channel fires)."""
    return bool(set(agg.channels(row)) & set(agg.FLOOR_CHANNELS))


def join(audit_rows: Iterable[Mapping[str, Any]], kb_rows: Iterable[Mapping[str, Any]], variant: str,
         require_accepted: bool = True) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Pair each denominator row with its KernelBench result for ``variant``; returns (pairs, exclusions)."""
    kb = {str(r["id"]): r for r in kb_rows if r.get("variant") == variant}
    pairs: list[dict[str, Any]] = []
    excluded: Counter[str] = Counter()
    for raw in audit_rows:
        row = agg.normalize_row(raw)
        reason = agg.drop_reason(row, require_accepted=require_accepted)
        if reason is not None:
            excluded[reason] += 1
            continue
        k = kb.get(row["id"])
        if k is None:
            excluded["no_kernelbench_result"] += 1
            continue
        if k.get("correct") is None:
            excluded[f"kernelbench_{k.get('outcome', 'dropped')}"] += 1
            continue
        pairs.append({"id": row["id"], "op_class": row.get("op_class"), "ext_pass": bool(k["correct"]),
                      "our_pass": not battery_rejects(row), "gates": failing_gates(row),
                      "tolerance_free": is_tolerance_free(row), "row": row})
    return pairs, dict(sorted(excluded.items()))


def contingency(pairs: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The four cells plus the rates derived from them (computed, never copied)."""
    cells = dict.fromkeys(CELLS, 0)
    for p in pairs:
        cells[f"ext_{'pass' if p['ext_pass'] else 'fail'}_our_{'pass' if p['our_pass'] else 'fail'}"] += 1
    return {"cells": cells, **rates(cells)}


def rates(cells: Mapping[str, int]) -> dict[str, Any]:
    n = sum(cells[c] for c in CELLS)
    ext_accepts = cells["ext_pass_our_pass"] + cells["ext_pass_our_fail"]
    disagree = cells["ext_pass_our_fail"] + cells["ext_fail_our_pass"]

    def div(a: int, b: int) -> float | None:
        return a / b if b else None

    return {
        "n": n,
        "ext_accept_rate": div(ext_accepts, n),
        "our_reject_rate": div(cells["ext_pass_our_fail"] + cells["ext_fail_our_fail"], n),
        "money_cell_rate": div(cells["ext_pass_our_fail"], n),
        "rejected_share_of_ext_accepted": div(cells["ext_pass_our_fail"], ext_accepts),
        # one-directional disagreement: what fraction of all disagreements lie in the disputed cell
        "disagreement_asymmetry": div(cells["ext_pass_our_fail"], disagree),
    }


def money_cell(pairs: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The disputed cell (KernelBench accepts, battery rejects): size, per-gate counts, tolerance-free count."""
    cell = [p for p in pairs if p["ext_pass"] and not p["our_pass"]]
    by_gate: Counter[str] = Counter()
    for p in cell:
        by_gate.update(p["gates"])
    tf = sum(1 for p in cell if p["tolerance_free"])
    return {"size": len(cell), "tolerance_free": tf, "not_tolerance_free": len(cell) - tf,
            "by_gate": dict(sorted(by_gate.items(), key=lambda kv: (-kv[1], kv[0]))),
            "ids": sorted((p["id"] for p in cell), key=agg._id_key)}


def differential(audit_rows: Iterable[Mapping[str, Any]], kb_rows: Iterable[Mapping[str, Any]],
                 variants: tuple[str, ...] = ("paper", "hardened"), require_accepted: bool = True) -> dict[str, Any]:
    """Both contingency tables, their disputed cells and the exclusions, as one JSON-able dict."""
    audit_rows, kb_rows = list(audit_rows), list(kb_rows)
    out: dict[str, Any] = {}
    for v in variants:
        pairs, excluded = join(audit_rows, kb_rows, v, require_accepted=require_accepted)
        out[v] = {**contingency(pairs), "money_cell": money_cell(pairs), "excluded": excluded}
    return out


# ------------------------------------------------------------------------------------------ table rows


def table_rows(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per variant for the 2x2 table (from :func:`differential` or :func:`from_published`)."""
    rows = []
    for v in ("paper", "hardened"):
        if v not in result:
            continue
        r = result[v]
        rows.append({"check": VARIANT_LABEL[v], **r["cells"], "n": r["n"],
                     "ext_accept_rate": r["ext_accept_rate"],
                     "rejected_share_of_ext_accepted": r["rejected_share_of_ext_accepted"],
                     "disagreement_asymmetry": r["disagreement_asymmetry"]})
    return rows


def gate_rows(result: Mapping[str, Any], variant: str = "paper") -> list[dict[str, Any]]:
    """The disputed cell broken down by gate, plus the tolerance-free split, as table rows."""
    mc = result[variant]["money_cell"]
    size = mc["size"]
    rows = [{"what": f"fails {g}" if g.upper() == g else f"no failing gate ({g})", "kernels": n,
             "share": n / size if size else None} for g, n in mc["by_gate"].items()]
    rows.append({"what": "any tolerance-free channel", "kernels": mc["tolerance_free"],
                 "share": mc["tolerance_free"] / size if size else None})
    rows.append({"what": "tolerance-dependent only", "kernels": mc["not_tolerance_free"],
                 "share": mc["not_tolerance_free"] / size if size else None})
    rows.append({"what": "disputed cell (total)", "kernels": size, "share": 1.0 if size else None})
    return rows


def from_published(pub: Mapping[str, Any]) -> dict[str, Any]:
    """The paper's ``crossval_kernelbench.json`` in :func:`differential`'s shape, rates recomputed from cells.

    The published file lists the disputed cell by gate only for the paper-era variant, and its
    ``pre_gate_or_crash_or_alias`` bucket is kept under its own name.
    """
    out: dict[str, Any] = {}
    for v, key in (("paper", "cells_paper_era"), ("hardened", "cells_hardened")):
        cells = {c: int(pub[key][c]) for c in CELLS}
        out[v] = {"cells": cells, **rates(cells)}
    size = out["paper"]["cells"]["ext_pass_our_fail"]
    tf = int(pub["money_cell_tolerance_free"])
    out["paper"]["money_cell"] = {
        "size": size, "tolerance_free": tf, "not_tolerance_free": size - tf,
        "by_gate": dict(sorted(pub["money_cell_by_our_gate"].items(), key=lambda kv: (-kv[1], kv[0]))),
    }
    out["joined_rows"] = int(pub["joined_rows"])
    out["corpus"] = pub.get("corpus")
    out["population"] = pub.get("population")
    return out
