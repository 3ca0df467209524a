"""Render an aggregates.json (published or our own audit) as a Markdown and a LaTeX table.

Rendering reads only the committed JSON and writes byte-deterministic text: fixed row order, fixed number
formats, no timestamps, so a re-render after ``git clone`` is byte-identical.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

FUNNEL_ROWS = (
    ("rows", "Rows in the audited operator classes"),
    ("accepted", "Accepted by the corpus (final_speedup > 0)"),
    ("has_verdict", "Candidate extracted and verdict produced"),
    ("reference_executable", "Reference executable"),
    ("not_toolchain_artifact", "Not a toolchain artifact (denominator)"),
)
CHANNEL_LABELS = (
    ("exc01", "EXC-01 fail"),
    ("ord02", "ORD-02 fail"),
    ("aliasing", "Output aliasing"),
    ("crash", "CUDA crash during gating"),
    ("pre_gate", "Failure to run (not an artifact)"),
    ("exc02", "EXC-02 fail (held out of the floor)"),
)


def _frac(block: Mapping[str, Any]) -> str:
    """Percent from the exact counts: formatting an already-rounded rate would round twice (0.4375 -> 43.8%,
    where 1,154/2,638 is 43.7%)."""
    n = block["denominator"]
    return "n/a" if not n else f"{100 * block['kernels'] / n:.1f}%"


def _int(n: int) -> str:
    return f"{n:,}"


def _sections(agg: Mapping[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    f = agg["funnel"]
    labels = dict(FUNNEL_ROWS)
    if agg.get("acceptance_label"):  # a corpus whose acceptance is another judge's verdict, not a speedup
        labels["accepted"] = agg["acceptance_label"]
    funnel = [[labels[key], _int(f[key])] for key, _ in FUNNEL_ROWS
              if key != "has_verdict" or f["dropped"].get("no_verdict")]
    for reason, n in f["dropped"].items():
        if reason == "no_verdict" and not n:
            continue  # our pipeline's extra stage; absent from the paper's funnel
        funnel.append([f"dropped: {reason.replace('_', ' ')}", _int(n)])
    headline = [
        [label, _int(agg[key]["kernels"]), _int(agg[key]["denominator"]), _frac(agg[key])]
        for key, label in (("floor", "Tolerance-free floor"), ("floor_with_exc02", "Floor with EXC-02"),
                           ("any_violation", "Any violation"))
    ]
    chans = [[label, _int(agg["per_channel"].get(key, 0))] for key, label in CHANNEL_LABELS]
    total_k, total_n = agg["floor"]["kernels"], agg["floor"]["denominator"]
    classes = [
        [cls, _int(v["kernels"]), _frac({"kernels": v["findings"], "denominator": v["kernels"]}),
         _frac({"kernels": total_k - v["findings"], "denominator": total_n - v["kernels"]})]
        for cls, v in sorted(agg["class_sensitivity"].items())
    ]
    if agg.get("all_audited"):
        headline += [[f"{label}, every audited kernel", _int(agg["all_audited"][key]["kernels"]),
                      _int(agg["all_audited"][key]["denominator"]), _frac(agg["all_audited"][key])]
                     for key, label in (("floor", "Tolerance-free floor"), ("any_violation", "Any violation"))]
    profiles = [[p, _frac(v["floor"]), _frac(v["floor_with_exc02"]), _frac(v["any_violation"]),
                 _int(v["floor"]["denominator"])] for p, v in sorted(agg.get("by_profile", {}).items())]
    return [
        ("Denominator funnel", ["Stage", "Kernels"], funnel),
        ("Headline rates", ["Figure", "Kernels", "Denominator", "Rate"], headline),
        *([("Per contract profile (one candidate run, graded under each)",
            ["Profile", "Floor", "Floor with EXC-02", "Any violation", "Denominator"], profiles)]
          if len(profiles) > 1 else []),
        ("Floor channels (a kernel may carry several)", ["Channel", "Kernels"], chans),
        ("Per operator class", ["Class", "Kernels", "Own floor", "Corpus floor without class"], classes),
    ]


def render_markdown(agg: Mapping[str, Any], title: str, note: str) -> str:
    """A Markdown document: title, provenance note, then one table per section."""
    lines = [f"# {title}", "", note, ""]
    if agg.get("verifier"):
        lines[-1:-1] = ["", f"Verifier: {agg['verifier']}."]
    for heading, header, rows in _sections(agg):
        lines += [f"## {heading}", "", "| " + " | ".join(header) + " |",
                  "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|"]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        lines.append("")
    return "\n".join(lines)


def _tex_escape(s: str) -> str:
    for a, b in (("\\", r"\textbackslash{}"), ("%", r"\%"), ("_", r"\_"), ("&", r"\&"), ("#", r"\#"),
                 (">", r"$>$")):
        s = s.replace(a, b)
    return s


def render_latex(agg: Mapping[str, Any], caption: str, label: str) -> str:
    """A booktabs ``table`` with one block per section, separated by midrules."""
    out = [r"\begin{table}[t]", r"\centering", r"\small", r"\begin{tabular}{lrrr}", r"\toprule"]
    for i, (heading, header, rows) in enumerate(_sections(agg)):
        if i:
            out.append(r"\midrule")
        pad = 4 - len(header)
        out.append(r"\multicolumn{4}{l}{\textbf{" + _tex_escape(heading) + r"}} \\")
        out.append(" & ".join(_tex_escape(h) for h in header) + " & " * pad + r" \\")
        out.append(r"\midrule")
        for r in rows:
            out.append(" & ".join(_tex_escape(c) for c in r) + " & " * pad + r" \\")
    if agg.get("verifier"):
        caption = f"{caption} Verifier: {agg['verifier']}."
    out += [r"\bottomrule", r"\end{tabular}", r"\caption{" + _tex_escape(caption) + "}",
            r"\label{" + label + "}", r"\end{table}", ""]
    return "\n".join(out)
