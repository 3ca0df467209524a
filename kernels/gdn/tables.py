"""Paper tables of the GDN ladder and of the family training, built from the committed results/gdn/*.json.

Pure functions from the JSON payloads to rows, then :func:`lethe.render.tables.render_table` for the
Markdown / LaTeX pair; nothing machine- or time-dependent reaches the output.
"""

from __future__ import annotations

from lethe.render.tables import Column, render_table

_E = "{:.2e}"


def _arm(r: dict) -> str:
    if r["rung"] == "tile":
        return f"T tile, d_k={r.get('K')}, d_v={r.get('V')}, chunk {r.get('chunk')}"
    parts = [r.get("member", "gdn") if r["rung"] in ("e2e", "fla") else "gdn", r.get("dtype", "")]
    parts.append(f"d_k={r.get('K')}, d_v={r.get('V')}, T={r.get('T')}")
    return ", ".join(p for p in parts if p)


def ladder_rows(ladder: dict, fla: dict | None = None) -> list[dict]:
    """One row per arm of every rung, in ladder order (tile, stage, end to end, fla)."""
    order = {"tile": 0, "stage": 1, "e2e": 2}
    rows = []
    for r in sorted(ladder["rows"], key=lambda r: order.get(r["rung"], 3)):
        if r["rung"] == "fla":
            continue
        status = r.get("status")
        rows.append({
            "rung": {"tile": "tile spec-pin", "stage": "per stage", "e2e": "end to end"}[r["rung"]],
            "arm": _arm(r),
            "worst_tensor": r.get("worst_tensor", "T" if r["rung"] == "tile" else None),
            "worst": r.get("worst_rel_err"),
            "pin": r.get("pin"),
            "verdict": "error" if status == "error" else (
                ("pass" if r.get("pass") else "FAIL") if "pass" in r else "reported"),
        })
    for r in (fla or {}).get("rows", []):
        errs = r.get("errors") or {}
        rows.append({
            "rung": "vs fla 0.6.0" if r.get("fla_version") else "vs fla",
            "arm": _arm({**r, "rung": "fla"}) if "member" in r else "fla",
            "worst_tensor": max(errs, key=errs.get) if errs else None,
            "worst": r.get("worst_rel_err"),
            "pin": None,
            "verdict": r.get("status", "reported") if r.get("status") != "ok" else "reported",
        })
    return rows


LADDER_COLUMNS = [
    Column("rung", "Rung", align="l"),
    Column("arm", "Arm", align="l"),
    Column("worst_tensor", "Worst tensor", align="l"),
    Column("worst", "Worst rel. err.", _E),
    Column("pin", "Pin", _E),
    Column("verdict", "Verdict", align="l"),
]


def training_rows(train: dict) -> list[dict]:
    order = ("la", "gla", "ssd", "kda", "gdn")
    names = {"la": "LA", "gla": "GLA", "ssd": "SSD (Mamba-2)", "kda": "KDA", "gdn": "GDN"}
    rows = []
    for m in sorted(train["members"], key=lambda m: order.index(m) if m in order else 99):
        r = train["members"][m]
        rows.append({
            "member": names.get(m, m),
            "loss_first": r["first_window_loss_fast"],
            "loss_last": r["last_window_loss_fast"],
            "loss_last_ref": r["last_window_loss_ref"],
            "acc_last": r["last_window_acc_fast"],
            "acc_last_ref": r["last_window_acc_ref"],
            "dev": r["max_window_curve_dev_rel"],
            "nonfinite": r["nonfinite_fast"] + r["nonfinite_ref"],
            "verdict": "pass" if r["pass"] else "FAIL",
        })
    return rows


TRAINING_COLUMNS = [
    Column("member", "Member", align="l"),
    Column("loss_first", "Loss, first window", "{:.3f}"),
    Column("loss_last", "Loss, last window", "{:.3f}"),
    Column("loss_last_ref", "Loss, last (fp32 ref.)", "{:.3f}"),
    Column("acc_last", "Recall acc., last", "{:.1%}"),
    Column("acc_last_ref", "Recall acc., last (fp32 ref.)", "{:.1%}"),
    Column("dev", "Max curve dev. (rel.)", _E),
    Column("nonfinite", "Non-finite steps", "{:d}"),
    Column("verdict", "Verdict", align="l"),
]


def render_ladder(ladder: dict, fla: dict | None, md_path, tex_path):
    s = ladder["summary"]
    pin = next((r["pin"] for r in ladder["rows"] if r["rung"] == "e2e" and r.get("pin")), 5e-3)
    notes = [
        "Relative error = max|x - ref| / max|ref| per tensor; the worst tensor of each arm is shown.",
        "Per-stage arms compare every Triton intermediate with the float64 chunked reference on the same rounded "
        "inputs; end-to-end arms compare output and all gradients with the float64 oracle (recurrent loop).",
        f"End to end: {s['e2e_pass']} of {s['e2e_arms']} arms within the {pin:.0e} "
        "pin; the paper reports 3.3e-3 end to end and one 5.21e-3 arm at d_v = 128 against the same pin.",
    ]
    return render_table(ladder_rows(ladder, fla), LADDER_COLUMNS,
                        "GDN-family verification ladder on the H200 (Triton chunked forward and backward).",
                        "tab:gdn-ladder", md_path, tex_path, notes)


def render_training(train: dict, md_path, tex_path):
    c = train["summary"]["config"]
    notes = [
        f"Synthetic multi-query associative recall ({c['n_pairs']} pairs, {c['n_queries']} queries, "
        f"{c['n_keys']} keys), one mixer layer, {c['steps']} steps, batch {c['batch']}, seed {c['seed']}.",
        f"Fast path: Triton chunked backward with {c['fast_dtype']} recurrence inputs; reference: the PyTorch "
        f"chunked path in float32, same initialisation and batches. Windows of {c['window']} steps; the curve "
        f"matches when window means differ by at most {c['curve_tol']:.0%} of the first reference window.",
    ]
    return render_table(training_rows(train), TRAINING_COLUMNS,
                        "Training every family member through one chunked backward (H200).",
                        "tab:gdn-training", md_path, tex_path, notes)
