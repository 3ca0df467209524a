"""Tables of C1's launch tuning: this project's H200 launch search (experiments/mamba/launch_search.py) and, beside
it, the authors' published records of the same study (scan-mode boundary, the launch-knob cost model, the LLM-policy
runs), rendered as theirs.

The policy arithmetic is :func:`lethe.kernels.mamba.tuning.evaluate_policies`; this module only lays it out.
"""

from __future__ import annotations

import math
import os
from collections import defaultdict
from typing import Mapping, Sequence

from lethe.kernels.mamba.tuning import POLICIES, evaluate_policies, launch_space
from lethe.render.tables import render_table

PathLike = str | os.PathLike[str]
X = "{:.3f}×"


def _gm(xs):
    xs = list(xs)
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def launch_search_rows(doc: Mapping, k: int = 3) -> tuple[list[dict], dict]:
    """Table rows (one per shape, then the geometric mean) and the policy evaluation of one launch-search result."""
    res = evaluate_policies(doc["rows"], k=k, sm_count=doc.get("sm_count") or 132)
    rows = []
    for e in res["per_shape"]:
        row = {"shape": f"{e['batch']} x {e['seq_len']} x {e['d_model']} x {e['n_state']}",
               "default_ms": e["default_ms"], "oracle_config": e["oracle"]["config"]}
        for p in POLICIES[1:]:
            row[p] = e[p]["speedup"]
        row["knn_config"] = e["knn"]["config"] + (" (fallback)" if e["knn"]["fallback"] else "")
        rows.append(row)
    rows.append({"shape": "geometric mean", "default_ms": None, "oracle_config": None,
                 **{p: res["geomean"][p] for p in POLICIES[1:]}, "knn_config": None})
    return rows, res


def render_launch_search(doc: Mapping, provenance: Mapping, md: PathLike, tex: PathLike, k: int = 3) -> None:
    """paper/tables/mamba_launch_search: speed-up over the default per shape, per policy."""
    rows, res = launch_search_rows(doc, k)
    dropped = defaultdict(int)
    for r in doc["rows"]:
        if r["status"] != "ok":
            dropped[r["status"]] += 1
    notes = [
        f"Measured by this project on {doc['device']} (torch {provenance.get('torch')}, Triton "
        f"{provenance.get('triton')}), float32, {len(doc['space'])} launch configurations x {len(doc['grid'])} shapes"
        + ("" if doc["complete"] else f"; the search stopped early ({doc['stopped']})") + ".",
        "Speed-up = default time / policy time at each shape (CUDA events, median). Every configuration was "
        "checked against the default at the shape and against the float64 oracle at a small shape before timing"
        + (f"; dropped rows: {', '.join(f'{v} {s}' for s, v in sorted(dropped.items()))}" if dropped else "") + ".",
        f"selector: the scan_mode='auto' rule at the chooser's other defaults (its mode matches the fastest "
        f"configuration's at {res['selector_mode_agrees']} of {res['shapes']} shapes); static: the single best "
        f"configuration, kNN: the {k}-nearest-shape cost model, both fitted leave-one-shape-out; oracle: the fastest "
        "configuration measured at the shape.",
    ]
    cols = [("shape", "batch x L x d_model x N"), ("default_ms", "default ms", "{:.3f}"),
            ("selector", "selector", X), ("static", "static", X), ("knn", "kNN", X), ("oracle", "oracle", X),
            ("oracle_config", "oracle config"), ("knn_config", "kNN config")]
    render_table(rows, cols, "C1 launch search on the H200: speed-up over the default launch, per policy",
                 "tab:mamba-launch-search", md, tex, notes)


# ------------------------------------------------------------------------------------------ published records
def boundary_summary(boundary: Sequence[Mapping]) -> list[dict]:
    """Per op of the authors' scan-mode boundary records: shapes measured, shapes where chunk_parallel won, and the
    geometric mean over shapes of the shape-gated choice (the best chunk-parallel launch where it beats the
    default, the default elsewhere: max(1, best chunk-parallel speed-up))."""
    by = defaultdict(list)
    for r in boundary:
        by[r["op"]].append(r)
    by["all ops"] = list(boundary)
    out = []
    for op, rs in by.items():
        measured = [r for r in rs if "best_chunk_parallel" in r]
        gated = [max(1.0, r["best_chunk_parallel"]["speedup"]) for r in measured]
        out.append({"op": op, "shapes": len(measured), "skipped": len(rs) - len(measured),
                    "cp_wins": sum(r["winner"] == "chunk_parallel" for r in measured),
                    "gated": _gm(gated), "max_cp": max(r["best_chunk_parallel"]["speedup"] for r in measured)})
    return out


def render_published_scan_mode(boundary: Sequence[Mapping], md: PathLike, tex: PathLike) -> None:
    """paper/tables/mamba_scan_mode_published: the authors' serial vs chunk-parallel boundary, summarised."""
    cols = [("op", "op"), ("shapes", "shapes"), ("skipped", "skipped"), ("cp_wins", "chunk_parallel wins"),
            ("gated", "shape-gated geomean", X), ("max_cp", "best chunk_parallel", X)]
    notes = ["The paper authors' published records (data/published/scan_mode_boundary.json, measured on a B200), "
             "not this project's measurement. Speed-ups over their serial default; batch 1, 2, 8 x sequence 512 to "
             "16384 x width 256 to 4096; skipped: shapes they did not run (memory cap).",
             "shape-gated geomean: the best chunk-parallel launch where it beats the default, the default elsewhere."]
    render_table(boundary_summary(boundary), cols, "Scan-mode boundary, the authors' B200 records",
                 "tab:mamba-scan-mode-published", md, tex, notes)


def render_published_launch(cost_model: Sequence[Mapping], md: PathLike, tex: PathLike) -> None:
    """paper/tables/mamba_launch_published: the authors' launch-knob cost-model comparison (e2_cost_model.json)."""
    rows = [{"op": r["op"], "shapes": r["shapes"], **{p: r[p] for p in ("default", "static", "knn", "oracle")}}
            for r in cost_model]
    cols = [("op", "op"), ("shapes", "shapes"), ("default", "default", X), ("static", "static", X),
            ("knn", "kNN", X), ("oracle", "oracle", X)]
    notes = ["The paper authors' published records (data/published/e2_cost_model.json, B200; knobs block_d / "
             "block_p, chunk_k, num_warps, num_stages from e2_grid_sweep.jsonl), not this project's measurement; "
             "geometric-mean speed-up over their default launch.",
             f"Their ops are C5 and C3; this project's search (tab:mamba-launch-search) is C1's "
             f"{len(launch_space())}-point space."]
    render_table(rows, cols, "Launch-knob search, the authors' B200 records", "tab:mamba-launch-published", md, tex,
                 notes)


def rl_rows(config_rl: Mapping, serial_seed: Mapping, edit_rl: Mapping) -> list[dict]:
    """One row per level of the authors' LLM-policy runs: GRPO config search, its serial-seeded rerun, edit-RL."""
    rows = []
    for lv in config_rl["per_level"]:
        rows.append({"run": "config-RL (GRPO)", "op": lv["op"], "shape": f"{lv['batch']} x {lv['seq_len']} x {lv['width']}",
                     "learned": lv["late_mode"], "best": lv["best_speedup"]})
    for run in serial_seed["runs"]:
        for lv in run["levels"]:
            rows.append({"run": f"config-RL, serial-seeded ({run['name']})", "op": lv["op"],
                         "shape": f"{lv['batch']} x {lv['seq_len']} x {lv['width']}", "learned": lv["learned_mode"],
                         "best": lv["best_speedup"]})
    lv = edit_rl["level"]
    rows.append({"run": "edit-RL (source edits)", "op": lv["op"], "shape": f"{lv['batch']} x {lv['seq_len']} x {lv['width']}",
                 "learned": f"{edit_rl['speedup']['rows_benched']} correct edits benched", "best": edit_rl["speedup"]["max_speedup"]})
    return rows


def render_published_rl(config_rl: Mapping, serial_seed: Mapping, edit_rl: Mapping, md: PathLike,
                        tex: PathLike) -> None:
    """paper/tables/mamba_rl_published: the LLM-policy records, which this project cannot rerun."""
    cols = [("run", "run"), ("op", "op"), ("shape", "batch x L x width"), ("learned", "policy's choice"),
            ("best", "best speed-up", "{:.3f}×")]
    notes = ["The paper authors' published records (data/published/scan_mode_config_rl.json, e2_serial_seed.json, "
             "edit_rl_negative.json; B200), not this project's measurement: the policy is a 32B code model "
             "(Qwen2.5-Coder-32B-Instruct) whose weights this machine cannot fetch, so nothing here is rerun.",
             "Speed-ups over the authors' shipped default; edit-RL's is over their autotuned launch."]
    render_table(rl_rows(config_rl, serial_seed, edit_rl), cols, "LLM-policy launch and edit search, the authors' "
                 "B200 records", "tab:mamba-rl-published", md, tex, notes)
