"""Tables of the Mamba arm: the benchmark against mamba-ssm (our H200 result beside the authors' B200 records, as
published) and the positive control C1-C7 per profile and device (beside the authors' positive_control.json).
Called by workflow/scripts/mamba_render.py; rows come only from committed files."""

from __future__ import annotations

import json
from pathlib import Path

from lethe.render.tables import render_table

from .bench import GOALS, OFFICIAL, OPS, SHAPE_KEYS

# the chunk-parallel launch of ours timed beside the default (serial) one (for C6 its exact_norm evaluation, as the
# default side's)
CP_SIDE = "ours_triton_chunk_parallel"

# the competitor each authors' record names, per op (their impl keys)
PUBLISHED_OFFICIAL = {"C1": "official_cuda", "C2": "official_cuda_bwd", "C5": "composed_official",
                      "C6": "official_composed_bwd"}


def _shape_text(op: str, shape: dict) -> str:
    return "x".join(str(shape[k]) for k in SHAPE_KEYS[OPS[op]["family"]])


def bench_rows(result_runs, published: Path) -> list[dict]:
    """One row per (op, shape, dtype) of our current result (``lethe.results.load_runs`` output, or None when no
    H200 run is committed) and of the authors' records for the ops with a competitor, sorted."""
    rows: dict[tuple, dict] = {}
    blank = lambda op, s, dt: {"op": op, "shape": _shape_text(op, s), "dtype": dt, "ours_ms": "",  # noqa: E731
                               "cp_ms": "", "official_ms": "", "speedup": "", "cp_speedup": "", "goal": "",
                               "b200_speedup": "", "check": ""}
    for op, key in PUBLISHED_OFFICIAL.items():
        doc = json.loads((Path(published) / OPS[op]["record"]).read_text())
        for r in doc["runs"]:
            s = {k: int(r["shape"][k]) for k in SHAPE_KEYS[OPS[op]["family"]]}
            k = (op, _shape_text(op, s), r["dtype"])
            row = rows.setdefault(k, blank(op, s, r["dtype"]))
            sp = r.get("speedups_vs_ours", {}).get(key)
            row["b200_speedup"] = f"{sp:.2f}" if sp is not None else ""
    for _, res, _ in result_runs or []:
        for r in res["rows"]:
            if "impls" not in r or r["op"] not in OFFICIAL:
                continue
            k = (r["op"], _shape_text(r["op"], r["shape"]), r["dtype"])
            row = rows.setdefault(k, blank(r["op"], r["shape"], r["dtype"]))
            # a later run fills what it measured and keeps what an earlier run measured that it did not
            for key, side in (("ours_ms", "ours_triton"), ("cp_ms", CP_SIDE),
                              ("official_ms", OFFICIAL[r["op"]])):
                t = r["impls"].get(side, {}).get("median_ms")
                if t is not None:
                    row[key] = f"{t:.3f}"
                    row[f"_{key}"] = t
            row["check"] = "pass" if r["check"]["pass"] and row["check"] != "FAIL" else "FAIL"
            row["_model"] = bool(r.get("model_shape", "goal" in r))
    for row in rows.values():
        off = row.pop("_official_ms", None)
        best = []
        for key, sp in (("_ours_ms", "speedup"), ("_cp_ms", "cp_speedup")):
            t = row.pop(key, None)
            if off is not None and t is not None:
                row[sp] = f"{off / t:.2f}"
                best.append(off / t)
        if row.pop("_model", False) and best:
            goal = GOALS[OPS[row["op"]]["direction"]]
            row["goal"] = ("met" if max(best) >= goal else "unmet") + f" (>= {goal:.2f})"
    return [rows[k] for k in sorted(rows, key=lambda t: (t[0], t[2], [int(v) for v in t[1].split("x")]))]


def bench_table(result_runs, published: Path, md: Path, tex: Path) -> None:
    rows = bench_rows(result_runs, published)
    ran = bool(result_runs)
    notes = ["speedup = official time / ours (above 1: ours faster), for each launch form of ours: serial (the "
             "chooser's default, one program per sequence and channel block) and chunk-parallel (scan_mode="
             "\"chunk_parallel\"); goals at the model shapes (B 8, L 2048, d_model 4096): forward >= 1.0x, backward "
             ">= 0.75x, met when the faster form meets it. A cell keeps the newest run that timed each side. check: every side against ours within the sum "
             "of their derived error bounds (lethe.kernels.mamba.bench.check) before timing.",
             "Official: C1/C2 mamba-ssm 2.3.2.post1's CUDA selective_scan_fn (forward; backward through its "
             "autograd from the forward's saved state); C5/C6 torch conv1d + SiLU + that scan + RMSNorm (no fused "
             "official block exists). B200 speedup: the authors' records (data/published/c1,c2,c5,c6_bench_b200"
             ".json), as published."]
    for name, res, prov in result_runs or []:
        if res.get("status") != "complete" and res.get("not_run"):
            notes.append(f"Run {name} ({prov.get('gpu', 'GPU')}, commit {prov.get('git_sha', 'unknown')}) is "
                         f"{res.get('status')}: {len(res['not_run'])} (op, shape, dtype) cells not run, "
                         f"{sorted({c['why'] for c in res['not_run']})[0]}; dashes in its columns are cells not run.")
    if not ran:
        notes.append("No H200 result is committed yet (experiments/mamba/bench.py, rule mamba_bench): the H200 "
                     "columns are empty.")
    render_table(rows, [("op", "Op"), ("shape", "Shape"), ("dtype", "Dtype"), ("ours_ms", "Ours serial (ms)"),
                        ("cp_ms", "Ours chunk-parallel (ms)"), ("official_ms", "Official (ms)"),
                        ("speedup", "Speedup serial"), ("cp_speedup", "Speedup chunk-parallel"), ("goal", "Goal"),
                        ("check", "Check"), ("b200_speedup", "B200 speedup (published)")],
                 caption="Mamba ops on the H200 against mamba-ssm, beside the authors' B200 records",
                 label="tab:mamba-bench", md_path=md, tex_path=tex, notes=notes)


def _verdict(failed: list, status: str) -> str:
    if status not in ("gated", "pass", None):
        return status
    return "pass" if not failed else "fail: " + " ".join(failed)


def positive_control_rows(results: dict[str, dict], published: dict) -> tuple[list[dict], list[str]]:
    """Rows C1-C7; one column per (device, profile) of our results (``results``: label -> document, either
    lethe.mamba.positive_control/1 or the older single-profile lethe.mamba.positive_control_cpu/1), and the
    authors' verdict."""
    cols: list[str] = []
    rows = {f"C{i}": {"kernel": f"C{i}"} for i in range(1, 8)}
    for label, doc in results.items():
        if doc.get("schema") == "lethe.mamba.positive_control_cpu/1":
            col = f"{label} {doc['profile']}"
            cols.append(col)
            for k, v in doc["kernels"].items():
                rows[k][col] = _verdict(v["failed"], v["status"])
            continue
        for prof in doc["profiles"]:
            col = f"{label} {prof}"
            cols.append(col)
            for k, v in doc["kernels"].items():
                rows[k][col] = _verdict(v["profiles"][prof]["failed"], v["profiles"][prof]["status"])
    # the authors' seventh kernel is named GDN
    for name, v in published["kernels"].items():
        k = "C7" if name == "GDN" else name
        failed = sorted(g for g, x in v["gates"].items() if x["status"] == "fail")
        rows[k]["published"] = _verdict(failed, v["status"])
    out = [{c: r.get(c, "") for c in ["kernel", *cols, "published"]} for r in rows.values()]
    return out, cols


def positive_control_table(results: dict[str, dict], published: dict, md: Path, tex: Path) -> None:
    rows, cols = positive_control_rows(results, published)
    render_table(rows, [("kernel", "Kernel"), *[(c, c) for c in cols], ("published", "Authors (B200)")],
                 caption="Positive control C1-C7 through the battery, per device and contract profile",
                 label="tab:mamba-positive-control", md_path=md, tex_path=tex,
                 notes=["C1-C6: this project's Mamba kernels (experiments/mamba/positive_control/cN); C7: the GDN "
                        "pair data/positive_control/pc_gdn_chunked. Empty: not run on that device/profile. "
                        "Authors: data/published/positive_control.json as published (C7 is their 'GDN')."])
