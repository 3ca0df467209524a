"""Render the committed mamba#904 AOT result (results/aot/mamba904.json) as Markdown and LaTeX tables.

Byte-deterministic: the output depends only on the JSON (rows sorted, fixed formats, no timestamps).
"""

from __future__ import annotations

from typing import Any

HEADLINE = "compiled, not executed (no B200 here)"


def _ver(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split(".")[:3])


def _rows(result: dict[str, Any], target: str, variant: str = "module_training") -> list[dict[str, Any]]:
    rows = [r for r in result["rows"]
            if r["target"] == target and r["variant"] == variant and r["maxnreg"] is None]
    return sorted(rows, key=lambda r: (_ver(r["triton"]), r["num_stages"], r["num_warps"]))


def _int(value: Any) -> str:
    return "n/a" if value is None else f"{int(value):,}"


def _trapped(row: dict[str, Any]) -> bool:
    # A kernel whose TMEM allocation failed compiles to a trap; its register and spill figures describe the trap.
    return any("trap" in n for n in row.get("notes", []))


def _regs(row: dict[str, Any]) -> str:
    return "trap" if _trapped(row) else _int(row["registers"])


def _spill(row: dict[str, Any]) -> str:
    return "trap" if _trapped(row) else _int(row["spill_bytes"])


def _mma(row: dict[str, Any], target: str) -> str:
    mma = row.get("mma", {})
    if target == "sm_100a":
        return str(mma.get("ttgir_tc_gen5_mma", 0))
    return str(mma.get("ttgir_warp_group_dot", 0))


def _fits(row: dict[str, Any]) -> str:
    if row.get("error"):
        return "compile error"
    return "yes" if not row["violations"] else "no: " + "; ".join(v.split(" on ")[0] for v in row["violations"])


def table_rows(result: dict[str, Any], target: str) -> list[list[str]]:
    """One row per (Triton release, num_stages, num_warps), autotune maxnreg unset."""
    out = []
    for r in _rows(result, target):
        cells = [r["triton"], str(r["num_stages"]), str(r["num_warps"])]
        if target == "sm_100a":
            cells.append(_int(r["tmem_columns"]))
        cells += [_int(r["shared_bytes"]), _regs(r), _spill(r), _mma(r, target), _fits(r)]
        out.append(cells)
    return out


def _header(target: str) -> list[str]:
    mma = "tcgen05 MMA ops (TTGIR)" if target == "sm_100a" else "wgmma ops (TTGIR)"
    cols = ["Triton", "stages", "warps"]
    if target == "sm_100a":
        cols.append("TMEM cols")
    return cols + ["shared B", "regs", "spill B/thread", mma, f"fits {target}"]


def render_markdown(result: dict[str, Any]) -> str:
    src = result["source"]
    lines = [
        f"# mamba#904 reproduced ahead of time: `{result['kernel']}` — {HEADLINE}",
        "",
        f"Kernel source: {src['project']} {src['version']} sdist (sha256 `{src['sha256']}`). Launch as the "
        "Mamba3 module's training step issues it; every autotune config (maxnreg unset shown) compiled on a CPU "
        "host for each target. Limits: 512 TMEM columns (sm_100a), 232,448 B shared memory per block, "
        "255 registers per thread. \"trap\": Triton's TMEM allocation failed and the compiled body is a trap, "
        "which the loader would refuse (OutOfResources) and the autotuner would drop.",
        "",
    ]
    for target in result["targets"]:
        header = _header(target)
        lines += [f"## {target}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(row) + " |" for row in table_rows(result, target)]
        lines.append("")
    lines += ["## Statements checked", ""]
    for claim in result["claims"]:
        mark = "holds" if claim["holds"] else "DOES NOT HOLD"
        lines.append(f"- {claim['claim']}: **{mark}** (observed {claim['observed']})")
    lines.append("")
    return "\n".join(lines)


def _tex(text: str) -> str:
    for a, b in (("\\", r"\textbackslash{}"), ("_", r"\_"), ("#", r"\#"), ("%", r"\%"), ("&", r"\&"),
                 (">", r"$>$"), ("<", r"$<$")):
        text = text.replace(a, b)
    return text


def render_latex(result: dict[str, Any]) -> str:
    out = []
    for target in result["targets"]:
        header = _header(target)
        out += [
            r"\begin{table}[t]",
            r"\centering\small",
            r"\caption{" + _tex(f"mamba#904 ahead of time: {result['kernel']} on {target}, "
                                f"{result['source']['project']} {result['source']['version']}; {HEADLINE}.")
            + "}",
            r"\label{tab:aot-mamba904-" + target.replace("_", "") + "}",
            r"\begin{tabular}{" + "l" + "r" * (len(header) - 2) + "l}",
            r"\toprule",
            " & ".join(_tex(h) for h in header) + r" \\",
            r"\midrule",
        ]
        out += [" & ".join(_tex(c) for c in row) + r" \\" for row in table_rows(result, target)]
        out += [r"\bottomrule", r"\end{tabular}", r"\end{table}", ""]
    return "\n".join(out)
