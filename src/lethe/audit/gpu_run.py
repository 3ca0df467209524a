"""Tables of a one-machine GPU audit of a mixed KernelBench run folder (experiments/audit/replicate_h200.py).

The folder mixes candidates of different origins (``origin.json``: leaderboard CUDA kernels, the trusted
corpus's hand-written PyTorch and Triton kernels, a problem's own reference code as its candidate), all judged
from one candidate run under the three profiles. Per origin: how many kernels reached grading, how many pass
every applicable gate under each profile, and which gates fail; below it the run's throughput, the kill -9
resume facts and the pre-registered robustness test (lethe.audit.preregistered).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

PROFILES = ("strict", "cuda-default", "fast-math")
ORIGIN_LABEL = {"leaderboard": "leaderboard (CUDA, load_inline)", "hand-pytorch": "hand-written PyTorch (trusted)",
                "hand-triton": "hand-written Triton (trusted)", "self": "reference's own code (trusted)"}


def _failed(row: dict) -> list[str]:
    return sorted(g for g, v in (row.get("gates") or {}).items() if v.get("status") in ("fail", "error"))


def table_rows(rows: list[dict], origin: dict[str, str]) -> list[dict[str, Any]]:
    out = []
    for org in sorted({origin.get(str(r["id"]), "other") for r in rows}):
        mine = [r for r in rows if origin.get(str(r["id"]), "other") == org]
        strict = [r for r in mine if r["profile"] == "strict"]
        rec: dict[str, Any] = {"origin": ORIGIN_LABEL.get(org, org), "kernels": len(strict),
                               "graded": sum(r["status"] == "gated" for r in strict)}
        for p in PROFILES:
            rec[p] = sum(1 for r in mine if r["profile"] == p and r["status"] == "gated" and not _failed(r))
        fails = Counter(g for r in strict for g in _failed(r))
        other = Counter(r["status"] for r in strict if r["status"] != "gated")
        rec["failing"] = ", ".join(f"{g} {n}" for g, n in sorted(fails.items())) or "–"
        rec["not_graded"] = ", ".join(f"{s} {n}" for s, n in sorted(other.items())) or "–"
        out.append(rec)
    return out


def render(rows: list[dict], origin: dict[str, str], resume: dict, prereg: dict, builds: list[dict],
           corpus: str, md: str, tex: str) -> None:
    from lethe.render.tables import render_table

    n = resume.get("kernels") or len({r["id"] for r in rows})
    wall = float(resume["first_attempt"]["wall_s"] or 0) + float(resume["second_attempt"]["wall_s"] or 0)
    ok_builds = sum(1 for b in builds if b.get("ok"))
    notes = [
        f"One NVIDIA H200 machine (16 CPU cores), 8 workers, each kernel's three profiles graded from one "
        f"candidate run; {n} kernels in {wall:.0f} s wall ({wall / n:.1f} s per kernel, the float64 references "
        f"computed cold on the CPU); {ok_builds} of {len(builds)} extensions built first in {resume.get('build')} s "
        f"by 8 parallel build steps.",
        f"Resume: the first attempt was killed with SIGKILL after {resume['first_attempt']['wall_s']} s; the same "
        f"command then finished; {resume['rows']} rows, {resume['unique_rows']} unique (kernel, profile), "
        f"{resume['checkpoint_lines']} checkpoint lines: nothing lost or duplicated.",
        f"Pre-registered test (docs/audit.md): {prereg['population']} strict EXC-01/EXC-02 failures, "
        f"{prereg['persisted']} persist under the matched profile -> {prereg['verdict']} "
        f"(threshold {prereg['threshold']:.0%}; a population this small decides nothing about a corpus).",
    ]
    render_table(table_rows(rows, origin), [("origin", "candidates"), ("kernels", "kernels"),
                                            ("graded", "graded"), ("strict", "pass strict"),
                                            ("cuda-default", "pass cuda-default"), ("fast-math", "pass fast-math"),
                                            ("failing", "failing gates (strict)"), ("not_graded", "not graded")],
                 f"The {corpus} KernelBench run audited on the H200, by candidate origin",
                 f"tab:audit-{corpus}-h200", md, tex, notes=notes)


def render_from(results_dir: str | Path, corpus: str, md: str, tex: str) -> None:
    """Render from ``results/audit/<corpus>/`` (rows.parquet, origin.json, resume.json, builds.jsonl,
    preregistered.json)."""
    from lethe.verifier.records import read_rows

    d = Path(results_dir)
    rows = read_rows(d / "rows.parquet")
    builds = [json.loads(x) for x in (d / "builds.jsonl").read_text().splitlines() if x.strip()]
    render(rows, json.loads((d / "origin.json").read_text()), json.loads((d / "resume.json").read_text()),
           json.loads((d / "preregistered.json").read_text()), builds, corpus, md, tex)
