"""fla #640 on the H200: is fla's gated chunk backward miscompiled with the guard bypassed, and does the battery
catch it?

Two measurements, in one priority-ordered task list cut by a wall-clock budget (fla autotunes every new
(kernel, dtype, K) on first call, which can take a minute each):

* direct: fla's forward and backward against float64 autograd of the oracle (lethe.kernels.gdn.reference) on the
  same rounded inputs and the same upstream gradient, per tensor (o, dq, dk, dv, dg, dbeta), first with fla's
  guard in place (records the refusal), then with it bypassed (lethe.foreign.fla640.bypass), three times
  (bitwise determinism). A spy on ``chunk_bwd_kernel_dqkwg`` records the tile (BK) each backward launched.
* verifier: lethe.verifier.api.verify(ref, cand, device="cuda", profile="strict") on generated pairs
  (lethe.foreign.fla640.pairs), recording which gates fire and CMP-02's evidence per input.

Every exposed configuration (head dim K=64, tile BK=64) has a control at K=128 (BK=128) with everything else
equal. See docs/fla640.md for the device command and for what counts as a catch.

    python3 experiments/fla640/run.py --out $OUT/fla640 [--quick] [--budget-s 330]
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Before torch/triton/fla are imported: pure-Triton fla, and one Triton cache shared with the verifier's
# candidate processes (so they reuse the kernels and autotune choices this process already made).
os.environ["FLA_DISABLE_BACKEND_DISPATCH"] = "1"
SHARED_TRITON_CACHE = os.environ.setdefault("TRITON_CACHE_DIR", "/tmp/fla640-triton-cache")

import torch  # noqa: E402 - after the environment above

from lethe import provenance  # noqa: E402
from lethe.foreign import fla640 as F  # noqa: E402

SCHEMA = F.DIRECT_SCHEMA


def log(msg: str) -> None:
    print(f"[fla640 {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _fmt(x, spec=".2e"):
    return "-" if x is None else format(x, spec)


def print_summary(doc: dict) -> None:
    print("\n=== fla #640: direct check (guard bypassed; relative Frobenius error vs float64 oracle) ===")
    cols = ["o", "dq", "dk", "dv", "dg", "dbeta"]
    print(f"{'op':<11}{'K':>4}{'BK':>4} {'dtype':<9}{'T':>5} {'refused':<8}" + "".join(f"{c:>9}" for c in cols)
          + "  det   label")
    for c in doc["cells"]:
        by = c.get("bypassed", {})
        errs = by.get("errors", {})
        ref = c.get("guarded", {}).get("refused")
        vals = "".join(f"{_fmt(errs.get(k, {}).get('rel_fro'), '.1e'):>9}" for k in cols)
        det = {True: "yes", False: "NO"}.get(by.get("bitwise_deterministic"), "-")
        if "errors" in by:
            lab = by["label"]
        else:
            lab = "error: " + (by.get("error") or c.get("error") or "")[:60]
        print(f"{c['op']:<11}{c['K']:>4}{c['BK_expected']:>4} {c['dtype']:<9}{c['T']:>5} {str(ref):<8}{vals}"
              f"  {det:<5} {lab}")
    if doc["comparisons"]:
        print("\n--- exposed (K=64, BK=64) vs control (K=128, BK=128): signature = rel >= "
              f"{F.WRONG_REL} and >= {F.CONTROL_FACTOR:g}x control ---")
        for r in doc["comparisons"]:
            if r["tensor"] == "o" and not r["signature"]:
                continue
            print(f"{r['op']:<11}{r['dtype']:<9}T={r['T']:<5}{r['tensor']:<6} exposed {_fmt(r['exposed_rel'])}  "
                  f"control {_fmt(r['control_rel'])}  x{r['ratio']:.1f}  {'SIGNATURE' if r['signature'] else ''}")
    print("\n=== verifier (profile strict) ===")
    print(f"{'pair':<32}{'status':<15}{'verdict':<15}{'CMP-02':<7}{'worst err/tol':>14}  failing gates")
    for v in doc["verifier"]:
        print(f"{v['id']:<32}{v['status']:<15}{v['verdict']:<15}{v['cmp02']['status']:<7}"
              f"{_fmt(v['cmp02'].get('worst_err_over_tol')):>14}  {','.join(v['failing_gates']) or '-'}"
              + (f"  [{v['error'][:80]}]" if v["status"] != "gated" else ""))
    if doc["skipped"]:
        print(f"\nskipped for the time budget: {len(doc['skipped'])} task(s): "
              + "; ".join(s["task"] for s in doc["skipped"][:8]))
    print("\n=== outcome ===")
    if not doc["outcome"]:
        print("no exposed verifier pair finished")
    for o in doc["outcome"]:
        print(f"{o['pair']:<32} ground truth: {o['ground_truth']:<12} battery: {o['battery']}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true", help="gdn only, T=64, bf16: exposed + control, 2 pairs")
    ap.add_argument("--budget-s", type=float, default=330.0, help="stop starting tasks past this many seconds")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=2)
    # H is in most of fla's autotune keys: the verifier pairs use H=2 too, so their candidate processes reuse
    # the autotune results of the direct cells (shared Triton cache) instead of tuning again.
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--oracle-device", choices=("cuda", "cpu"), default=None,
                    help="where the float64 oracle runs (default: cuda when available)")
    ap.add_argument("--skip-verifier", action="store_true")
    ap.add_argument("--only-verifier", action="store_true", help="run only the verifier pairs of the plan")
    ap.add_argument("--max-tasks", type=int, default=0, help="keep the first N tasks of the plan (0: all)")
    ap.add_argument("--task", action="append", default=[],
                    help="keep only tasks whose name contains this text (repeatable), e.g. "
                         "--task 'verify fla640/gdn/K128/bfloat16' for the control pair alone")
    ap.add_argument("--ignore-estimates", action="store_true",
                    help="start a task whenever budget is left (the caller's hard timeout bounds it)")
    ap.add_argument("--cpu-plumbing", action="store_true",
                    help="no GPU: run one direct cell and one pair on the CPU to exercise the plumbing only")
    ap.add_argument("--verify-timeout-s", type=float, default=300.0)
    args = ap.parse_args(argv)
    t_start = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu" and not args.cpu_plumbing:
        raise SystemExit("fla640 needs the GPU (pass --cpu-plumbing to exercise the script on a CPU)")
    oracle_device = args.oracle_device or device
    try:
        import fla
        import triton
    except Exception as exc:  # noqa: BLE001
        raise SystemExit(f"fla is not importable ({exc}); install the carried wheel, see docs/fla640.md") from exc
    F.check_guard_target()
    fla_info = {"version": getattr(fla, "__version__", None), "path": str(Path(fla.__file__).parent),
                "triton": triton.__version__, "torch": torch.__version__,
                "dispatch_disabled": bool(importlib.import_module("fla.backends")._DISPATCH_DISABLED),
                "guard_state": F.guard_state(), "guard": {"module": F.GUARD_MODULE, "function": F.GUARD_FUNCTION,
                                                          "flag": F.GUARD_FLAG},
                "triton_cache": SHARED_TRITON_CACHE, "oracle_device": oracle_device, "device": device}
    if device == "cuda":
        fla_info["gpu"] = torch.cuda.get_device_name(0)
        fla_info["capability"] = list(torch.cuda.get_device_capability(0))
    log(f"fla {fla_info['version']} triton {fla_info['triton']} torch {fla_info['torch']} on {device}; "
        f"guard {fla_info['guard_state']}")
    prov_extra = {"experiment": "fla640", "fla": fla_info["version"], "quick": args.quick,
                  "budget_s": args.budget_s, "seed": args.seed}
    provenance.write(out / "provenance.json", **prov_extra)
    spy = F.install_spy()

    tasks = F.cpu_plumbing_plan() if args.cpu_plumbing else F.plan(args.quick)
    if args.skip_verifier:
        tasks = [t for t in tasks if t["kind"] != "verify"]
    if args.only_verifier:
        tasks = [t for t in tasks if t["kind"] == "verify"]
    if args.task:
        tasks = [t for t in tasks if any(sub in F.task_name(t) for sub in args.task)]
    if args.max_tasks:
        tasks = tasks[: args.max_tasks]
    doc = {"schema": SCHEMA, "fla": fla_info, "thresholds": dict(F.THRESHOLDS),
           "shapes": {"B": args.batch, "H": args.heads}, "cells": [], "verifier": [], "skipped": [],
           "comparisons": [], "outcome": []}
    rows: list[dict] = []
    seen: set = set()

    def flush():
        doc["comparisons"] = F.comparisons(doc["cells"])
        doc["outcome"] = F.outcome(doc["cells"], doc["verifier"], doc["comparisons"])
        doc["seconds"] = round(time.perf_counter() - t_start, 1)
        (out / "direct.json").write_text(json.dumps(doc, indent=1, sort_keys=True, default=str) + "\n")
        if rows:
            from lethe.verifier.records import write_rows

            write_rows(rows, out / "verdicts.parquet")

    for t in tasks:
        name = F.task_name(t)
        left = args.budget_s - (time.perf_counter() - t_start)
        est = F.estimate_s(t, seen)
        if left < est and not (args.ignore_estimates and left > 0):
            doc["skipped"].append({"task": name, "left_s": round(left, 1), "estimate_s": est})
            log(f"skip {name}: {left:.0f}s left < estimate {est:.0f}s")
            continue
        log(f"start {name} ({left:.0f}s left)")
        t0 = time.perf_counter()
        if t["kind"] == "direct":
            try:
                cell = F.direct_cell(t["op"], t["K"], t["dtype"], t["T"], B=args.batch, H=args.heads,
                                     seed=args.seed, device=device, oracle_device=oracle_device, spy=spy)
            except Exception as exc:  # noqa: BLE001 - a broken cell is recorded, the run goes on
                cell = F.error_cell(t["op"], t["K"], t["dtype"], t["T"], exc)
            doc["cells"].append(cell)
            seen.add(F.kernel_key(t))
            by = cell.get("bypassed", {})
            log(f"done {name} in {time.perf_counter() - t0:.0f}s: refused={cell.get('guarded', {}).get('refused')} "
                f"worst={by.get('worst_grad')} {_fmt(by.get('worst_grad_rel'))} {by.get('label', by.get('error', ''))}")
        else:
            if device == "cuda":
                torch.cuda.empty_cache()
            try:
                row, summ = F.verify_pair(t["pair"], seed=args.seed, device=device,
                                          timeout_s=args.verify_timeout_s, triton_cache=SHARED_TRITON_CACHE)
                rows.append(row)
                doc["verifier"].append(summ)
                log(f"done {name} in {time.perf_counter() - t0:.0f}s: {summ['status']} {summ['verdict']} "
                    f"failing={summ['failing_gates']} CMP-02 worst err/tol "
                    f"{_fmt(summ['cmp02'].get('worst_err_over_tol'))}")
            except Exception as exc:  # noqa: BLE001
                doc["verifier"].append(F.harness_error_summary(t["pair"], exc))
                log(f"harness error in {name}: {exc}")
            seen.add(F.kernel_key(t))
        flush()

    flush()
    provenance.write(out / "provenance.json", **prov_extra, seconds=doc["seconds"],
                     tasks_run=len(doc["cells"]) + len(doc["verifier"]), tasks_skipped=len(doc["skipped"]))
    print_summary(doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
