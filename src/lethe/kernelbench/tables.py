"""Rendered tables of the differential and the agreement study (published figures and our own runs).

Everything goes through ``lethe.render.render_table`` so the bytes are deterministic and the look is shared.
Tables drawn from the authors' release say so in the caption (``PUBLISHED_TAG``); tables drawn from this
project's runs name the corpus they were computed on.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lethe.kernelbench import differential as diff
from lethe.render import PUBLISHED_TAG, Column, render_table

PCT = "{:.1%}"

TWO_BY_TWO_COLUMNS = [
    Column("check", "KernelBench check", align="l"),
    Column("ext_pass_our_pass", "KB pass / battery pass"),
    Column("ext_pass_our_fail", "KB pass / battery fail"),
    Column("ext_fail_our_pass", "KB fail / battery pass"),
    Column("ext_fail_our_fail", "KB fail / battery fail"),
    Column("n", "kernels"),
    Column("ext_accept_rate", "KB accept rate", PCT),
    Column("rejected_share_of_ext_accepted", "battery rejects of KB-accepted", PCT),
    Column("disagreement_asymmetry", "disagreements in disputed cell", PCT),
]
GATE_COLUMNS = [Column("what", "disputed cell (KB pass, battery fail)", align="l"), Column("kernels", "kernels"),
                Column("share", "share of cell", PCT)]


def _load(path: str | Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text())


def render_published_differential(pub_path: str | Path, tables_dir: str | Path) -> list[Path]:
    """``differential_published`` (both 2x2 tables) and ``differential_published_by_gate`` (disputed cell)."""
    res = diff.from_published(_load(pub_path))
    tables_dir = Path(tables_dir)
    out = []
    caption = (f"KernelBench check vs the battery on {res['corpus']} ({res['joined_rows']:,} kernels, "
               f"{res['population']}) -- {PUBLISHED_TAG}. Rates are computed here from the published cells.")
    render_table(diff.table_rows(res), TWO_BY_TWO_COLUMNS, caption, "tab:differential-published",
                 tables_dir / "differential_published.md", tables_dir / "differential_published.tex",
                 notes=["KB = KernelBench's correctness check; battery fail = any gate fails, a gate crashes with "
                        "a CUDA error, or the candidate fails before gating."])
    out += [tables_dir / "differential_published.md", tables_dir / "differential_published.tex"]
    caption = (f"The disputed cell of the paper-era check (KernelBench accepts, battery rejects) by failing gate "
               f"-- {PUBLISHED_TAG}.")
    render_table(diff.gate_rows(res, "paper"), GATE_COLUMNS, caption, "tab:differential-published-by-gate",
                 tables_dir / "differential_published_by_gate.md",
                 tables_dir / "differential_published_by_gate.tex",
                 notes=["Gate rows overlap (a kernel counts under every gate it fails); "
                        "pre_gate_or_crash_or_alias is the authors' bucket for rejections with no failing gate."])
    out += [tables_dir / "differential_published_by_gate.md", tables_dir / "differential_published_by_gate.tex"]
    return out


def agreement_rows(cells: Mapping[str, int]) -> list[dict[str, Any]]:
    n = sum(cells.values())
    agree = cells["their_pass_our_pass"] + cells["their_fail_our_fail"]
    return [{"their_pass_our_pass": cells["their_pass_our_pass"], "their_pass_our_fail": cells["their_pass_our_fail"],
             "their_fail_our_pass": cells["their_fail_our_pass"], "their_fail_our_fail": cells["their_fail_our_fail"],
             "n": n, "agreement": agree / n if n else None}]


AGREEMENT_COLUMNS = [Column("their_pass_our_pass", "KB pass / replica pass"),
                     Column("their_pass_our_fail", "KB pass / replica fail"),
                     Column("their_fail_our_pass", "KB fail / replica pass"),
                     Column("their_fail_our_fail", "KB fail / replica fail"),
                     Column("n", "kernels"), Column("agreement", "agreement", "{:.2%}")]


def render_published_agreement(pub_path: str | Path, tables_dir: str | Path) -> list[Path]:
    pub = _load(pub_path)
    tables_dir = Path(tables_dir)
    caption = (f"KernelBench's own check (commit {pub['kernelbench_commit']}) vs the authors' re-implementation, "
               f"paper-era -- {PUBLISHED_TAG}. Agreement computed here from the published cells.")
    render_table(agreement_rows(pub["cells_their_vs_our_replica"]), AGREEMENT_COLUMNS, caption,
                 "tab:kernelbench-agreement-published", tables_dir / "kernelbench_agreement_published.md",
                 tables_dir / "kernelbench_agreement_published.tex")
    return [tables_dir / "kernelbench_agreement_published.md", tables_dir / "kernelbench_agreement_published.tex"]


def render_computed_differential(diff_path: str | Path, corpus: str, tables_dir: str | Path) -> list[Path]:
    """``differential_<corpus>`` and ``differential_<corpus>_by_gate`` from our own ``differential.json``."""
    res = _load(diff_path)
    tables_dir = Path(tables_dir)
    n_excl = {v: sum(res[v]["excluded"].values()) for v in ("paper", "hardened") if v in res}
    excl_note = "; ".join(f"{v}: {k}" for v, k in n_excl.items())
    stem = f"differential_{corpus}"
    render_table(diff.table_rows(res), TWO_BY_TWO_COLUMNS,
                 f"KernelBench check (this project's re-implementation) vs the battery on the {corpus} corpus.",
                 f"tab:{stem}", tables_dir / f"{stem}.md", tables_dir / f"{stem}.tex",
                 notes=[f"Kernels outside the audit denominator or without a recorded KernelBench result are "
                        f"excluded ({excl_note}); see results/differential/{corpus}/differential.json."])
    render_table(diff.gate_rows(res, "paper"), GATE_COLUMNS,
                 f"The disputed cell of the paper-era check on the {corpus} corpus, by failing gate.",
                 f"tab:{stem}-by-gate", tables_dir / f"{stem}_by_gate.md", tables_dir / f"{stem}_by_gate.tex")
    return [tables_dir / f"{stem}{s}" for s in (".md", ".tex", "_by_gate.md", "_by_gate.tex")]


def render_real_vs_battery(diff_path: str | Path, corpus: str, tables_dir: str | Path) -> list[Path]:
    """``kernelbench_real_vs_battery_<corpus>`` (+ ``_by_gate``): KernelBench's own check, run unmodified on a GPU,
    against the battery's strict verdicts on the same kernels (``real_vs_battery.json``, written at ingest)."""
    res = _load(diff_path)
    tables_dir = Path(tables_dir)
    stem = f"kernelbench_real_vs_battery_{corpus}"
    excl = ", ".join(f"{k} {v}" for k, v in sorted(res["paper"]["excluded"].items())) or "none"
    notes = [f"KernelBench side: {res['kernelbench']} (run commit {res.get('kernelbench_run_commit', 'unknown')}); "
             f"battery side: {res.get('battery_rows', 'the same device call')}, profile {res['profile']}.",
             f"Left out of the 2x2: {excl}."]
    for outcome, o in res.get("kernelbench_outcomes", {}).items():
        if outcome != "correct":
            notes.append(f"KernelBench outcome {outcome}: {o['kernels']} kernels"
                         + (f" ({'; '.join(o['details'])})" if o["details"] else "") + ".")
    rows = [dict(r, check="KernelBench's own check (unmodified)") for r in diff.table_rows({"paper": res["paper"]})]
    render_table(rows, TWO_BY_TWO_COLUMNS,
                 f"KernelBench's own check vs the battery on the {corpus} corpus (H200).", f"tab:{stem}",
                 tables_dir / f"{stem}.md", tables_dir / f"{stem}.tex", notes=notes)
    render_table(diff.gate_rows(res, "paper"), GATE_COLUMNS,
                 f"Kernels KernelBench's own check accepts and the battery rejects ({corpus}, H200), by failing gate.",
                 f"tab:{stem}-by-gate", tables_dir / f"{stem}_by_gate.md", tables_dir / f"{stem}_by_gate.tex")
    return [tables_dir / f"{stem}{s}" for s in (".md", ".tex", "_by_gate.md", "_by_gate.tex")]


CLASS_COLUMNS = [Column("class", "disagreement class", align="l"), Column("kernels", "kernels"),
                 Column("definition", "rule", align="l")]


def render_real_agreement(agreement_path: str | Path, corpus: str, tables_dir: str | Path) -> list[Path]:
    """``kernelbench_real_<corpus>_<replica>``: the 2x2 of KernelBench's own check vs a replica on one corpus,
    and ``..._classes``: every disagreement counted under its class (from ``lethe.kernelbench.real.agree``)."""
    res = _load(agreement_path)
    replica = "+".join(res["ours"])
    stem = f"kernelbench_real_{corpus}_{replica}"
    tables_dir = Path(tables_dir)
    notes = [f"Kernels without a verdict on both sides: {res['skipped_dropped']} (left out of the 2x2); "
             f"only one side has the kernel: {res['only_theirs']} KernelBench-only, {res['only_ours']} replica-only."]
    render_table(agreement_rows(res["cells_their_vs_our_replica"]), AGREEMENT_COLUMNS,
                 f"KernelBench's own check ({'+'.join(res['theirs'])}, run unmodified) vs our {replica} replica "
                 f"on the {corpus} corpus.", f"tab:{stem}", tables_dir / f"{stem}.md", tables_dir / f"{stem}.tex",
                 notes=notes)
    from lethe.kernelbench.real import DISAGREEMENT_CLASSES

    # the classifier's rule order (JSON keys are sorted), then any class an older file names
    order = [c for c in DISAGREEMENT_CLASSES if c in res["classes"]] + \
        sorted(c for c in res["classes"] if c not in DISAGREEMENT_CLASSES)
    rows = [{"class": c, "kernels": res["classes"][c], "definition": res["class_definitions"].get(c, "")}
            for c in order]
    rows.append({"class": "all disagreements", "kernels": sum(res["classes"].values()),
                 "definition": "off-diagonal cells plus kernels only one side left without a verdict"})
    render_table(rows, CLASS_COLUMNS,
                 f"Every disagreement between KernelBench's own check and the {replica} replica on the {corpus} "
                 f"corpus, by class (first matching rule).", f"tab:{stem}-classes",
                 tables_dir / f"{stem}_classes.md", tables_dir / f"{stem}_classes.tex",
                 notes=[f"tolerance_edge uses a factor of {res['edge_factor']:g} on atol; "
                        f"repeat runs used: {res['repeat_runs']}."])
    return [tables_dir / f"{stem}{s}" for s in (".md", ".tex", "_classes.md", "_classes.tex")]
