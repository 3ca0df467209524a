"""A tiered check for reward loops: a cheap tier of gates first, the full battery only on its survivors.

A reward loop judges thousands of kernels, most of them wrong in the first way it checks. The ``quick`` tier
runs the gates whose probes are few and whose failures are the commonest in generated code: value agreement on
the base and value-range inputs (CMP-01), other shapes than the one the problem fixes (CMP-03), NaN/Inf
propagation (EXC-01) and run-to-run repeatability and aliasing (ORD-02); the reference and the candidate run
only those gates' probes (no gradient, precision, accumulator, reordering or ahead-of-time work).

``verify_tiered`` returns the quick tier's row when a quick gate already fails (the kernel is rejected for the
reason that row names), and the full battery's row otherwise, so its final verdict is the full battery's
verdict: tiering changes the cost, never the outcome. Using the quick tier *alone* does change the outcome: a
kernel that only fails a gate outside it passes. :func:`false_passes` counts exactly those kernels in a set of
full-battery rows (same seed and profile: a gate's verdict does not depend on which other gates ran), which is
how the rate each tier lets through is measured (results/verifier/tiers.json).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

#: The gates of each tier, cheapest first; ``None`` = every gate.
TIERS: dict[str, tuple[str, ...] | None] = {"quick": ("CMP-01", "CMP-03", "EXC-01", "ORD-02"), "full": None}


def _rejects(row: Mapping[str, Any], gates: Iterable[str] | None = None) -> bool:
    """Does this row reject the kernel on ``gates`` (all when None)? A row that never reached grading rejects
    (compile failure, crash, timeout) unless it could not judge at all (broken reference, not auditable)."""
    status = row.get("status")
    if status in ("ref_broken", "not_auditable"):
        return False
    if status != "gated":
        return True
    wanted = None if gates is None else set(gates)
    return any(v.get("status") in ("fail", "error") for g, v in (row.get("gates") or {}).items()
               if wanted is None or g in wanted)


def verify_tiered(ref_src: str, cand_src: str, *, tier: str = "quick", **kw) -> tuple[dict, str]:
    """``(row, tier that decided)``: the ``tier`` gates first; the full battery only if they all pass."""
    from lethe.verifier import api

    gates = TIERS[tier]
    if gates is not None:
        first = api.verify(ref_src, cand_src, only_gates=list(gates), **kw)
        if _rejects(first) or first.get("status") in ("ref_broken", "not_auditable"):
            return first, tier
    return api.verify(ref_src, cand_src, **kw), "full"


def false_passes(full_rows: Iterable[Mapping[str, Any]], tier: str) -> dict[str, Any]:
    """Among kernels the full battery rejects, those the tier's gates alone would pass (by id)."""
    gates = TIERS[tier]
    rejected = [r for r in full_rows if _rejects(r)]
    missed = sorted(str(r["id"]) for r in rejected if not _rejects(r, gates))
    return {"tier": tier, "gates": list(gates) if gates else "all", "rejected_by_full": len(rejected),
            "passed_by_tier": len(missed), "rate": len(missed) / len(rejected) if rejected else None,
            "ids": missed}


def measure(full_rows_by_corpus: Mapping[str, Iterable[Mapping[str, Any]]],
            timings: Iterable[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """The tiers document: per corpus of committed full-battery rows (one profile), what the quick tier alone
    lets through; and per-kernel seconds of each tier where they were timed."""
    out: dict[str, Any] = {"schema": "lethe.tiers/1", "tiers": {k: list(v) if v else "all" for k, v in TIERS.items()},
                           "corpora": {}, "timings": list(timings)}
    for corpus, rows in full_rows_by_corpus.items():
        rows = list(rows)
        out["corpora"][corpus] = {"kernels": len(rows), **false_passes(rows, "quick")}
    return out


def time_tiers(pairs: Iterable[tuple[str, str, str]], *, device: str = "cpu", seed: int = 20260829) -> list[dict]:
    """Seconds of one verification per tier for each (id, reference, candidate), the reference already in the
    cache (a reward loop's steady state: one reference, many candidates); the first call of each tier fills it."""
    import time

    from lethe.verifier import api

    out = []
    for kid, ref, cand in pairs:
        rec: dict[str, Any] = {"id": kid}
        for tier, gates in TIERS.items():
            only = list(gates) if gates else None
            api.verify(ref, cand, device=device, seed=seed, only_gates=only)
            t0 = time.perf_counter()
            row = api.verify(ref, cand, device=device, seed=seed, only_gates=only)
            rec[tier] = {"seconds": round(time.perf_counter() - t0, 3), "status": row["status"],
                         "failed": sorted(g for g, v in row["gates"].items() if v["status"] == "fail")}
        out.append(rec)
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse
    import json
    import sys
    from pathlib import Path

    from lethe import provenance
    from lethe.verifier.sources import read_source

    argv = list(sys.argv[1:] if argv is None else argv)  # the provenance records the command as given
    ap = argparse.ArgumentParser(prog="python -m lethe.verifier.tiers", description="time each tier")
    ap.add_argument("members", nargs="+", help="red-team member folders (ref.py + cand.py)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args(argv)
    pairs = [(Path(m).name, read_source(Path(m) / "ref.py"), read_source(Path(m) / "cand.py")) for m in a.members]
    doc = {"schema": "lethe.tier_timing/1", "device": a.device,
           "what": "seconds of one verification per tier, the reference already cached; strict profile",
           "kernels": time_tiers(pairs, device=a.device)}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    provenance.write(Path(a.out).with_name("tier_timing_provenance.json"),
                     command="python -m lethe.verifier.tiers " + " ".join(argv), device=a.device)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


def render(doc: Mapping[str, Any], timing: Mapping[str, Any], md: str, tex: str) -> None:
    """The tiers table: per corpus, how many full-battery rejections the quick tier alone lets through; with
    the timed seconds of each tier in the notes."""
    from statistics import median

    from lethe.render.tables import render_table

    recs = [{"corpus": c, "kernels": v["kernels"], "rejected": v["rejected_by_full"], "through": v["passed_by_tier"],
             "rate": v["rate"], "ids": ", ".join(v["ids"]) or "–"} for c, v in doc["corpora"].items()]
    ks = timing.get("kernels", [])
    q = [k["quick"]["seconds"] for k in ks]
    f = [k["full"]["seconds"] for k in ks]
    notes = [f"quick tier: {', '.join(doc['tiers']['quick'])}; the tiered check (quick, then the full battery on "
             f"survivors) ends with the full battery's verdict, so it lets nothing through; the column counts what "
             f"the quick tier alone would.",
             f"Seconds per kernel with the reference cached ({timing.get('device', 'cpu')}, {len(ks)} red-team "
             f"members, {timing.get('what', '')}): quick median {median(q):.2f} s, full median {median(f):.2f} s."
             if ks else "No timing committed."]
    render_table(recs, [("corpus", "rows (strict)"), ("kernels", "kernels"), ("rejected", "full battery rejects"),
                        ("through", "quick tier alone passes"),
                        ("rate", "let through", lambda v: "–" if v is None else f"{v:.0%}"),
                        ("ids", "kernels let through")],
                 "What the quick tier alone lets through that the full battery rejects", "tab:verifier-tiers",
                 md, tex, notes=notes)
