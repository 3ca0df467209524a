"""The scalar-gate gated delta rule on its own kernels (kernels/gdn/scalar_gate.py) against fla's
``chunk_gated_delta_rule`` and our general kernels, on the H200: correctness first, then time.

Per cell (member sgdn = KDA with a per-head g; bf16; d_k 128; H 2; B*H*T = 2^20 head-tokens by default):

1. correctness, before anything is timed: o and every gradient of the first head of the first sequence against
   the float64 chunked reference (lethe.kernels.gdn.chunked through chunk_family(backend="torch"), itself pinned to the
   float64 oracle by the CPU tests), max-relative error per tensor, against the ladder's 5e-3 pin; the same for
   fla; the scalar path run twice on the same inputs must agree bit for bit; every output finite;
2. timing: backward alone and forward + backward, CUDA events, warm-up, median over rounds rotating over several
   input sets, for ``ours`` (chunk_family, backend "triton": the scalar-gate kernels), ``general`` (the same call with
   gate_form="general": our general per-channel kernels) where asked, and ``fla``;
3. where the time goes: the scalar path's kernels under torch.profiler (per kernel name, summed device time),
   forward and backward;
4. launch variants (``--variant name=kernel:KEY=VAL[,KEY=VAL]``, several): each variant's outputs and gradients
   checked against the default's (max-relative difference, and whether bitwise) before it is timed.

    FLA_DISABLE_BACKEND_DISPATCH=1 LETHE_GIT_SHA=<sha> python3 experiments/gdn/scalar_gate_bench.py --out $OUT/sg

Output: ``scalar_gate_bench.json`` (meta, one row per cell and implementation, the kernel breakdown, the variants)
and ``provenance.json``. The steps are lethe.kernels.gdn.scalar_gate_bench's. fla must be importable (the wheel
unpacked on PYTHONPATH) for the fla rows; without it they are recorded as skipped with the import error.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from lethe.kernels.gdn import scalar_gate_bench as SG

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = SG.SCHEMA


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--cells", default="128:4096,64:4096,128:1024,128:16384,128:32768",
                    help="d_v:T pairs, comma-separated")
    ap.add_argument("--impls", default="ours,fla", help="ours, fla, general (gate_form='general', Triton), "
                                                      "general-tc (the same on hybrid-tc; needs the CuTe DSL)")
    ap.add_argument("--control-cells", default="128:4096",
                    help="cells where the general-kernel controls (general, general-tc) are timed")
    ap.add_argument("--check-cells", default="128:4096,64:4096,128:1024,64:1024")
    ap.add_argument("--check-impls", default="", help="implementations checked against float64 (default: --impls)")
    ap.add_argument("--breakdown-cells", default="128:4096,64:4096")
    ap.add_argument("--variant", action="append", default=[],
                    help="name=kernel:KEY=VAL[,KEY=VAL][;kernel:...] launch variant of the scalar path")
    ap.add_argument("--variant-cells", default="128:4096")
    ap.add_argument("--variant-rel", type=float, default=1e-2)
    ap.add_argument("--head-tokens", type=int, default=2**20)
    # the checks run at the timed size by default: fla autotunes on its first call, and its tuning keys ignore the
    # batch, so a check at a small batch left fla timed with configurations tuned for that batch (the committed
    # calls checked at 2^14 head-tokens; fla's fwd+bwd medians there are 10-18% above kernel_profile's call18 at the
    # same cells, its backward's: the note of paper/tables/gdn_scalar_gate_time.md)
    ap.add_argument("--check-head-tokens", type=int, default=None, help="default: --head-tokens")
    ap.add_argument("--H", type=int, default=2)
    ap.add_argument("--K", type=int, default=128)
    ap.add_argument("--sets", type=int, default=3)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget-s", type=float, default=400)
    args = ap.parse_args(argv)
    args.check_head_tokens = args.check_head_tokens or args.head_tokens
    cfg = SG.BenchConfig.from_args(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.time()
    logf = open(out / "run.log", "a")

    def log(msg):
        line = f"[sg {time.strftime('%H:%M:%S')}] {msg}"
        print(line, flush=True)
        logf.write(line + "\n")
        logf.flush()

    cells = lambda s: [tuple(int(x) for x in c.split(":")) for c in s.split(",") if c]  # noqa: E731
    impls = args.impls.split(",")
    doc = {"schema": SCHEMA, "meta": {"argv": sys.argv[1:], "pin": SG.PIN, "gpu": torch.cuda.get_device_name(),
                                      "torch": torch.__version__}, "correctness": [], "timing": [], "breakdown": {},
           "variants": [], "skipped": []}
    try:
        import triton

        doc["meta"]["triton"] = triton.__version__
        import fla

        doc["meta"]["fla"] = getattr(fla, "__version__", "?")
    except Exception as exc:  # fla missing: its rows are skipped, the rest runs
        doc["meta"]["fla_import_error"] = repr(exc)
        impls = [i for i in impls if i != "fla"]
    from lethe.kernels.gdn.scalar_gate import SG_LAUNCH

    doc["meta"]["sg_launch"] = SG_LAUNCH

    def save():
        (out / "scalar_gate_bench.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")

    left = lambda: args.budget_s - (time.time() - t_start)  # noqa: E731
    for V, T in cells(args.check_cells):
        if left() < 20:
            doc["skipped"].append(f"check {V}:{T}: budget")
            continue
        check_impls = [i for i in (args.check_impls.split(",") if args.check_impls else impls) if i in impls]
        doc["correctness"] += SG.correctness(check_impls, V, T, cfg, log)
        save()
    ok = all(r["within_pin"] and r.get("bitwise_repeat", True) for r in doc["correctness"] if r["impl"] == "ours")
    doc["meta"]["ours_correct"] = ok
    if not ok:
        log("the scalar path failed its correctness check: nothing is timed")
        save()
        return doc
    for V, T in cells(args.cells):
        for impl in impls:
            if impl.startswith("general") and (V, T) not in cells(args.control_cells):
                continue
            if left() < 25:
                doc["skipped"].append(f"time {impl} {V}:{T}: budget")
                continue
            try:
                row = SG.time_impl(impl, V, T, cfg)
            except Exception as exc:
                row = {"impl": impl, "V": V, "T": T, "error": repr(exc)[:300]}
            doc["timing"].append(row)
            log(f"time {impl:<8} V={V} T={T}: fwd {row.get('fwd_ms')} bwd {row.get('bwd_ms')} "
                f"fwd+bwd {row.get('fwd_bwd_ms')} ms")
            save()
    for V, T in cells(args.breakdown_cells):
        if left() < 15:
            doc["skipped"].append(f"breakdown {V}:{T}: budget")
            continue
        doc["breakdown"][f"{V}:{T}"] = kb = SG.kernel_breakdown(V, T, cfg)
        log(f"breakdown V={V} T={T}: fwd {kb['fwd_sum_ms']} ms, bwd {kb['bwd_sum_ms']} ms")
        for region in ("fwd", "bwd"):
            for n, ms in list(kb[region].items())[:8]:
                log(f"   {region} {ms:8.3f} ms  {n[:90]}")
        save()
    for V, T in cells(args.variant_cells) if args.variant else []:
        if left() < 30:
            doc["skipped"].append(f"variants {V}:{T}: budget")
            continue
        doc["variants"] += SG.variants([s for s in args.variant], V, T, cfg, log)
        save()
    doc["meta"]["seconds"] = round(time.time() - t_start, 1)
    save()
    from lethe import provenance

    provenance.write(out / "provenance.json", experiment="gdn_scalar_gate_bench")
    log(f"done in {doc['meta']['seconds']} s")
    return doc


if __name__ == "__main__":
    main()
