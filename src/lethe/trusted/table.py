"""The false-fail table of the trusted corpus, and the list of every failure with its explanation.

Every member of the trusted corpus is correct code, so every gate failure on it is either a real property of
that code that the contract rightly rejects (torch's own atomics are not run-to-run deterministic, say), or a
false fail of the verifier. ``data/trusted/explanations.yaml`` says which, per (kernel pattern, gate): each
entry (kernel and gate are fnmatch patterns, or lists of them: one entry per cause, whichever kernels and gates
share it) has ``class`` (``real`` or ``false_fail``), a short ``cause`` and a one-line ``why``, and optionally
``profiles`` and ``devices`` (``cpu``, ``cuda``: the row's ``device``, so a
failure seen only on the GPU column is explained apart from the CPU one; every profile and device when absent).
A failure that no entry explains is shown as ``unexplained`` and counted as a false fail until someone explains
it. The failure list holds both columns (CPU rows and, when given, the GPU rows), one record per (kernel, gate,
device). The GPU column is named by the card its provenance records (``gpu_label``).

Per gate and profile: ``applicable`` = gated rows whose gate graded (pass, fail or error; ``na`` is not
applicable), ``fail`` = fail or error (an ``error`` is the verifier raising: never the kernel's fault), and
the false-fail rate = (fails not classed ``real``) / applicable.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lethe.provenance import REPO_ROOT
from lethe.render.tables import render_table
from lethe.trusted.run import budget_exclusion

GATES = ("CMP-01", "CMP-02", "CMP-03", "ORD-01", "ORD-02", "ORD-03", "PRC-01", "PRC-02", "EXC-01", "EXC-02",
         "RES-01", "RES-02")
PROFILES = ("strict", "cuda-default", "fast-math")
FIRED = ("fail", "error")
EXPLANATIONS = REPO_ROOT / "data" / "trusted" / "explanations.yaml"
CLASS_LABEL = {"real": "real property of that code", "false_fail": "verifier false fail (open)",
               "unexplained": "unexplained (counted as a false fail)"}
NOT_RUN_GPU = "not run: no GPU this session"
DEVICES = ("cpu", "cuda")


def gpu_label(provenance: Mapping[str, Any]) -> str:
    """The GPU column's name: the card's model from its provenance ("NVIDIA H100 80GB HBM3" -> "H100"), else
    the recorded name, else "GPU"."""
    import re

    name = str(provenance.get("gpu") or "")
    m = re.search(r"\b([A-Z]{1,2}\d{2,4})\b", name)
    return m.group(1) if m else (name or "GPU")


def load_explanations(path: str | Path = EXPLANATIONS) -> list[dict[str, Any]]:
    """The explanation entries, each checked for its keys and class."""
    import yaml

    doc = yaml.safe_load(Path(path).read_text()) or {}
    out = []
    for i, e in enumerate(doc.get("explanations", [])):
        missing = [k for k in ("kernel", "gate", "class", "cause", "why") if k not in e]
        if missing:
            raise ValueError(f"explanation {i} lacks {missing}")
        if e["class"] not in ("real", "false_fail"):
            raise ValueError(f"explanation {i}: class must be real or false_fail, got {e['class']!r}")
        bad = [d for d in e.get("devices") or () if d not in DEVICES]
        if bad:
            raise ValueError(f"explanation {i}: devices must be among {list(DEVICES)}, got {bad}")
        out.append(dict(e))
    return out


def _matches(name: str, patterns: str | Sequence[str]) -> bool:
    """``name`` matches the fnmatch pattern, or one of the list of them."""
    return any(fnmatch.fnmatchcase(name, p) for p in ([patterns] if isinstance(patterns, str) else patterns))


def explain(kernel_id: str, gate: str, profile: str, device: str,
            explanations: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """The first entry whose kernel and gate patterns (fnmatch, one or a list), profiles and devices (each: all
    when absent) match; ``device`` is the row's (``cpu`` for the CPU column, ``cuda`` for the GPU's)."""
    for e in explanations:
        if not _matches(gate, e["gate"]) or not _matches(kernel_id, e["kernel"]):
            continue
        if e.get("profiles") and profile not in e["profiles"]:
            continue
        if e.get("devices") and device not in e["devices"]:
            continue
        return {"class": e["class"], "cause": e["cause"], "why": e["why"]}
    return {"class": "unexplained", "cause": "", "why": ""}


def max_ratio(evidence: str) -> float | None:
    """The largest err/tol (``max_err_over_tol``, or the finite-difference ``max_err_over_limit``) anywhere in a
    gate's evidence; None when the evidence holds no ratio (byte comparisons, resource reports)."""
    try:
        doc = json.loads(evidence or "{}")
    except ValueError:
        return None
    best: list[float] = []

    def walk(v: Any, ok: bool | None = None) -> None:
        if isinstance(v, dict):
            for k, x in v.items():
                if k in ("max_err_over_tol",) and isinstance(x, (int, float)):
                    best.append(float(x))
                else:
                    walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(doc)
    return max(best) if best else None


def failing_probes(evidence: str) -> list[str]:
    """Probe ids whose status is fail in a gate's evidence."""
    try:
        probes = json.loads(evidence or "{}").get("probes") or {}
    except (ValueError, AttributeError):
        return []
    return sorted(p for p, v in probes.items() if isinstance(v, dict) and v.get("status") == "fail")


def _device(r: Mapping[str, Any]) -> str:
    return str(r.get("device") or "cpu")


def failures(rows: Sequence[Mapping[str, Any]], explanations: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One record per (kernel, gate, device) that failed under some profile, with the profiles it failed under,
    its largest err/tol, the failing probes and the explanation; plus one record per trusted kernel whose row
    never reached grading for a reason other than the budget (a crash or compile failure of correct code, a
    reference the verifier rejects). ``rows`` may hold both columns: the row's ``device`` keeps them apart."""
    by_key: dict[tuple[str, str, str], dict[str, Any]] = {}
    for r in rows:
        dev = _device(r)
        if r["status"] != "gated":
            # No verdict (the reference or the candidate outran the per-kernel budget): coverage counts it.
            if budget_exclusion(r):
                continue
            key = (r["id"], "row", dev)
            rec = by_key.setdefault(key, {"kernel": r["id"], "kind": r.get("op_class") or "", "gate": "row",
                                          "device": dev, "status": r["status"], "profiles": [], "ratio": None,
                                          "probes": "", **explain(r["id"], "row", r["profile"], dev, explanations),
                                          "detail": str(r.get("error", ""))[:160]})
            rec["profiles"].append(r["profile"])
            continue
        for g in GATES:
            v = r["gates"][g]
            if v["status"] not in FIRED:
                continue
            key = (r["id"], g, dev)
            ratio = max_ratio(v.get("evidence", ""))
            rec = by_key.setdefault(key, {"kernel": r["id"], "kind": r.get("op_class") or "", "gate": g,
                                          "device": dev, "status": v["status"], "profiles": [], "ratio": ratio,
                                          "probes": ", ".join(failing_probes(v.get("evidence", ""))),
                                          **explain(r["id"], g, r["profile"], dev, explanations),
                                          "detail": str(v.get("reason", ""))[:160]})
            rec["profiles"].append(r["profile"])
            if ratio is not None and (rec["ratio"] is None or ratio > rec["ratio"]):
                rec["ratio"] = ratio
    out = list(by_key.values())
    for rec in out:
        rec["profiles"] = ",".join(p for p in PROFILES if p in rec["profiles"])
    out.sort(key=lambda f: (f["gate"], f["kernel"], DEVICES.index(f["device"]) if f["device"] in DEVICES else 9))
    return out


def gate_counts(rows: Sequence[Mapping[str, Any]], explanations: Sequence[Mapping[str, Any]],
                profile: str) -> dict[str, dict[str, int]]:
    """Per gate under one profile: applicable, fail, real (explained as a property of the code), false."""
    out = {g: {"applicable": 0, "fail": 0, "real": 0, "false": 0} for g in GATES}
    for r in rows:
        if r["status"] != "gated" or r["profile"] != profile:
            continue
        for g in GATES:
            s = r["gates"][g]["status"]
            if s == "na":
                continue
            c = out[g]
            c["applicable"] += 1
            if s in FIRED:
                c["fail"] += 1
                if explain(r["id"], g, profile, _device(r), explanations)["class"] == "real":
                    c["real"] += 1
                else:
                    c["false"] += 1
    return out


def kernel_counts(rows: Sequence[Mapping[str, Any]], explanations: Sequence[Mapping[str, Any]], profile: str,
                  kind: str | None = None) -> dict[str, int]:
    """Per kernel under one profile: graded kernels, those with any failing gate, those whose every failure
    is a real property of the code, and the rest (a correct kernel the verifier rejects: a false verdict)."""
    c = {"applicable": 0, "fail": 0, "real": 0, "false": 0}
    for r in rows:
        if r["status"] != "gated" or r["profile"] != profile or (kind and r.get("op_class") != kind):
            continue
        c["applicable"] += 1
        fired = [g for g in GATES if r["gates"][g]["status"] in FIRED]
        if not fired:
            continue
        c["fail"] += 1
        if all(explain(r["id"], g, profile, _device(r), explanations)["class"] == "real" for g in fired):
            c["real"] += 1
        else:
            c["false"] += 1
    return c


def _rate(c: Mapping[str, int]) -> str:
    if not c["applicable"]:
        return "–"
    return f"{c['false'] / c['applicable']:.1%} ({c['false']}/{c['applicable']})"


def table_rows(rows: Sequence[Mapping[str, Any]], explanations: Sequence[Mapping[str, Any]],
               gpu_rows: Sequence[Mapping[str, Any]] | None = None) -> list[dict[str, Any]]:
    """One row per gate: the CPU counts under strict, the false-fail rate under every profile, and the
    GPU column's strict rate (or why it is missing)."""
    per = {p: gate_counts(rows, explanations, p) for p in PROFILES}
    gpu = gate_counts(gpu_rows, explanations, "strict") if gpu_rows else None
    out = []
    for g in GATES:
        s = per["strict"][g]
        out.append({"gate": g, "applicable": s["applicable"], "fail": s["fail"], "real": s["real"],
                    "false": s["false"], "rate_strict": _rate(s), "rate_cuda": _rate(per["cuda-default"][g]),
                    "rate_fast": _rate(per["fast-math"][g]),
                    "gpu": _rate(gpu[g]) if gpu is not None else NOT_RUN_GPU})
    for label, kind in (("any gate (kernels)", None), ("any gate (hand-written)", "hand")):
        k = {p: kernel_counts(rows, explanations, p, kind) for p in PROFILES}
        hk = kernel_counts(gpu_rows, explanations, "strict", kind) if gpu_rows else None
        s = k["strict"]
        out.append({"gate": label, "applicable": s["applicable"], "fail": s["fail"], "real": s["real"],
                    "false": s["false"], "rate_strict": _rate(s), "rate_cuda": _rate(k["cuda-default"]),
                    "rate_fast": _rate(k["fast-math"]), "gpu": _rate(hk) if hk is not None else NOT_RUN_GPU})
    return out


def coverage_note(summary: Mapping[str, Any]) -> str:
    """One sentence on what the rows cover (from the runner's summary.json)."""
    parts = []
    for kind, label in (("self", "KernelBench problems as their own code (ModelNew = Model)"),
                        ("hand", "hand-written kernels")):
        k = summary["by_kind"][kind]
        st = k["statuses"]
        gated = st.get("gated", 0)
        over = st.get("excluded_reference_over_time_budget", 0)
        big = st.get("excluded_reference_over_memory_budget", 0)
        slow = st.get("candidate_over_time_budget", 0)
        other = {s: n for s, n in st.items()
                 if s not in ("gated", "excluded_reference_over_time_budget", "candidate_over_time_budget",
                              "excluded_reference_over_memory_budget")}
        words = {"elements": "element count", "flops": "FLOPs", "untraceable": "unknown size (not traceable)"}
        reasons = ", ".join(f"{n} by {words.get(why, why)}" for why, n in k["excluded_static_reasons"].items())
        text = (f"{label}: {k['members']} members, {k['excluded_static']} excluded by the size budget"
                + (f" ({reasons})" if reasons else "")
                + f", {k['attempted']} attempted of {k['eligible']} eligible, {gated} graded")
        if over:
            text += f", {over} excluded at run time (float64 reference over the per-kernel time budget)"
        if big:
            text += f", {big} excluded at run time (float64 reference over the memory budget)"
        if slow:
            text += f", {slow} not graded (the candidate outran the per-kernel time budget)"
        if other:
            text += ", " + ", ".join(f"{n} {s}" for s, n in sorted(other.items()))
        if k["not_reached"]:
            text += f", {k['not_reached']} not reached before the run's wall budget"
        parts.append(text)
    return "; ".join(parts) + "."


def render(rows: Sequence[Mapping[str, Any]], summary: Mapping[str, Any], explanations: Sequence[Mapping[str, Any]],
           md: str | Path, tex: str | Path, failures_md: str | Path, failures_tex: str | Path,
           gpu_rows: Sequence[Mapping[str, Any]] | None = None, gpu_label: str = "GPU",
           gpu_machine: str | None = None) -> None:
    """Write the per-gate false-fail table and the failure list (Markdown + LaTeX each); ``gpu_label`` names the
    card of the GPU column (from its provenance), ``gpu_machine`` its summary's machine line."""
    run = summary.get("run", {})
    budget = summary.get("budget", {})
    notes = [coverage_note(summary),
             f"Size budget per problem: one float64 forward moves at most {budget.get('max_numel', 0):,} input and "
             f"output elements and costs at most {budget.get('max_flops', 0):.3g} matmul/convolution FLOPs "
             f"(torch's FLOP counter on the meta device); per-kernel time budget {run.get('budget_s', 0):.0f} s "
             f"for the float64 reference and again for the candidate; memory {run.get('ref_memory_mb', 0):,} MB "
             f"for the reference, {run.get('memory_mb', 0):,} MB for the candidate.",
             "applicable: gated rows whose gate graded (not na); fail includes verifier errors; real: failures "
             "explained as a property of that code (data/trusted/explanations.yaml); the false-fail rate counts "
             "every other failure, unexplained ones included. The any-gate rows count kernels: a kernel is a false "
             "fail when some failing gate is not explained as a real property of its code.",
             f"CPU: {summary.get('machine', 'this machine')}, profiles graded from one candidate run each."]
    if gpu_rows and gpu_machine:
        notes.append(f"{gpu_label}: {gpu_machine}; CUDA candidates with the float64 reference on the GPU.")
    render_table(table_rows(rows, explanations, gpu_rows),
                 [("gate", "gate"), ("applicable", "CPU applicable"), ("fail", "CPU fail"), ("real", "real"),
                  ("false", "false fail"), ("rate_strict", "CPU false-fail rate (strict)"),
                  ("rate_cuda", "cuda-default"), ("rate_fast", "fast-math"), ("gpu", f"{gpu_label} (strict)")],
                 "False fails of the verifier on the trusted corpus (correct kernels), per gate",
                 "tab:trusted-false-fail", md, tex, notes=notes)
    fails = failures(list(rows) + list(gpu_rows or []), explanations)
    recs = [{"kernel": f["kernel"], "gate": f["gate"], "device": f["device"], "profiles": f["profiles"],
             "ratio": f["ratio"], "probes": f["probes"] or f["status"],
             "class": CLASS_LABEL[f["class"]], "why": f["why"] or f["detail"]} for f in fails]
    render_table(recs, [("kernel", "kernel"), ("gate", "gate"), ("device", "device"), ("profiles", "profiles"),
                        ("ratio", "max err/tol", "{:.3g}"), ("probes", "failing probes"), ("class", "class"),
                        ("why", "explanation")],
                 "Every failure of a trusted kernel, with its explanation", "tab:trusted-failures",
                 failures_md, failures_tex,
                 notes=[f"device: cpu for the CPU column, cuda for the {gpu_label} column (each column's failures are "
                        "listed and explained apart); max err/tol: the largest ratio of error to tolerance in the "
                        "gate's evidence (– for byte or resource comparisons); row: the kernel never reached "
                        "grading."])


# ---------------------------------------------------------------- fix check: the same kernels before and after
def _failing_gates(rows: Sequence[Mapping[str, Any]], kernel: str) -> tuple[str, list[str]]:
    """(the kernel's outcome over its rows -- "gated", or the first non-gated status with "(budget)" when the
    budget excluded it --, the gates that failed under some profile, in GATES order)."""
    mine = [r for r in rows if r["id"] == kernel]
    if not mine:
        return "not run", []
    bad = [r for r in mine if r["status"] != "gated"]
    if bad:
        return bad[0]["status"] + (" (budget)" if budget_exclusion(bad[0]) else ""), []
    fired = {g for r in mine for g in GATES if r["gates"][g]["status"] in FIRED}
    return "gated", [g for g in GATES if g in fired]


def fix_check_rows(columns: Sequence[tuple[str, Sequence[Mapping[str, Any]], Sequence[Mapping[str, Any]]]],
                   explanations: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One record per (kernel, column) of a fix check: the gates that failed before (the committed corpus run)
    and after (the re-verification of the kernels a fixed defect explained), and what still explains each
    remaining failure. ``columns``: (column name, rows before, rows after); the kernels are those of the rows
    after."""
    out = []
    for name, before, after in columns:
        for kernel in sorted({r["id"] for r in after}):
            was, old = _failing_gates(before, kernel)
            now, new = _failing_gates(after, kernel)
            dev = next((_device(r) for r in after if r["id"] == kernel), "cpu")
            causes = sorted({explain(kernel, g, "strict", dev, explanations)["cause"] or "unexplained" for g in new})
            out.append({"kernel": kernel, "column": name, "before": ", ".join(old) or ("none" if was == "gated"
                                                                                      else was),
                        "after": ", ".join(new) or ("none" if now == "gated" else now),
                        "clean": now == "gated" and not new, "remaining": "; ".join(causes)})
    return out


def render_fix_check(columns, explanations, commits: Mapping[str, str], md: str | Path, tex: str | Path) -> None:
    """Write the fix-check table (Markdown + LaTeX). ``commits``: {"before": sha, "after": sha} and optionally
    "after_machine" (where the kernels were re-verified, in words)."""
    recs = fix_check_rows(columns, explanations)
    per = {}
    for r in recs:
        c = per.setdefault(r["column"], [0, 0])
        c[0] += 1
        c[1] += r["clean"]
    head = "; ".join(f"{k}: {v[1]} of {v[0]} clean" for k, v in per.items())
    render_table(recs, [("kernel", "kernel"), ("column", "column"), ("before", "failing gates before"),
                        ("after", "failing gates after"), ("remaining", "what explains what remains")],
                 f"Trusted kernels re-verified after verifier fixes ({head})", "tab:trusted-fix-check", md, tex,
                 notes=[f"before: the committed trusted-corpus rows (verifier commit {commits.get('before', '?')[:7]}); "
                        f"after: the same kernels re-verified at {commits.get('after', '?')[:7]} "
                        f"({commits.get('after_machine') or 'results/trusted/fix_check/'}); a gate counts when it "
                        "failed under any of the three "
                        "profiles. The remaining failures' causes are the entries of data/trusted/explanations.yaml "
                        "(written for the rows before: a cause listed for a failure that remains is still open). "
                        "(budget): the float64 reference exceeded the per-kernel time or memory budget."])
