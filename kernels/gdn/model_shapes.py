"""The model-shape table of the GDN family against fla 0.6.0: one row per shape of the grid models run (16 and 32
heads, B*H*T of 2**18 and 2**20 head-tokens, T from 2k to 32k, d_v 64 and 128, bf16), forward and forward+backward
times of both sides, their ratio, each side's error against float64 and ours as a share of the floor.

Input: the folder of ``experiments/gdn/fla_compare.py --parts bench --heads 16,32 --head-tokens 1048576,262144 ...``
(rule ``gdn_model_shapes``; ``rows.jsonl``, ``summary.json``, ``provenance.json``, one run or several added with
``--append`` / ``--resume``). Output: ``paper/tables/gdn_model_shapes.{md,tex}`` through
:func:`lethe.render.tables.render_table`, and ``paper/tables/gdn_model_shapes.json``: the same rows as numbers
plus, per member, the ranges the README's sentence quotes (through :mod:`lethe.render.docvalues`), so prose and
table come from one computation.

Every number is read from the per-measurement rows with :func:`lethe.kernels.gdn.fla_bench.collect` (the same
planned cells, reasons for what is missing and run bookkeeping as the fla timing table): a time is a ``bench``
row's median, a ratio two such medians divided, an error the cell's ``bench_check`` row (worst over o and every
input gradient against the float64 chunked reference on one head), a floor :func:`lethe.perf.roofline.roofline_ms`
of the cell's FLOP and byte counts (docs/gdn.md §2) at the ceilings its run measured.
"""

from __future__ import annotations

import json
from pathlib import Path

from lethe.render.tables import Column, render_table

from . import fla_bench as FB
from .bench import bench_batch

SCHEMA = "lethe.gdn.model_shapes_table/1"
MODES = ("fwd", "fwd+bwd")
MODE_KEYS = {"fwd": "fwd", "fwd+bwd": "fwd_bwd"}
MEMBER_NAMES = {"sgdn": "scalar-gate GDN", "gdn": "full GDN"}
IMPLS = ("fla", "ours")


def ours_backends(rows: list[dict]) -> list[str]:
    """The backends "ours" ran on, over every run in the folder (rows before the option: triton)."""
    got = []
    for r in rows:
        if r.get("kind") == "meta":
            b = (r.get("args") or {}).get("ours_backend", "triton")
            if b not in got:
                got.append(b)
    return got or ["triton"]


def short_points(summary: dict, rows: list[dict]) -> list[dict]:
    """Grid points whose B*H*T is not met (H*T above it, so B stays 1): H, T, the head-tokens asked for and run,
    and whether another point of the grid runs the same shape (the table then has one row for both)."""
    out = []
    for run in FB.runs_of(summary, rows):
        a = run["args"]
        heads, hts = a.get("bench_heads") or [a["heads"]], a.get("bench_head_tokens") or [a["head_tokens"]]
        for H in heads:
            for ht in hts:
                for T in a["bench_lengths"]:
                    B = bench_batch(ht, H, T)
                    if B * H * T != ht:
                        p = {"H": H, "T": T, "head_tokens": ht, "ran": B * H * T,
                             "shared": any(bench_batch(h, H, T) == B for h in hts if h != ht)}
                        if p not in out:
                            out.append(p)
    return out


def fla_tunings(rows: list[dict]) -> dict[tuple, dict]:
    """{(member, d_v, H): the shape fla was tuned at} as its timed rows record it (``fla_autotune.tuned_at``)."""
    out = {}
    for r in rows:
        if r.get("kind") == "bench" and r.get("impl") == "fla" and r.get("status") == "ok":
            at = (r.get("fla_autotune") or {}).get("tuned_at")
            if at:
                out[(r["member"], r["V"], r["H"])] = at
    return out


def _slice_err(check: dict | None, impl: str) -> float | None:
    """``impl``'s worst error against the float64 slice in a cell's check (None when the slice was not run)."""
    sl = (check or {}).get("vs_float64_slice") or {}
    e = sl.get(impl)
    return e["worst_rel_err"] if isinstance(e, dict) else None


def table_rows(summary: dict, rows: list[dict], reasons: FB.Reasons | None = None) -> list[dict]:
    """One row per planned shape (member as first given, d_v descending, H ascending, head-tokens descending,
    T ascending); every field a number or None plus its display string (``*_cell``)."""
    reasons = reasons if reasons is not None else FB.Reasons()
    runs = FB.runs_of(summary, rows)
    cells = [c for c in FB.collect(summary, rows, modes=MODES) if c.get("cell", "bench") == "bench"]
    members = []
    for c in cells:
        if c["member"] not in members:
            members.append(c["member"])
    # the grid point a shape was planned under (its requested head-tokens), then T
    cells.sort(key=lambda c: (members.index(c["member"]), -c["V"], c["H"], -c.get("head_tokens", c["B"] * c["H"] * c["T"]),
                              c["T"]))
    out = []
    for cell in cells:
        row = {"member": cell["member"], "member_cell": MEMBER_NAMES.get(cell["member"], cell["member"]),
               "V": cell["V"], "H": cell["H"], "T": cell["T"], "B": cell["B"], "BTH": cell["B"] * cell["T"] * cell["H"]}
        for impl in IMPLS:
            for mode in MODES:
                key = f"{impl}_{MODE_KEYS[mode]}"
                ms = cell["ms"].get((impl, mode))
                row[key] = ms
                if ms is not None:
                    row[f"{key}_cell"] = f"{ms:.3f}"
                else:
                    why = cell["why"].get(impl, f"no {mode} timing")
                    short = "error" if why.startswith(("error", "task error")) else (
                        "not timed" if "correctness check failed" in why else "skipped" if why.startswith(
                            "skipped") else "not run")
                    row[f"{key}_cell"] = f"{short} ({reasons.mark(why)})"
        for mode in MODES:
            k = MODE_KEYS[mode]
            a, b = row[f"ours_{k}"], row[f"fla_{k}"]
            row[f"ratio_{k}"] = a / b if a is not None and b is not None else None
            row[f"ratio_{k}_cell"] = f"{a / b:.2f}" if a is not None and b is not None else "n/a"
        check = cell["check"]
        for impl in IMPLS:
            e = _slice_err(check, impl)
            row[f"{impl}_err"] = e
            if e is not None:
                row[f"{impl}_err_cell"] = f"{e:.1e}" + (
                    " FAILED" if impl in ((check.get("gate") or {}).get("failed") or {}) else "")
            elif check is None:
                row[f"{impl}_err_cell"] = f"n/a ({reasons.mark(cell['why'].get(impl, 'no check row'))})"
            else:
                sl = check.get("vs_float64_slice") or {}
                why = ("float64 slice not run: " + str(sl.get("skipped") or sl.get("error")) if sl.get("skipped")
                       or sl.get("error") else "not in the float64 slice check")
                row[f"{impl}_err_cell"] = f"n/a ({reasons.mark(why)})"
        floor, basis = FB.cell_floor(cell, "fwd+bwd", summary, runs)
        row["floor_fwd_bwd"], row["floor_basis"] = floor, basis
        ours = row["ours_fwd_bwd"]
        row["ours_pct_floor"] = floor / ours if floor is not None and ours is not None else None
        row["ours_pct_floor_cell"] = f"{100 * floor / ours:.1f}%" if row["ours_pct_floor"] is not None else "n/a"
        out.append(row)
    return out


COLUMNS = [
    Column("member_cell", "Member", align="l"), Column("V", "d_v", "{:d}"), Column("H", "H", "{:d}"),
    Column("T", "T", "{:,}"), Column("B", "B", "{:d}"), Column("BTH", "B·T·H", "{:,}"),
    Column("fla_fwd_cell", "fla fwd ms", align="r"), Column("fla_fwd_bwd_cell", "fla fwd+bwd ms", align="r"),
    Column("ours_fwd_cell", "ours fwd ms", align="r"), Column("ours_fwd_bwd_cell", "ours fwd+bwd ms", align="r"),
    Column("ratio_fwd_cell", "ours/fla fwd", align="r"), Column("ratio_fwd_bwd_cell", "ours/fla fwd+bwd", align="r"),
    Column("fla_err_cell", "fla err vs fp64", align="r"), Column("ours_err_cell", "ours err vs fp64", align="r"),
    Column("ours_pct_floor_cell", "ours % floor (fwd+bwd)", align="r"),
]


def _sig(x: float) -> float:
    """Six significant digits: the data file's precision (so its bytes do not hang on float noise)."""
    return float(f"{x:.6g}")


def _span(xs: list[float]) -> list[float] | None:
    return [_sig(min(xs)), _sig(max(xs))] if xs else None


def digest(trows: list[dict], complete: bool) -> dict:
    """Per member: the shapes planned and timed (both sides, both passes) and the ranges of ours/fla, fla/ours and
    ours' share of the floor over the timed ones; ``complete`` when every planned shape is timed and the runs
    ended their plans."""
    members = {}
    for m in dict.fromkeys(r["member"] for r in trows):
        mine = [r for r in trows if r["member"] == m]
        timed = [r for r in mine if all(r[f"{i}_{k}"] is not None for i in IMPLS for k in MODE_KEYS.values())]
        members[m] = {
            "name": MEMBER_NAMES.get(m, m), "shapes": len(mine), "timed": len(timed),
            "ours_over_fla": {k: _span([r[f"ratio_{k}"] for r in timed]) for k in MODE_KEYS.values()},
            "fla_over_ours": {k: _span([1 / r[f"ratio_{k}"] for r in timed]) for k in MODE_KEYS.values()},
            "ours_faster_fwd_bwd": sum(r["ratio_fwd_bwd"] < 1 for r in timed),
            "ours_pct_floor_fwd_bwd": _span([100 * r["ours_pct_floor"] for r in timed
                                             if r["ours_pct_floor"] is not None]),
        }
    shapes = sum(v["shapes"] for v in members.values())
    timed = sum(v["timed"] for v in members.values())
    return {"schema": SCHEMA, "shapes": shapes, "timed": timed, "complete": bool(complete and shapes == timed),
            "members": members}


def _commits(provenance: dict) -> list[str]:
    provs = list(provenance.get("previous_runs", [])) + [provenance]
    return list(dict.fromkeys(str(p.get("git_sha", "?")) for p in provs))


def _json_row(r: dict) -> dict:
    return {k: (_sig(v) if isinstance(v, float) else v) for k, v in r.items() if not k.endswith("_cell")}


def render_model_shapes(summary: dict, provenance: dict, rows: list[dict], md_path, tex_path, json_path):
    """Writes the table (md, tex) and its data (json) from one model-shape folder; returns the rendered table."""
    backends = ours_backends(rows)
    if len(backends) > 1:
        raise ValueError(f"the folder mixes runs of ours on {backends}: one backend per folder (--ours-backend)")
    a = summary["args"]
    runs = FB.runs_of(summary, rows)
    v = FB._versions(summary, provenance)
    reasons = FB.Reasons()
    trows = table_rows(summary, rows, reasons)
    complete = bool(summary.get("complete", False)) and not any(run["killed"] for run in runs)
    doc = digest(trows, complete)
    dtype = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(a["dtype"], a["dtype"])
    heads = sorted({h for run in runs for h in run["args"].get("bench_heads") or [run["args"]["heads"]]})
    hts = sorted({h for run in runs for h in run["args"].get("bench_head_tokens") or [run["args"]["head_tokens"]]})
    caption = (
        f"The GDN family at model shapes: fla {v['fla']} against ours (chunk_family, backend '{backends[0]}') on one "
        f"{v['gpu']} (driver {v['driver']}, CUDA {v['cuda']}, torch {v['torch']}, Triton {v['triton']}); {dtype}, "
        f"d_k={a['dk']}, chunk {a['chunk']}, H in {{{', '.join(map(str, heads))}}}, B·T·H = "
        f"{' / '.join(f'{h:,}' for h in sorted(hts, reverse=True))} head-tokens. fla ran with "
        f"{FB.fla_run_conditions(summary, rows)}.")
    nrow = next((r for r in rows if r.get("kind") == "bench" and r.get("status") == "ok" and r.get("impl") == "fla"),
                None)
    n_text = (f"{nrow['reps']} round(s) over {nrow['sets']} input set(s), n = {nrow['n']}" if nrow
              else f"up to {a['reps']} round(s) over {a['sets']} input set(s)")
    measured = [FB.run_ceilings(summary, run) for run in runs if FB.run_ceilings(summary, run)[0] == "measured"]
    ceil = ("the bf16 matmul rate and copy bandwidth measured at the start of each run ("
            + "; ".join(f"{t:.0f} TFLOP/s, {b:.2f} TB/s" for _, t, b in measured) + ")" if measured
            else "the H200 spec sheet (no run measured ceilings)")
    tuned = fla_tunings(rows)
    notes = [
        "ours: scalar-gate GDN is chunk_family(member='kda') with a per-head g [B,T,H] on its own Triton kernels "
        "(the scalar-gate path); full GDN is chunk_family(member='gdn')"
        + (" on the general Triton kernels" if backends[0] == "triton" else f" on backend '{backends[0]}'")
        + ". fla: chunk_gated_delta_rule and chunk_gdn2. Both get the same inputs (L2-normalised keys, log-sigmoid "
        "gates) and compute the same gradients.",
        f"Times are medians of CUDA-event timings after {a['warmup']} warm-up iterations, {n_text}; fwd runs to the "
        "event after the forward, fwd+bwd is the whole iteration (forward and torch.autograd.grad). ours/fla divides "
        "the two medians of the same shape and pass (above 1: ours is slower).",
        "fla is tuned over its full config lists (no cap) on its first call at the first shape of each "
        "(member, d_v, H) group, in the same call as the timing (its autotune keys ignore T and B apart from its "
        "cumsum kernels, which re-tune at every shape); every shape is warmed before it is timed"
        + ("; tuned at (member, d_v, H: B, T): " + "; ".join(
            f"{m} {V} {H}: {t['B']}, {t['T']:,}" for (m, V, H), t in sorted(tuned.items())) if tuned else "") + ".",
        "err vs fp64: the worst of max|x - ref| / max|ref| over o and every input gradient, x from the timed call's "
        "first run at that shape and ref the float64 chunked reference on the first head of the first sequence "
        f"(T <= {a['slice_check_max_t']:,}). A side whose error exceeds {a.get('check_gate_rel', 0.05):g}, or with "
        "non-finite values, is not timed.",
        "% floor = floor / ours' median, the floor max(FLOPs / matmul rate, minimal bytes / copy bandwidth) of the "
        "chunked algorithm (docs/gdn.md §2: its matrix products; every input read and every gradient written once) "
        f"at {ceil}.",
    ]
    notes += [c for c in summary.get("caveats", []) if c.startswith("fla's bench tunings")]
    pts = short_points(summary, rows)
    if pts:
        notes.append("Where H·T exceeds the B·T·H asked for, B stays 1: "
                     + "; ".join(f"{p['head_tokens']:,} at H={p['H']}, T={p['T']:,} runs {p['ran']:,} head-tokens"
                                 + (" (one row with the grid point of that size)" if p["shared"] else "")
                                 for p in pts) + ".")
    commits = _commits(provenance)
    notes.append(f"{len(runs)} run(s), " + ("all from commit " + commits[0][:12] if len(commits) == 1 else
                                           "from DIFFERENT commits: " + ", ".join(c[:12] for c in commits)) + ".")
    notes += FB._runs_note(summary, provenance, rows)
    notes += reasons.notes()
    table = render_table(trows, COLUMNS, caption, "tab:gdn-model-shapes", md_path, tex_path, notes)
    doc["rows"] = [_json_row(r) for r in trows]
    Path(json_path).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return table
