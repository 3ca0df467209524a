"""Table builders for the red team and the positive control, from verdict rows + loose-check rows + manifests.

Red team, one row per kernel: the gates it targets, the gates that fired (status ``fail`` or ``error``), the
extra gates (fired but not targeted), the targets that did not fire, KernelBench's loose-check verdict, and
``caught`` -- every target gate failed. A kernel that the loose check rejects is not a convincing red-team
member (``convincing`` = no); it is still listed, so that the claim "each plausibly passes KernelBench" is
checked rather than asserted.

Positive control, one row per kernel: each gate's status and the overall verdict (``pass`` when no gate failed
or errored: "na" gates are inapplicable, not failures).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lethe.redteam.manifest import GATE_IDS, Kernel

FIRED = ("fail", "error")


def _by_id(rows: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    return {r["id"]: r for r in rows}


def _loose_by_id(loose: Sequence[Mapping[str, Any]], variant: str) -> dict[str, Mapping[str, Any]]:
    return {r["id"]: r for r in loose if r["variant"] == variant}


def loose_verdict(row: Mapping[str, Any] | None) -> str:
    """``pass`` (all five trials allclose), ``fail`` (any other recorded outcome), or ``not run``."""
    if row is None:
        return "not run"
    if row.get("correct") is True:
        return "pass"
    if row.get("correct") is False:
        return "fail"
    return str(row.get("outcome") or "not run")


def fired_gates(row: Mapping[str, Any]) -> list[str]:
    return [g for g in GATE_IDS if row["gates"][g]["status"] in FIRED]


def red_team_record(kernel: Kernel, row: Mapping[str, Any] | None,
                    loose_paper: Mapping[str, Any] | None,
                    loose_hardened: Mapping[str, Any] | None = None) -> dict[str, Any]:
    targets = list(kernel.targets)
    if row is None:
        fired, status = [], "not run"
    else:
        fired, status = (fired_gates(row) if row["status"] == "gated" else []), row["status"]
    caught = status == "gated" and all(row["gates"][t]["status"] == "fail" for t in targets)
    loose = loose_verdict(loose_paper)
    return {
        "kernel": kernel.name,
        "language": kernel.language,
        "style": kernel.manifest["style"],
        "targets": targets,
        "row_status": status,
        "fired": fired,
        "extra": [g for g in fired if g not in targets],
        "missed": [t for t in targets if t not in fired],
        "loose_paper": loose,
        "loose_hardened": loose_verdict(loose_hardened),
        "loose_expected": kernel.manifest["passes_kernelbench_loose"],
        "convincing": loose == "pass",
        "caught": bool(caught),
        "reasons": {t: row["gates"][t]["reason"] for t in targets} if row is not None else {},
    }


def positive_record(kernel: Kernel, row: Mapping[str, Any] | None,
                    loose_paper: Mapping[str, Any] | None) -> dict[str, Any]:
    rec: dict[str, Any] = {"kernel": kernel.name, "language": kernel.language}
    if row is None or row["status"] != "gated":
        status = "not run" if row is None else row["status"]
        rec.update({g: status for g in GATE_IDS})
        rec.update(row_status=status, verdict=status, failed=[], loose_paper=loose_verdict(loose_paper))
        return rec
    rec.update({g: row["gates"][g]["status"] for g in GATE_IDS})
    failed = fired_gates(row)
    rec.update(row_status="gated", verdict="pass" if not failed else "fail", failed=failed,
               loose_paper=loose_verdict(loose_paper),
               failure_reasons={g: row["gates"][g]["reason"] for g in failed})
    return rec


def build_records(suite: str, kernels: Sequence[Kernel], rows: Sequence[Mapping[str, Any]],
                  loose: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One record per kernel, in kernel order; kernels without a row show as ``not run``."""
    by_id, lp, lh = _by_id(rows), _loose_by_id(loose, "paper"), _loose_by_id(loose, "hardened")
    if suite == "red_team":
        return [red_team_record(k, by_id.get(k.name), lp.get(k.name), lh.get(k.name)) for k in kernels]
    return [positive_record(k, by_id.get(k.name), lp.get(k.name)) for k in kernels]


def summarise(suite: str, kernels: Sequence[Kernel], rows: Sequence[Mapping[str, Any]],
              loose: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Suite totals plus the per-kernel records (what ``summary.json`` holds)."""
    recs = build_records(suite, kernels, rows, loose)
    out: dict[str, Any] = {"suite": suite, "n_kernels": len(recs), "kernels": recs}
    if suite == "red_team":
        per_gate = {g: {"targeted": 0, "caught": 0, "fired_as_extra": 0} for g in GATE_IDS}
        for r in recs:
            for t in r["targets"]:
                per_gate[t]["targeted"] += 1
                per_gate[t]["caught"] += int(t in r["fired"] and r["row_status"] == "gated")
            for e in r["extra"]:
                per_gate[e]["fired_as_extra"] += 1
        out.update(
            n_caught=sum(r["caught"] for r in recs),
            n_convincing=sum(r["convincing"] for r in recs),
            n_caught_and_convincing=sum(r["caught"] and r["convincing"] for r in recs),
            uncaught=[r["kernel"] for r in recs if not r["caught"]],
            not_convincing=[r["kernel"] for r in recs if not r["convincing"]],
            per_gate=per_gate,
            every_gate_targeted=all(v["targeted"] > 0 for v in per_gate.values()),
            every_gate_catches=all(v["caught"] > 0 for v in per_gate.values()),
        )
    else:
        out.update(
            all_pass=all(r["verdict"] == "pass" for r in recs),
            gate_fails=[[r["kernel"], g] for r in recs for g in r["failed"]],
            n_pass=sum(r["verdict"] == "pass" for r in recs),
        )
    return out


def _join(items: Sequence[str]) -> str:
    return ", ".join(items) if items else "none"


def red_team_table_rows(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [{
        "kernel": r["kernel"], "language": r["language"], "targets": _join(r["targets"]),
        "fired": _join(r["fired"]) if r["row_status"] in ("gated", "not run") else r["row_status"],
        "extra": _join(r["extra"]), "loose": r["loose_paper"], "caught": "yes" if r["caught"] else "NO",
    } for r in records]


RED_TEAM_COLUMNS = [("kernel", "Kernel"), ("language", "Lang."), ("targets", "Targeted gates"),
                    ("fired", "Gates that fired"), ("extra", "Extra gates"),
                    ("loose", "KernelBench loose check"), ("caught", "Caught")]
POSITIVE_COLUMNS = [("kernel", "Kernel"), ("language", "Lang.")] + [(g, g) for g in GATE_IDS] + \
    [("verdict", "Verdict")]


def render(suite: str, kernels: Sequence[Kernel], rows: Sequence[Mapping[str, Any]],
           loose: Sequence[Mapping[str, Any]], md_path: str | Path, tex_path: str | Path,
           run_info: Mapping[str, Any] | None = None, label_suffix: str = "") -> None:
    """Write the suite's table as Markdown and LaTeX (byte-deterministic: no times, no hosts). A run that did
    not reach every kernel (``run_info["partial"]``) says which kernels are missing and why."""
    from lethe.render.tables import render_table

    recs = build_records(suite, kernels, rows, loose)
    info = dict(run_info or {})
    where = f"profile {info.get('profile', 'strict')}, device {info.get('device', '?')}, seed {info.get('seed', '?')}"
    missing = []
    if info.get("partial") and info.get("not_run"):
        missing = [f"Partial run: not run here: {', '.join(info['not_run'])} ({info.get('why_not_run', '')})."]
    if suite == "red_team":
        s = summarise(suite, kernels, rows, loose)
        caption = (f"Red team: {s['n_caught']}/{s['n_kernels']} deliberately broken kernels caught by every gate "
                   f"they target; {s['n_convincing']}/{s['n_kernels']} pass KernelBench's paper-era check.")
        notes = [
            f"Verifier run: {where}. 'Gates that fired': status fail or error. 'Extra gates': fired but not "
            "targeted. 'Caught': every targeted gate failed.",
            "KernelBench loose check: torch.allclose(atol=rtol=1e-2), five trials, fixed shapes, fp32 "
            "(lethe.kernelbench.check, paper-era commit 48642c5c), measured on the same machine.",
        ]
        render_table(red_team_table_rows(recs), RED_TEAM_COLUMNS, caption, "tab:red-team" + label_suffix, md_path,
                     tex_path, notes=notes + missing)
    else:
        n_pass = sum(r["verdict"] == "pass" for r in recs)
        caption = (f"Positive control: {n_pass}/{len(recs)} independently verified kernels pass every "
                   f"applicable gate.")
        notes = [f"Verifier run: {where}. na = gate not applicable (e.g. CMP-02 on a forward-only kernel, "
                 "RES-02 on a kernel with no compiled artifact on this device).",
                 "Each kernel is first checked against its own hand-derived float64 formula "
                 "(tests/redteam/test_positive_control.py)."]
        table = [{k: r[k] for k in ["kernel", "language", *GATE_IDS, "verdict"]} for r in recs]
        render_table(table, POSITIVE_COLUMNS, caption, "tab:positive-control" + label_suffix, md_path, tex_path,
                     notes=notes + missing)
