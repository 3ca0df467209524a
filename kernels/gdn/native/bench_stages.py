"""The stages of the native benchmark (:mod:`.bench`, :mod:`.bench_wgmma`) in their order, each guarded, and
what the driver (experiments/native/bench.py) does around them: the result an ``--merge`` run starts from and
the summary printed last."""

from __future__ import annotations

import json
import time
import traceback
from pathlib import Path

import torch

from . import bench, bench_wgmma
from .bench import BenchRun

STAGES = ("ceilings", "correctness", "k2_correctness", "k2_timing", "backward_timing", "timing", "k1_wgmma",
          "k2_wgmma")


def ceilings_stage(run: BenchRun, out: dict, quick: bool) -> None:
    """The ``ceilings`` stage: the measured copy bandwidth and float32 matmul rate under ``out["ceilings"]``."""
    out["ceilings"] = bench.ceilings(run)


def stage_functions() -> dict:
    """Stage name -> ``fn(run, out, quick)``, in :data:`STAGES` order."""
    return {"ceilings": ceilings_stage, "correctness": bench.check_correctness,
            "k2_correctness": bench.check_k2_correctness, "k2_timing": bench.time_k2,
            "backward_timing": bench.time_backward, "timing": bench.time_configs,
            "k1_wgmma": bench_wgmma.k1_wgmma_stage, "k2_wgmma": bench_wgmma.k2_wgmma_stage}


def run_stages(run: BenchRun, out: dict, stages, quick: bool, functions: dict | None = None) -> None:
    """Run the chosen ``stages`` in :data:`STAGES` order, each guarded: a failure is recorded under
    ``<stage>_error`` (the traceback's tail) and the next stage runs; a stage that would start after the budget
    is recorded as ``<stage>_skipped: "budget"``; ``<stage>_wall_s`` its seconds. Earlier ``_error`` /
    ``_skipped`` keys of a stage run now are dropped; ``out`` is saved after every stage. ``functions``
    replaces :func:`stage_functions` (tests)."""
    functions = stage_functions() if functions is None else functions
    for name in STAGES:
        if name not in stages:
            continue
        out.pop(f"{name}_error", None)
        out.pop(f"{name}_skipped", None)
        if run.over_budget():
            out[f"{name}_skipped"] = "budget"
            run.progress(f"stage {name}: skipped (budget {run.budget_s} s)")
            run.save(out)
            continue
        run.progress(f"stage {name}")
        t0 = time.perf_counter()
        try:
            functions[name](run, out, quick)
        except Exception:  # noqa: BLE001 - keep the other stages
            out[f"{name}_error"] = traceback.format_exc()[-3000:]
            print(out[f"{name}_error"], flush=True)
        out[f"{name}_wall_s"] = round(time.perf_counter() - t0, 1)
        run.save(out)
        if run.cuda:
            torch.cuda.empty_cache()


def start_from(merge: str | None) -> dict:
    """The result dict a run starts from: empty, or an earlier bench.json with its provenance embedded under
    ``merged_from`` (a file that cannot be read is recorded under ``merge_error``)."""
    if not merge:
        return {}
    try:
        out = json.loads(Path(merge).read_text())
        prov = Path(merge).with_name("provenance.json")
        out["merged_from"] = {"file": str(merge), "provenance": json.loads(prov.read_text()) if prov.exists() else None}
    except Exception as e:  # noqa: BLE001
        out = {"merge_error": repr(e)}
    return out


def summary_lines(out: dict, stages) -> list[str]:
    """The short summary printed last: the ceilings, the correctness rows, the timing rows of the stages run."""
    lines = [json.dumps(out.get("ceilings"), default=str)]
    if "correctness" in stages:
        for r in out.get("k1_correctness", []):
            lines.append(" ".join(str(x) for x in (
                "corr", r["erase"], r["V"], r["BV"], r["split"], "nan_free", r["nan_free"], "bitwise",
                r["bitwise_3runs"], "dd vs f64 %.2e (torch %.2e)" % (r["ddelta_rel_vs_f64"],
                                                                     r["ddelta_torch32_rel_vs_f64"]),
                "dS0 vs f64 %.2e" % r["dS0_rel_vs_f64"], "vs t32 %.1e" % r["dS0_rel_vs_torch32"])))
        for r in out.get("end_to_end", []):
            lines.append(f"e2e {r['dtype']} " + str({k_: "%.1e" % v for k_, v in r.items() if isinstance(v, float)}))
    for r in out.get("k2_correctness", []) if "k2_correctness" in stages else []:
        lines.append("k2 corr d_v=%d passed=%s " % (r["V"], r["passed"])
                     + str({k_: "%.1e" % v for k_, v in r.items() if isinstance(v, float) and "torch32_rel" not in k_}))
    for key in ("k2_timing", "backward_timing", "timing"):
        if key not in stages:
            continue
        for r in out.get(key, []):
            lines.append(f"{key} " + "T=%d V=%d BH=%d " % (r["T"], r["V"], r["BH"])
                         + str({k_: (round(v, 3) if isinstance(v, float) else v) for k_, v in r.items()
                                if k_.endswith(("_ms", "floor")) or k_.startswith("speedup") or k_ == "skipped"}))
    return lines
