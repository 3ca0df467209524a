"""Table and figure of the fla timing benchmark: part (b) of ``experiments/gdn/fla_compare.py``
(its counts and the cell sizes come from :mod:`lethe.kernels.gdn.bench`, its floors from
:mod:`lethe.perf.roofline`, the same functions the run used).

Input: one run's folder (``results/gdn/fla_bench/``: ``rows.jsonl``, ``summary.json``, ``provenance.json``).
Output: ``paper/tables/gdn_fla_bench.{md,tex}`` through :func:`lethe.render.tables.render_table` and
``figures/gdn_fla_bench.{png,pdf}`` through :func:`lethe.render.style.save_figure`.

Everything is taken from the per-measurement rows, not from the summary's digest: a table cell is a ``bench`` row's
median, a ratio is two such medians divided, the floor is recomputed from the cell's FLOP/byte counts and the run's
ceilings. The cells listed are the ones the run *planned* (from its arguments), so a cell the run skipped, failed
or never reached still gets a line, and every missing number says why (a lettered note quoting the run's own
reason). Nothing machine- or time-dependent reaches the output.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from lethe.perf.roofline import roofline_ms
from lethe.render.tables import Column, render_table

from .bench import bench_batch, bench_grid

#: Implementations the table compares, in column order (the script's "torch" stand-in and its torch-path cells
#: are not part of the comparison with fla).
IMPLS = ("fla", "ours", "native")
IMPL_NAMES = {"fla": "fla", "ours": "ours (Triton)", "native": "native (CuTe K1, K2)"}
MODES = ("bwd", "fwd+bwd")
MODE_NAMES = {"bwd": "bwd", "fwd+bwd": "fwd+bwd"}
#: Cells of the comparison (the script's bench_torch cells time our torch path only).
CELL_KINDS = ("bench", "bench_native")
FLA_OPS = {"fla.ops.gdn2.chunk_gdn2": "chunk_gdn2",
           "fla.ops.gated_delta_rule.chunk_gated_delta_rule": "chunk_gated_delta_rule"}


# ------------------------------------------------------------------------------------------------ loading


def read_rows(path: str | os.PathLike[str]) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def load_run(folder: str | os.PathLike[str]) -> tuple[dict, dict, list[dict]]:
    """(summary, provenance, rows) of one run folder."""
    folder = Path(folder)
    return (json.loads((folder / "summary.json").read_text()), json.loads((folder / "provenance.json").read_text()),
            read_rows(folder / "rows.jsonl"))


# ------------------------------------------------------------------------------------------------ cells


_OLD_SKIP = re.compile(r"(?P<cell>\w+) (?P<member>\w+) V=(?P<V>\d+) T=(?P<T>\d+)")


def _key(r: dict) -> tuple:
    # the cell kind is part of the key: with the defaults, a bench_native cell and the bench_torch cell have the
    # same member and shape, and neither's check or skip may leak into the other
    return (r["member"], r["V"], r["T"], r["B"], r["H"], r.get("cell", "bench"))


def runs_of(summary: dict, rows: list[dict]) -> list[dict]:
    """The runs in ``rows``, in order. main() writes a meta row (with its arguments) before any other row, so a
    folder grown with ``--append`` splits at its meta rows; each run keeps its own ceilings and stop reason."""
    runs: list[dict] = []
    for r in rows:
        if r.get("kind") == "meta":
            runs.append({"meta": r, "args": r.get("args") or {}, "ceilings": None, "killed": None})
        elif runs and r.get("kind") == "ceilings":
            runs[-1]["ceilings"] = r
        elif runs and r.get("kind") == "killed":
            runs[-1]["killed"] = r
    if not runs:  # rows without a meta row: the summary describes the one run
        runs = [{"meta": summary.get("meta", {}), "args": summary["args"], "ceilings": summary.get("ceilings"),
                 "killed": None}]
    return runs


def _run_bench_impls(run: dict) -> tuple[str, ...]:
    got = run["meta"].get("bench_impls") or ["ours", "fla"]  # runs before --impls timed these two
    return tuple(i for i in IMPLS if i in got)


def run_impls(summary: dict, rows: list[dict] | None = None) -> tuple[str, ...]:
    """The implementations part (b) was asked to time, over every run in the folder."""
    got = {i for run in runs_of(summary, rows or []) for i in _run_bench_impls(run)}
    return tuple(i for i in IMPLS if i in got)


def _run_cells(run: dict) -> list[dict]:
    a, meta = run["args"], run["meta"]
    if "bench" not in a.get("parts", ["bench"]):
        return []
    impls = _run_bench_impls(run)
    native = meta.get("native") or {}
    native_apart = "native" in impls and not native.get("in_main_cells", False)
    which = a.get("bench_cells", "all")
    H = a["heads"]
    # a grid over heads and head-tokens (runs before it had one value of each)
    heads, head_tokens = a.get("bench_heads") or [H], a.get("bench_head_tokens") or [a["head_tokens"]]
    out = []
    for m in a["bench_members"]:
        for V in a["dvs"]:
            if which != "native":
                for _, _, T, B, h, ht in bench_grid([m], [V], heads, head_tokens, a["bench_lengths"]):
                    out.append({"member": m, "V": V, "T": T, "B": B, "H": h, "head_tokens": ht, "cell": "bench",
                                "impls": tuple(i for i in impls if i != "native" or not native_apart)})
            if native_apart and which != "main" and m in native.get("members", a["bench_members"]):
                for T in native.get("lengths", []):
                    out.append({"member": m, "V": V, "T": T, "B": bench_batch(native["head_tokens"], H, T), "H": H,
                                "cell": "bench_native", "impls": impls})
    return out


def planned_cells(summary: dict, rows: list[dict] | None = None) -> list[dict]:
    """Every cell any run in the folder planned (from its arguments), in table order: member (as first given),
    d_v descending, the main cells (``--head-tokens``) then native's smaller ones, T ascending. Each carries the
    impls planned in it (over all runs) and the indices of the runs that planned it."""
    cells: dict[tuple, dict] = {}
    members: list[str] = []
    for i, run in enumerate(runs_of(summary, rows or [])):
        for c in _run_cells(run):
            k = _key(c)
            have = cells.setdefault(k, {**c, "impls": (), "runs": ()})
            have["impls"] = tuple(x for x in IMPLS if x in have["impls"] or x in c["impls"])
            have["runs"] = have["runs"] + (i,)
            if c["member"] not in members:
                members.append(c["member"])
    kinds = {"bench": 0, "bench_native": 1}
    return sorted(cells.values(), key=lambda c: (members.index(c["member"]), -c["V"], kinds[c["cell"]], c["T"],
                                                 -c["B"]))


class Reasons:
    """Distinct reasons for missing numbers, lettered in order of first use so that cells stay short and the
    notes carry the full text once."""

    def __init__(self):
        self.text: dict[str, str] = {}

    def mark(self, reason: str) -> str:
        if reason not in self.text:
            self.text[reason] = _letters(len(self.text))
        return self.text[reason]

    def notes(self) -> list[str]:
        return [f"({letter}) {reason}" for reason, letter in self.text.items()]


def _letters(n: int) -> str:
    s = ""
    n += 1
    while n:
        n, r = divmod(n - 1, 26)
        s = chr(ord("a") + r) + s
    return s


def _short(text: str, n: int = 160) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 3] + "..."


def collect(summary: dict, rows: list[dict], modes: tuple[str, ...] = MODES) -> list[dict]:
    """Per planned cell: the ok ``bench`` rows by (impl, mode) for ``modes``, the ``bench_check`` row, the cell's
    counts, the run its numbers come from, and for each impl without numbers the reason (verbatim from the run's
    rows where it gave one). Where runs overlap, the later row wins."""
    runs = runs_of(summary, rows)
    bench, errors, checks, skips, task_errors, counts, src = {}, {}, {}, {}, {}, {}, {}
    shape_skips: dict[tuple, str] = {}
    run_i = -1
    for r in rows:
        kind = r.get("kind")
        if kind == "meta":
            run_i += 1
        if kind == "skip" and "member" not in r:
            # runs made before skip rows carried their cell's fields name it only in the task
            # ("bench sgdn V=64 T=4096"); such a skip applies to that member/shape at any B
            m = _OLD_SKIP.fullmatch(str(r.get("task", "")))
            if m:
                shape_skips[(m["cell"], m["member"], int(m["V"]), int(m["T"]))] = (
                    f"skipped: {_short(r.get('reason', '?'), 260)}")
            continue
        if kind not in ("bench", "bench_check", "skip", "task_error") or "member" not in r or "B" not in r:
            continue
        k = _key(r)
        if r.get("counts"):
            counts[k] = r["counts"]
        if kind == "bench" and r.get("status") == "ok":
            bench[(k, r["impl"], r["mode"])] = r
            src[k] = max(run_i, 0)
        elif kind == "bench":
            errors[(k, r["impl"])] = f"error: {_short(r.get('error', '?'))}"
        elif kind == "bench_check":
            checks[k] = r
            src[k] = max(run_i, 0)
        elif kind == "skip":
            skips[(k, r.get("impl"))] = f"skipped: {_short(r.get('reason', '?'), 260)}"
        else:
            task_errors[k] = f"task error: {_short(r.get('error', '?'))}"
    all_impls = run_impls(summary, rows)
    native_ht = next((run["meta"]["native"]["head_tokens"] for run in runs if run["meta"].get("native")), None)
    cells = []
    for c in planned_cells(summary, rows):
        k = _key(c)
        cell = {**c, "counts": counts.get(k), "check": checks.get(k), "ms": {}, "rows": {}, "why": {},
                "run": src.get(k, c["runs"][-1])}
        for impl in IMPLS:
            for mode in modes:
                r = bench.get((k, impl, mode))
                if r is not None:
                    cell["rows"][(impl, mode)] = r
                    cell["ms"][(impl, mode)] = r["median_ms"]
            if any((impl, m) in cell["rows"] for m in modes):
                continue
            why = (errors.get((k, impl)) or skips.get((k, impl)) or skips.get((k, None)) or task_errors.get(k)
                   or shape_skips.get((c.get("cell", "bench"), c["member"], c["V"], c["T"])))
            stopped = [runs[i]["killed"] for i in c["runs"] if runs[i]["killed"] is not None]
            if why is not None:
                pass
            elif impl not in c["impls"]:
                why = ("not in this run's --impls" if impl not in all_impls else
                       f"not run at this size (native's cells use B*H*T = {native_ht:,})" if impl == "native"
                       and native_ht else "not run at this size")
            elif stopped:
                why = f"not reached: the run was stopped ({_short(stopped[-1].get('reason', '?'))})"
            elif not summary.get("complete", True) and c["runs"][-1] == len(runs) - 1:
                why = "not reached: the run did not complete"
            else:
                why = "not run (no row for it)"
            cell["why"][impl] = why
        cells.append(cell)
    return cells


def _mode_counts(counts: dict, mode: str) -> tuple[float, float]:
    if mode == "bwd":
        return counts["bwd_flops"], counts["bwd_bytes"]
    if mode == "fwd":
        return counts["fwd_flops"], counts["fwd_bytes"]
    return counts["fwd_flops"] + counts["bwd_flops"], counts["fwd_bytes"] + counts["bwd_bytes"]


def run_ceilings(summary: dict, run: dict) -> tuple[str, float, float]:
    """("measured" | "spec sheet", TFLOP/s, TB/s) of one run: its measured ceilings when it has them."""
    ceil, spec = run.get("ceilings") or {}, summary.get("spec") or {}
    if ceil.get("measured"):
        return "measured", ceil["bf16_matmul_tflops"], ceil["copy_tbps"]
    return "spec sheet", spec.get("bf16_dense_tflops", 989.0), spec.get("hbm_tbps", 4.8)


def cell_floor(cell: dict, mode: str, summary: dict, runs: list[dict]) -> tuple[float | None, str]:
    """(floor ms, basis) of a cell at the ceilings of the run its numbers come from."""
    basis, tflops, tbps = run_ceilings(summary, runs[cell["run"]])
    if not cell["counts"]:
        return None, basis
    return roofline_ms(*_mode_counts(cell["counts"], mode), tflops, tbps), basis


def impl_check_error(check: dict, impl: str) -> float | None:
    """The worst relative error the cell's check saw for ``impl``: the larger of its float64-slice error and (for
    impls other than ours) its error against ours; None when neither was computed."""
    vals = []
    sl = check.get("vs_float64_slice") or {}
    if impl in sl and isinstance(sl[impl], dict):
        vals.append(sl[impl]["worst_rel_err"])
    by = check.get("vs_ours_by_impl") or ({check["vs_ours"]["impl"]: check["vs_ours"]} if check.get("vs_ours") else {})
    if impl in by:
        vals.append(by[impl]["worst_rel_err"])
    if not vals:
        return None
    return float("nan") if any(v != v for v in vals) else max(vals)


def check_text(cell: dict, reasons: Reasons) -> str:
    check = cell["check"]
    if check is None:
        planned = [i for i in IMPLS if i in cell["impls"]]
        why = next((cell["why"][i] for i in planned if i in cell["why"]), "no check row")
        return f"none ({reasons.mark(why)})"
    failed = (check.get("gate") or {}).get("failed") or {}
    parts = []
    for impl in IMPLS:
        if impl not in check.get("nonfinite", {}):
            continue
        e = impl_check_error(check, impl)
        txt = f"{impl} " + ("n/a" if e is None else f"{e:.1e}")
        if impl in failed:
            txt += " FAILED"
        parts.append(txt)
    sl = check.get("vs_float64_slice") or {}
    if "skipped" in sl or "error" in sl:
        parts.append("vs ours only")
    return ", ".join(parts) if parts else "no impl checked"


# ------------------------------------------------------------------------------------------------ table


def _pow2(n: int) -> str:
    # plain digits: "2^20" would need math mode in LaTeX, and the table's text is escaped, not typeset
    return f"{n:,}"


def table_rows(summary: dict, rows: list[dict], reasons: Reasons | None = None) -> list[dict]:
    """One table row per planned cell and mode (bwd, fwd+bwd), every field a display string or number."""
    reasons = reasons if reasons is not None else Reasons()
    runs = runs_of(summary, rows)
    cells = collect(summary, rows)
    bases = {cell_floor(c, MODES[0], summary, runs)[1] for c in cells}
    out = []
    for cell in cells:
        check = check_text(cell, reasons)
        for mode in MODES:
            floor, basis = cell_floor(cell, mode, summary, runs)
            row = {"member": cell["member"], "V": cell["V"], "T": cell["T"], "BH": cell["B"] * cell["H"],
                   "mode": MODE_NAMES[mode], "floor": floor, "floor_basis": basis,
                   "check": check if mode == MODES[0] else "as above"}
            for impl in IMPLS:
                ms = cell["ms"].get((impl, mode))
                if ms is not None:
                    row[impl] = ms
                    row[f"{impl}_cell"] = f"{ms:.3f}"
                    row[f"{impl}_pct"] = floor / ms if floor is not None else None
                    row[f"{impl}_pct_cell"] = f"{100 * floor / ms:.1f}%" if floor is not None else "n/a"
                else:
                    why = cell["why"].get(impl, "no timing of this mode")
                    short = "error" if why.startswith(("error", "task error")) else (
                        "not timed" if "correctness check failed" in why else "skipped" if why.startswith(
                            "skipped") else "not run")
                    row[impl] = None
                    row[f"{impl}_cell"] = f"{short} ({reasons.mark(why)})"
                    row[f"{impl}_pct"] = None
                    row[f"{impl}_pct_cell"] = "n/a"
            for impl in ("ours", "native"):
                a, b = row[impl], row["fla"]
                row[f"{impl}_over_fla"] = a / b if a is not None and b is not None else None
                row[f"{impl}_over_fla_cell"] = f"{a / b:.2f}" if a is not None and b is not None else "n/a"
            # a folder mixing runs with and without measured ceilings marks the spec-sheet floors
            mark = " (spec)" if len(bases) > 1 and basis != "measured" else ""
            row["floor_cell"] = f"{floor:.3f}{mark}" if floor is not None else "n/a"
            out.append(row)
    return out


def columns(bases: set[str], with_native: bool) -> list[Column]:
    basis = next(iter(bases)) if len(bases) == 1 else "measured; (spec): spec sheet"
    cols = [Column("member", "Member", align="l"), Column("V", "d_v", "{:d}"), Column("T", "T", "{:,}"),
            Column("BH", "B×H", "{:,}"), Column("mode", "Pass", align="l"),
            Column("fla_cell", "fla ms", align="r"), Column("ours_cell", "ours ms", align="r")]
    if with_native:
        cols.append(Column("native_cell", "native ms", align="r"))
    cols.append(Column("ours_over_fla_cell", "ours/fla", align="r"))
    if with_native:
        cols.append(Column("native_over_fla_cell", "native/fla", align="r"))
    cols += [Column("floor_cell", f"Floor ms ({basis})", align="r"),
             Column("fla_pct_cell", "fla % floor", align="r"), Column("ours_pct_cell", "ours % floor", align="r")]
    if with_native:
        cols.append(Column("native_pct_cell", "native % floor", align="r"))
    cols.append(Column("check", "Check: worst rel. err.", align="l"))
    return cols


_VERSION_KEYS = ("gpu", "driver", "cuda_runtime", "torch", "triton", "fla")


def _versions(summary: dict, provenance: dict) -> dict:
    meta = summary.get("meta", {})
    return {"gpu": provenance.get("gpu") or meta.get("gpu") or "?", "driver": provenance.get("driver") or "?",
            "cuda": provenance.get("cuda_runtime") or "?", "torch": provenance.get("torch") or meta.get("torch", "?"),
            "triton": provenance.get("triton") or meta.get("triton") or "?",
            "fla": provenance.get("fla") or meta.get("fla") or "?"}


def fla_run_conditions(summary: dict, rows: list[dict]) -> str:
    """How fla ran, as the runs recorded it: the dispatch switch (environment and fla's own flag, from each meta
    row) and, per fla op, whether its timed rows ran under the #640 guard bypass."""
    states = []
    for run in runs_of(summary, rows):
        env, flag = run["meta"].get("fla_disable_backend_dispatch"), run["meta"].get("fla_dispatch_disabled")
        text = f"FLA_DISABLE_BACKEND_DISPATCH={env if env is not None else 'unset'}"
        if flag is not None:
            text += f" (fla.backends reported dispatch {'disabled' if flag else 'ENABLED'})"
        if text not in states:
            states.append(text)
    text = states[0] if len(states) == 1 else "differing settings across runs: " + " / ".join(states)
    by_op: dict[str, set] = {}
    for r in rows:
        if r.get("kind") == "bench" and r.get("impl") == "fla" and r.get("status") == "ok":
            by_op.setdefault(FLA_OPS.get(r["fla_op"], r["fla_op"]), set()).add(bool(r.get("bypass_640")))
    if not by_op:
        return text + "; no fla row was timed"
    parts = []
    for op, flags in sorted(by_op.items()):
        parts.append(f"{op} " + ("under the #640 guard bypass (lethe.foreign.fla640.bypass)" if flags == {True}
                                 else "without the #640 bypass" if flags == {False} else "partly under the bypass"))
    return text + "; " + "; ".join(parts)


def _runs_note(summary: dict, provenance: dict, rows: list[dict]) -> list[str]:
    """For a folder grown with --append: what each run covered, and any version that differs between them."""
    runs = runs_of(summary, rows)
    if len(runs) < 2:
        return []
    parts = []
    for i, run in enumerate(runs, start=1):
        a = run["args"]
        parts.append(f"run {i}: {', '.join(_run_bench_impls(run))}; d_v {', '.join(map(str, a['dvs']))}; cells "
                     f"{a.get('bench_cells', 'all')}" + (f"; stopped ({_short(run['killed'].get('reason', '?'), 60)})"
                                                         if run["killed"] else ""))
    notes = [f"Rows of {len(runs)} runs in one folder (--append; later rows win where runs overlap): "
             + "; ".join(parts) + "."]
    provs = list(provenance.get("previous_runs", [])) + [provenance]
    differ = [k for k in _VERSION_KEYS if len({str(p.get(k)) for p in provs}) > 1]
    if differ:
        notes.append("Versions differ between runs: " + "; ".join(
            f"{k} " + " / ".join(str(p.get(k)) for p in provs) for k in differ) + " (the caption gives the last run's).")
    return notes


def render_fla_bench(summary: dict, provenance: dict, rows: list[dict], md_path, tex_path):
    """``paper/tables/gdn_fla_bench.{md,tex}`` from one folder of fla_compare.py part (b) (one run or several
    appended)."""
    a = summary["args"]
    runs = runs_of(summary, rows)
    v = _versions(summary, provenance)
    impls = run_impls(summary, rows)
    reasons = Reasons()
    trows = table_rows(summary, rows, reasons)
    with_native = "native" in impls or any(r["native"] is not None for r in trows)
    native = next((run["meta"]["native"] for run in runs if run["meta"].get("native")), {})
    dtype = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(a["dtype"], a["dtype"])
    head_tokens = sorted({run["args"]["head_tokens"] for run in runs if run["args"].get("bench_cells") != "native"}
                         or {a["head_tokens"]})
    caption = (
        f"Backward (bwd) and forward+backward time: fla {v['fla']} against our Triton path"
        + (" and our native backend" if with_native else "")
        + f" on one {v['gpu']} (driver {v['driver']}, CUDA {v['cuda']}, torch {v['torch']}, Triton {v['triton']}); "
        f"{dtype}, d_k={a['dk']}, chunk {a['chunk']}, H={a['heads']}, B×H×T = "
        f"{' / '.join(_pow2(h) for h in head_tokens)} head-tokens"
        + (f" ({_pow2(native['head_tokens'])} in native's cells)" if with_native and native.get("head_tokens")
           and not native.get("in_main_cells") else "")
        + f". fla ran with {fla_run_conditions(summary, rows)}."
    )
    nrow = next((r for r in rows if r.get("kind") == "bench" and r.get("impl") == "fla" and r.get("status") == "ok"),
                None)
    n_text = (f"{nrow['reps']} round(s) over {nrow['sets']} input set(s) (n = {nrow['n']})" if nrow
              else f"up to {a['reps']} round(s) over {a['sets']} input set(s)")
    spec = summary.get("spec") or {}
    measured = [run_ceilings(summary, run) for run in runs if run_ceilings(summary, run)[0] == "measured"]
    if measured:
        ceil_text = ("the bf16 matmul rate and copy bandwidth measured on the device at the start of "
                     + ("the run: " if len(runs) == 1 else "each run: ")
                     + "; ".join(f"{t:.0f} TFLOP/s, {b:.2f} TB/s" for _, t, b in measured)
                     + (f" (spec sheet {spec.get('bf16_dense_tflops', 989):g} TFLOP/s, {spec.get('hbm_tbps', 4.8):g} "
                        "TB/s: lower floors; the rows keep both, floor_ms and floor_spec_ms)"))
    else:
        ceil_text = (f"the H200 spec sheet ({spec.get('bf16_dense_tflops', 989):g} TFLOP/s dense bf16, "
                     f"{spec.get('hbm_tbps', 4.8):g} TB/s HBM3e), because no run measured ceilings")
    notes = [
        f"Times are medians of CUDA-event timings after {a['warmup']} warm-up iterations, {n_text}; bwd runs from "
        "the event after the forward to the event after torch.autograd.grad, fwd+bwd is the whole iteration. "
        "ours/fla and native/fla divide the medians of the same cell and pass (above 1: slower than fla).",
        "Floor = max(FLOPs / matmul rate, minimal bytes / copy bandwidth) at " + ceil_text + "; FLOPs are the "
        "chunked algorithm's matrix products, bytes read every input and write every gradient once (docs/gdn.md "
        "§8). % floor = floor / median (100% would be at the floor).",
        "Check, made on the first call of each cell before any timing: every impl's output and input gradients "
        "against ours (max|x - ours| / max|ours|) and against a float64 chunked reference on one head (while "
        f"T <= {a['slice_check_max_t']:,}; above that, against ours only); the column shows each impl's worst. "
        f"An impl with non-finite values or a worst error above {a.get('check_gate_rel', 0.05):g} is not timed.",
    ]
    if with_native:
        nat = [r for r in rows if r.get("kind") == "bench" and r.get("impl") == "native" and r.get("status") == "ok"]
        k1 = sorted({r.get("native_k1") for r in nat if r.get("native_k1")})
        comp = sorted({r.get("compute_dtype") for r in nat if r.get("compute_dtype")})
        notes.append(
            "native: chunk_family(backend='native') on the same " + dtype + " input tensors; its torch chunked "
            f"forward and backward compute in {', '.join(comp) if comp else 'float32'} with the reverse state scan "
            f"(K1) replaced by the CuTe DSL kernel (K1 as recorded in the timed rows: {', '.join(k1) or 'none timed'}) "
            "and, since the backend gained it, the WY / triangular-inverse VJP (K2) too wherever its shape is "
            "supported (chunk 64, d_k and d_v multiples of 16: every cell here; the run's caveats say which); "
            "gradients come back in " + dtype + "."
            + (f" Its forward materialises [B,H,N,C,C,K] float32 tensors, so it ran at {_pow2(native['head_tokens'])} "
               "head-tokens, where fla and ours were timed again: ratios compare equal work."
               if native.get("head_tokens") and not native.get("in_main_cells") else ""))
    elif any(run["meta"].get("cute_dsl_available") is False for run in runs):
        notes.append("native (our CuTe DSL backend) was not timed: the CuTe DSL was not importable on the device.")
    notes += [c for c in summary.get("caveats", []) if c.startswith("fla's bench tunings")]
    torch_cells = sorted({(r["member"], r["V"], r["T"], r["B"] * r["H"]) for r in rows
                          if r.get("kind") == "bench" and r.get("cell") == "bench_torch" and r.get("status") == "ok"})
    if torch_cells:
        notes.append(f"Our torch path (backend='torch') was also timed in {len(torch_cells)} cells; those rows are "
                     "in rows.jsonl and not compared here.")
    notes += _runs_note(summary, provenance, rows)
    notes += reasons.notes()
    bases = {r["floor_basis"] for r in trows} or {"measured"}
    return render_table(trows, columns(bases, with_native), caption, "tab:gdn-fla-bench", md_path, tex_path, notes)


# ------------------------------------------------------------------------------------------------ figure

_COLOR = {"fla": "vermillion", "ours": "blue", "native": "bluish_green"}
_MARKER = {"fla": "s", "ours": "o", "native": "^"}


def figure_series(summary: dict, rows: list[dict], mode: str = "bwd") -> dict:
    """{(member, V): {"time": {(impl, head_tokens): [(T, median, p10, p90)]}, "floor": {head_tokens: [(T, ms)]},
    "ratio": {(impl, head_tokens): [(T, impl / fla)]}}} over the planned cells, T ascending."""
    out: dict = {}
    runs = runs_of(summary, rows)
    for cell in collect(summary, rows):
        panel = out.setdefault((cell["member"], cell["V"]), {"time": {}, "floor": {}, "ratio": {}})
        ht = cell["B"] * cell["H"] * cell["T"]
        fl, _ = cell_floor(cell, mode, summary, runs)
        if fl is not None:
            panel["floor"].setdefault(ht, []).append((cell["T"], fl))
        for impl in IMPLS:
            r = cell["rows"].get((impl, mode))
            if r is not None:
                panel["time"].setdefault((impl, ht), []).append((cell["T"], r["median_ms"], r["p10_ms"], r["p90_ms"]))
        fla = cell["ms"].get(("fla", mode))
        for impl in ("ours", "native"):
            x = cell["ms"].get((impl, mode))
            if x is not None and fla is not None:
                panel["ratio"].setdefault((impl, ht), []).append((cell["T"], x / fla))
    for panel in out.values():
        for d in panel.values():
            for k in d:
                d[k] = sorted(d[k])
    return out


def render_fla_bench_figure(summary: dict, rows: list[dict], outdir="figures", stem: str = "gdn_fla_bench"):
    """Backward time against T (log-log), one panel per (member, d_v), a line per impl and problem size, the
    roofline floor dashed; below, each impl's time over fla's at the same cell. Returns the (png, pdf) paths."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter, NullLocator

    from lethe.render.style import OKABE_ITO, new_figure, save_figure, style

    series = figure_series(summary, rows, "bwd")
    panels = list(series) or [("none", 0)]
    sizes = {ht for p in series.values() for ht in p["floor"]} | {k[1] for p in series.values() for k in p["time"]}
    main_ht = max(sizes, default=summary["args"]["head_tokens"])  # the sweep's size: solid; smaller ones dotted
    bases = {run_ceilings(summary, run)[0] for run in runs_of(summary, rows)}
    basis = next(iter(bases)) if len(bases) == 1 else "measured or spec sheet"
    lengths = sorted({T for p in series.values() for d in p["time"].values() for T, *_ in d}
                     | {T for p in series.values() for d in p["floor"].values() for T, _ in d})

    def style_of(ht):
        return ("-", 1.0) if ht == main_ht else (":", 0.55)

    with style():
        fig, axes = new_figure(2.9 * len(panels) + 0.4, 5.4, nrows=2, ncols=len(panels), sharex=True, squeeze=False)
        for j, key in enumerate(panels):
            top, bot = axes[0][j], axes[1][j]
            p = series.get(key, {"time": {}, "floor": {}, "ratio": {}})
            for ht, pts in sorted(p["floor"].items(), reverse=True):
                ls, alpha = style_of(ht)
                top.plot([t for t, _ in pts], [f for _, f in pts], ls="--", color=OKABE_ITO["black"],
                         alpha=1.0 if ht == main_ht else 0.45, lw=1.0,
                         label=f"floor ({basis}), {_tex_pow2(ht)} head-tokens")
            for (impl, ht), pts in sorted(p["time"].items(), key=lambda kv: (-kv[0][1], IMPLS.index(kv[0][0]))):
                ls, alpha = style_of(ht)
                T = [x[0] for x in pts]
                med = [x[1] for x in pts]
                err = [[m - lo for _, m, lo, _ in pts], [hi - m for _, m, _, hi in pts]]
                top.errorbar(T, med, yerr=err, ls=ls, marker=_MARKER[impl], ms=4, lw=1.2, capsize=2,
                             color=OKABE_ITO[_COLOR[impl]], alpha=max(alpha, 0.7),
                             mfc=OKABE_ITO[_COLOR[impl]] if ht == main_ht else "white",
                             label=f"{IMPL_NAMES[impl]}, {_tex_pow2(ht)} head-tokens")
            bot.axhline(1.0, color="#777777", lw=0.9, ls="-", label="same time as fla")
            for (impl, ht), pts in sorted(p["ratio"].items(), key=lambda kv: (-kv[0][1], IMPLS.index(kv[0][0]))):
                ls, _ = style_of(ht)
                bot.plot([t for t, _ in pts], [r for _, r in pts], ls=ls, marker=_MARKER[impl], ms=4, lw=1.2,
                         color=OKABE_ITO[_COLOR[impl]], mfc=OKABE_ITO[_COLOR[impl]] if ht == main_ht else "white",
                         label=f"{impl}/fla, {_tex_pow2(ht)} head-tokens")
            m, V = key
            top.set_title(f"{m}, d_v={V}" if V else "no timing in this run", fontsize=10)
            for ax in (top, bot):
                ax.set_xscale("log", base=2)
                ax.set_yscale("log")
                ax.grid(True, which="major", axis="both")
                if lengths:
                    ax.set_xticks(lengths)
                    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _p: f"{int(x) // 1024}k" if x >= 1024
                                                               else f"{int(x)}"))
                    ax.xaxis.set_minor_formatter(NullFormatter())
            bot.set_xlabel("T (tokens per sequence)")
            if j == 0:
                top.set_ylabel("backward ms (median, p10-p90)")
                bot.set_ylabel("time / fla time (bwd)")
            ratios = [r for pts in p["ratio"].values() for _, r in pts if r > 0]
            if ratios:  # keep 1 (parity) in view and leave room for the next 1-2-5 label above the data
                bot.set_ylim(min(0.8, min(ratios) / 1.3), max(1.25, max(ratios) * 1.3))
            # ratios sit within a decade or two of 1: label 1-2-5 steps rather than only powers of ten
            bot.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            bot.yaxis.set_major_formatter(FuncFormatter(lambda y, _p: f"{y:g}"))
            bot.yaxis.set_minor_locator(NullLocator())
        legend = {}  # one entry per label over all panels (a panel may lack a series another has)
        for ax in [ax for row in axes for ax in row]:
            for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
                legend.setdefault(lab, h)
        if legend:
            fig.legend(list(legend.values()), list(legend), loc="outside lower center", ncols=min(3, len(legend)),
                       fontsize=8)
        fla = summary.get("meta", {}).get("fla")
        fig.suptitle(f"Backward time against fla{' ' + fla if fla else ''} and the roofline floor", fontsize=10.5)
        return save_figure(fig, stem, outdir)


def _tex_pow2(n: int) -> str:
    return f"$2^{{{n.bit_length() - 1}}}$" if n > 0 and n & (n - 1) == 0 else f"{n:,}"
