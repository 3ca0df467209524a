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

That derivation needs a graded row. A hostile candidate's full-battery row is often a containment status (a
crash, a timeout, the sandbox's own kill) that says nothing about which gates a shorter run would have passed:
the full battery runs more probes in the candidate's process than the quick tier does, so a candidate that
misbehaves only on some of them may be graded, and pass, on the quick tier's alone. For such a corpus the quick
tier is *run* (:func:`tier_rows`: each member once with the quick gates only, once with the full battery) and
:func:`measured_false_passes` compares the two rows of each member: the quick tier lets a member through when
its own row does not reject (graded, no quick gate failing) while the full battery's does (a failing gate or
any status short of grading: crash, timeout, compile or load failure).
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


def measured_false_passes(full_rows: Iterable[Mapping[str, Any]], tier_rows_: Iterable[Mapping[str, Any]],
                          tier: str = "quick") -> dict[str, Any]:
    """Among kernels the full battery rejects, those whose own run of the tier (``tier_rows_``, one row per id,
    same seed and profile) does not reject them; with each kernel's two verdicts and, as a check, the ids the
    full rows alone would have given (:func:`false_passes`)."""
    from lethe.verifier.api import verdict

    gates = TIERS[tier]
    full = {str(r["id"]): r for r in full_rows}
    mine = {str(r["id"]): r for r in tier_rows_}
    if set(full) != set(mine):
        raise ValueError(f"tier rows and full rows name different kernels: {sorted(set(full) ^ set(mine))}")
    rejected = [i for i, r in full.items() if _rejects(r)]
    missed = sorted(i for i in rejected if not _rejects(mine[i], gates))
    return {"tier": tier, "gates": list(gates) if gates else "all", "quick_rows": "measured",
            "rejected_by_full": len(rejected), "passed_by_tier": len(missed),
            "rate": len(missed) / len(rejected) if rejected else None, "ids": missed,
            # A kernel the tier rejects although the full battery passes it: impossible for graded rows of one
            # seed (the tier's gates are among the full battery's), so any id here is a run that behaved
            # differently the second time (a containment race, a limit hit once).
            "rejected_by_tier_only": sorted(i for i, r in full.items() if not _rejects(r) and _rejects(mine[i], gates)),
            "derived_ids": false_passes(full.values(), tier)["ids"],
            "verdicts": {i: {tier: verdict(mine[i]), "full": verdict(full[i])} for i in sorted(full)}}


def measure(full_rows_by_corpus: Mapping[str, Iterable[Mapping[str, Any]]],
            timings: Iterable[Mapping[str, Any]] = (),
            quick_rows_by_corpus: Mapping[str, Iterable[Mapping[str, Any]]] | None = None,
            notes_by_corpus: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The tiers document: per corpus of committed full-battery rows (one profile), what the quick tier alone
    lets through; and per-kernel seconds of each tier where they were timed. A corpus in
    ``quick_rows_by_corpus`` has committed rows of the quick tier run on its own, compared with
    :func:`measured_false_passes`; the others are derived from their full rows (:func:`false_passes`).
    ``notes_by_corpus``: a line of how a corpus was run (its limits), kept with its entry."""
    quick_rows_by_corpus = quick_rows_by_corpus or {}
    out: dict[str, Any] = {"schema": "lethe.tiers/1", "tiers": {k: list(v) if v else "all" for k, v in TIERS.items()},
                           "corpora": {}, "timings": list(timings)}
    for corpus, rows in full_rows_by_corpus.items():
        rows = list(rows)
        if corpus in quick_rows_by_corpus:
            entry = measured_false_passes(rows, list(quick_rows_by_corpus[corpus]), "quick")
        else:
            entry = {**false_passes(rows, "quick"), "quick_rows": "derived"}
        out["corpora"][corpus] = {"kernels": len(rows), **entry}
        if notes_by_corpus and corpus in notes_by_corpus:
            out["corpora"][corpus]["run"] = notes_by_corpus[corpus]
    return out


def run_note(prov: Mapping[str, Any], rows: Iterable[Mapping[str, Any]]) -> str:
    """How a corpus of :func:`tier_rows` was run, from its provenance and rows: device, the candidate's limits,
    and how many rows ran under the full operating-system isolation (tamper-proof)."""
    rows = list(rows)
    proof = sum(bool(r.get("tamper_proof")) for r in rows)
    return (f"{prov.get('device', '?')}, {prov.get('profile', 'strict')} profile, candidate limits "
            f"{float(prov.get('timeout_s', 0)):g} s and {prov.get('memory_mb', '?')} MB per run, "
            f"{proof} of {len(rows)} full-battery rows tamper-proof")


def tier_rows(kernels: Iterable[tuple[str, str, str, dict]], *, tier: str = "quick", device: str = "cpu",
              seed: int = 20260829, profile: str = "strict", corpus: str = "", timeout_s: float = 600,
              memory_mb: int = 8192, log=None) -> tuple[list[dict], list[dict]]:
    """``(tier rows, full rows)``: each (id, reference, candidate, sources) verified with the tier's gates
    alone and with the full battery, one after the other (same seed, profile and limits), for
    :func:`measured_false_passes`."""
    from lethe.verifier import api

    gates = TIERS[tier]
    if gates is None:
        raise ValueError("the full battery has no tier of its own to compare")
    mine, full = [], []
    for kid, ref, cand, sources in kernels:
        kw = dict(profile=profile, device=device, seed=seed, timeout_s=timeout_s, memory_mb=memory_mb,
                  kernel_id=kid, corpus=corpus, sources=sources)
        mine.append(api.verify(ref, cand, only_gates=list(gates), **kw))
        full.append(api.verify(ref, cand, **kw))
        if log:
            log(f"{kid}: {tier} {api.verdict(mine[-1])} ({mine[-1]['seconds']:.1f} s), "
                f"full {api.verdict(full[-1])} ({full[-1]['seconds']:.1f} s)")
    return mine, full


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
    ap = argparse.ArgumentParser(prog="python -m lethe.verifier.tiers",
                                 description="time each tier (--out), or run each member under the quick tier "
                                             "alone and the full battery (--rows)")
    ap.add_argument("members", nargs="+", help="member folders (cand.py, and ref.py unless --ref)")
    how = ap.add_mutually_exclusive_group(required=True)
    how.add_argument("--out", help="timing file to write (lethe.tier_timing/1)")
    how.add_argument("--rows", help="folder for rows.parquet (full battery), quick_rows.parquet (quick tier "
                                    "alone) and provenance.json")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--ref", help="one reference for every member (a suite with a shared ref.py)")
    ap.add_argument("--corpus", default="", help="the rows' corpus field (--rows)")
    ap.add_argument("--timeout-s", type=float, default=600, help="candidate wall clock per run (--rows)")
    ap.add_argument("--memory-mb", type=int, default=8192, help="candidate memory per run (--rows)")
    a = ap.parse_args(argv)

    def ref_of(m: Path) -> Path:
        return Path(a.ref) if a.ref else m / "ref.py"

    members = [Path(m) for m in a.members]
    if a.rows:
        from lethe.verifier import records

        kernels = [(m.name, read_source(ref_of(m)), read_source(m / "cand.py"),
                    {"ref_path": str(ref_of(m)), "cand_path": str(m / "cand.py")}) for m in members]
        quick, full = tier_rows(kernels, device=a.device, corpus=a.corpus, timeout_s=a.timeout_s,
                                memory_mb=a.memory_mb, log=print)
        out = Path(a.rows)
        out.mkdir(parents=True, exist_ok=True)
        records.write_rows(full, out / "rows.parquet")
        records.write_rows(quick, out / "quick_rows.parquet")
        provenance.write(out / "provenance.json", command="python -m lethe.verifier.tiers " + " ".join(argv),
                         device=a.device, profile="strict", seed=20260829, n_kernels=len(kernels),
                         timeout_s=a.timeout_s, memory_mb=a.memory_mb, tier="quick")
        return 0
    pairs = [(m.name, read_source(ref_of(m)), read_source(m / "cand.py")) for m in members]
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
    measured = {c: v for c, v in doc["corpora"].items() if v.get("quick_rows") == "measured"}
    if measured:
        one = len(measured) == 1
        runs = "; ".join(v["run"] if one else f"{c}: {v['run']}" for c, v in measured.items() if v.get("run"))
        derived = "; ".join(f"{len(v['derived_ids'])}" if one else f"{c}: {len(v['derived_ids'])}"
                            for c, v in measured.items())
        notes.append(f"{', '.join(measured)}: the quick tier was run on its own beside the full battery"
                     f"{f' ({runs})' if runs else ''}, since a crash, timeout or kill in a full-battery row does not "
                     f"say which gates a shorter run would pass. A member counts as let through when the quick "
                     f"tier's own row passes it (graded, no quick gate failing) and the full battery's row does "
                     f"not (a failing gate, or a containment status: crash, timeout, compile or load failure); "
                     f"read from the full battery's rows alone, the count would be {derived}. The other rows are "
                     f"derived from the full battery's rows (their quick gates' statuses).")
        odd = {c: v["rejected_by_tier_only"] for c, v in measured.items() if v.get("rejected_by_tier_only")}
        for c, ids in odd.items():
            notes.append(f"{c}: rejected by the quick tier but passed by the full battery (a run that behaved "
                         f"differently the second time): {', '.join(ids)}.")
    render_table(recs, [("corpus", "rows (strict)"), ("kernels", "kernels"), ("rejected", "full battery rejects"),
                        ("through", "quick tier alone passes"),
                        ("rate", "let through", lambda v: "–" if v is None else f"{v:.0%}"),
                        ("ids", "kernels let through")],
                 "What the quick tier alone lets through that the full battery rejects", "tab:verifier-tiers",
                 md, tex, notes=notes)
