"""Launch-configuration sweep of the GDN Triton kernels on the GPU: which num_warps / V-block is fastest.

The wrappers' launch tables (``triton_fwd.FWD_LAUNCH``, ``triton_bwd.BWD_LAUNCH``) were chosen from ahead-of-time
compiles (fewest register spills; experiments/gdn/triton_aot.py), never timed. This script times them: for each
kernel and each candidate configuration it runs the hybrid-tc forward and backward (bf16 inputs; the forward and
the intra-chunk backward are the Triton kernels every Triton-based backend shares) with that one table entry
changed, and

1. checks first that the configuration computes the same thing: output, final state and every gradient within
   ``--same-rel`` (relative to max|x|) of the default configuration's (a different warp count or V-block may
   reorder float32 sums, nothing else); a configuration that fails is recorded and not timed;
2. times the kernel itself from the device's kernel trace (torch.profiler, median over ``--reps`` profiled
   passes, rotating over two input sets after a warm-up) and the whole pass with CUDA events.

    LETHE_GIT_SHA=<sha> python3 experiments/gdn/triton_launch_sweep.py --out $OUT/sweep

Each configuration runs in its own process with a timeout (a launch configuration can fault: state_fwd_kernel
at BV=16 with 8 warps hit an illegal address on the H200, which poisons the CUDA context); its row records why.

Output: ``sweep.json`` (one row per kernel and configuration; the default marked) and ``provenance.json``.
A faster configuration found here changes the table only after the ladder has passed with it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from lethe.kernels.gdn.bench import bench_inputs
from lethe.kernels.gdn.fwd_options import WY_INVERSE_DEFAULT
from lethe.kernels.gdn.launch_tables import overridden, table_for

from lethe.perf.timing import time_ms

ROOT = Path(__file__).resolve().parents[2]

# candidates per kernel (each a partial override of the table entry); the default is always timed too
CANDIDATES = {
    "prep_fwd_kernel": [dict(num_warps=w) for w in (2, 4, 8)],
    "wy_fwd_kernel": [dict(num_warps=w) for w in (1, 2, 4, 8)],
    "wy_fwd_blocked_kernel": [dict(num_warps=w) for w in (2, 4, 8)],
    "wy_a_kernel": [dict(num_warps=w) for w in (4, 8)],
    "wy_inverse_kernel": [dict(num_warps=w) for w in (2, 4, 8, 16)],
    "wy_apply_kernel": [dict(num_warps=w) for w in (4, 8)],
    # BV 16 at 8 warps left out: an illegal address on the H200, twice (results/gdn/launch_sweep/README.md);
    # two pipeline stages fit its shared memory at BV 32 (139,776 B), three do not
    # KEND=1: Kend precomputed by the prep kernel (compare forward_kernels_ms, not only this kernel's time)
    "state_fwd_kernel": [dict(BV=bv, num_warps=w) for bv, w in ((16, 4), (32, 4), (32, 8), (64, 4), (64, 8))]
                        + [dict(BV=32, num_warps=w, num_stages=2) for w in (4, 8)]
                        + [dict(KEND=1), dict(KEND=1, BV=64)],
    "output_fwd_kernel": [dict(BV=bv, num_warps=w) for bv in (32, 64, 128) for w in (4, 8)]
                         + [dict(BV=64, NVL=2, num_warps=w) for w in (4, 8)] + [dict(BV=32, NVL=4, num_warps=4)],
    # SPLIT=0: the one-kernel reverse scan (its former entry: 8 warps), the local kernel then not launched; SPLIT
    # moves work between the two scan kernels, so compare scan_kernels_ms (both together), not only this kernel's
    "state_bwd_kernel": [dict(SPLIT=0, num_warps=8), dict(KEND=0), dict(num_warps=8)]
                        + [dict(BV=bv, num_warps=w) for bv, w in ((16, 4), (16, 2), (64, 4), (64, 8))],
    "state_bwd_local_kernel": [dict(num_warps=4), dict(BV=32, NVL=4, num_warps=8), dict(BV=64, NVL=1, num_warps=8),
                               dict(BV=32, NVL=1, num_warps=4)],
    "intra_bwd_kernel": [dict(BV=bv, num_warps=w) for bv in (16, 32, 64) for w in (4, 8)],
    "bwd_tail_kernel": [dict(num_warps=w) for w in (2, 4, 8)],
}
SPLIT_KERNELS = ("wy_a_kernel", "wy_inverse_kernel", "wy_apply_kernel")
SCAN_KERNELS = ("state_bwd_local_kernel", "state_bwd_kernel")
FORWARD_KERNELS = ("prep_fwd_kernel", "wy_fwd_kernel", "wy_fwd_blocked_kernel", *SPLIT_KERNELS, "state_fwd_kernel",
                   "output_fwd_kernel")


def max_rel(a, b) -> float:
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def run_pass(fn, leaves, do):
    """One forward and backward; returns (o, final_state, grads) detached."""
    import torch

    o, S = fn(leaves)
    grads = torch.autograd.grad((o.float() * do.float()).sum() + S.sum(), list(leaves.values()))
    return o.detach(), S.detach(), [g.detach() for g in grads]


def kernel_ms(prof, name: str) -> float | None:
    import torch

    ts = [e.time_range.end - e.time_range.start for e in prof.events()
          if e.device_type == torch.autograd.DeviceType.CUDA and e.name == name]
    return sum(ts) * 1e-3 if ts else None


def measure_one(kernel: str, override: dict, V: int, T: int, B: int, args) -> dict:
    """One kernel in one configuration on one cell: the default configuration's results first, then this
    configuration's, compared; timed only if they agree. Runs in its own process (see :func:`main`)."""
    import torch
    from lethe.kernels.gdn.autograd import chunk_family
    from torch.profiler import ProfilerActivity, profile

    H, K = 2, 128
    # a WY kernel is timed inside its own variant; every other kernel inside the default forward
    wy = {"wy_fwd_kernel": "rows", "wy_fwd_blocked_kernel": "blocked"}.get(
        kernel, "split" if kernel in SPLIT_KERNELS else WY_INVERSE_DEFAULT)
    default = dict(table_for(kernel)[kernel])
    row = {"kernel": kernel, "V": V, "T": T, "B": B, "H": H, "K": K, "dtype": "bfloat16", "wy_inverse": wy,
           "backend": args.backend,
           "config": {**default, **override}, "is_default": not override}
    sets = [bench_inputs("gdn", B, T, H, K, V, torch.bfloat16, torch.bfloat16, args.seed + i, "cuda") for i in range(2)]

    def fn(x):
        return chunk_family(x["q"], x["k"], x["v"], x["g"], x["b"], x["w"], member="gdn", backend=args.backend,
                            chunk=64, output_final_state=True, wy_inverse=wy)
    ref = run_pass(fn, *sets[0])  # the default configuration's results
    torch.cuda.synchronize()
    with overridden({kernel: override}):
        t0 = time.perf_counter()
        got = run_pass(fn, *sets[0])
        torch.cuda.synchronize()
        row["first_call_s"] = round(time.perf_counter() - t0, 2)
        pairs = list(zip([got[0], got[1], *got[2]], [ref[0], ref[1], *ref[2]], strict=True))
        row["max_rel_vs_default"] = max(max_rel(a, b) for a, b in pairs)
        row["bitwise_equal_to_default"] = all(torch.equal(a, b) for a, b in pairs)
        if not row["max_rel_vs_default"] <= args.same_rel:
            return {**row, "status": "differs"}
        for i in range(args.warmup):
            run_pass(fn, *sets[i % 2])
        torch.cuda.synchronize()
        walls = time_ms(lambda i: run_pass(fn, *sets[i % 2]), args.reps, cuda=True)
        kms, fwd_ms, scan_ms = [], [], []
        for i in range(args.profile_reps):
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                run_pass(fn, *sets[i % 2])
                torch.cuda.synchronize()
            kms.append(kernel_ms(prof, kernel))
            # all forward kernels together: an option may move work between kernels (KEND: prep writes what the
            # state kernel stops computing)
            fwd_ms.append(sum(kernel_ms(prof, k_) or 0.0 for k_ in FORWARD_KERNELS))
            scan_ms.append(sum(kernel_ms(prof, k_) or 0.0 for k_ in SCAN_KERNELS))  # the backward's scan, split or not
    row["fwd_bwd_wall_ms"] = round(statistics.median(walls), 4)
    row["forward_kernels_ms"] = round(statistics.median(fwd_ms), 4)
    row["scan_kernels_ms"] = round(statistics.median(scan_ms), 4)
    row["kernel_ms"] = round(statistics.median(kms), 4) if all(k is not None for k in kms) else None
    row["status"] = "ok"
    return row


def run_isolated(kernel: str, override: dict, V: int, T: int, B: int, args) -> dict:
    """:func:`measure_one` in a child process with a timeout: a configuration that faults (the first sweep hit
    an illegal address with state_fwd_kernel at BV=16, 8 warps, which poisons the CUDA context) or hangs costs
    its own row, nothing else."""
    import subprocess

    job = json.dumps({"kernel": kernel, "override": override, "V": V, "T": T, "B": B})
    cmd = [sys.executable, str(Path(__file__).resolve()), "--one", job, "--seed", str(args.seed),
           "--warmup", str(args.warmup), "--reps", str(args.reps), "--profile-reps", str(args.profile_reps),
           "--same-rel", str(args.same_rel), "--backend", args.backend, "--out", "-"]
    base = {"kernel": kernel, "V": V, "T": T, "B": B, "config": {**table_for(kernel)[kernel], **override},
            "is_default": not override}
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.config_timeout_s)
    except subprocess.TimeoutExpired:
        return {**base, "status": "timeout", "reason": f"no result within {args.config_timeout_s} s"}
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("ROW ")]
    if p.returncode != 0 or not lines:
        tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
        return {**base, "status": "error", "returncode": p.returncode, "reason": " | ".join(tail)[-400:]}
    return json.loads(lines[-1][4:])


def best_per_kernel(rows: list[dict]) -> dict:
    """Per kernel and cell: the default's kernel time and the fastest configuration that computes the same."""
    out = {}
    for r in rows:
        if r.get("status") != "ok" or r.get("kernel_ms") is None:
            continue
        key = f"{r['kernel']}|V{r['V']}|T{r['T']}"
        cur = out.setdefault(key, {"default_ms": None, "best_ms": None, "best_config": None})
        if r["is_default"]:
            cur["default_ms"] = r["kernel_ms"]
        if cur["best_ms"] is None or r["kernel_ms"] < cur["best_ms"]:
            cur["best_ms"], cur["best_config"] = r["kernel_ms"], r["config"]
    return out


def check_candidates(args) -> None:
    """Refuse unknown kernels and candidates with keys their launch entry does not have before any GPU time is
    spent: a misspelt key would time the default configuration under the candidate's name."""
    from lethe.kernels.gdn.launch_tables import check_overrides

    kernels = [k for k in args.kernels.split(",") if k]
    unknown = set(kernels) - set(CANDIDATES)
    if unknown:
        raise SystemExit(f"unknown kernels {sorted(unknown)}; expected from {sorted(CANDIDATES)}")
    try:
        given = json.loads(args.candidates) if args.candidates else None
    except json.JSONDecodeError as exc:
        raise SystemExit(f"--candidates is not JSON: {exc}") from None
    for kernel in kernels:
        for cand in given if given is not None else CANDIDATES[kernel]:
            try:
                check_overrides({kernel: cand})
            except KeyError as exc:
                raise SystemExit(f"--candidates: {exc}") from None


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--cells", default="128:4096:128,64:4096:128", help="d_v:T:B (H = 2, d_k = 128)")
    ap.add_argument("--kernels", default=",".join(CANDIDATES))
    ap.add_argument("--candidates", default=None,
                    help="JSON list of overrides timed instead of each listed kernel's CANDIDATES (the default "
                         "configuration is always timed too), e.g. '[{\"NVL\": 2}]'")
    ap.add_argument("--backend", choices=("hybrid-tc", "triton"), default="hybrid-tc",
                    help="backend of the timed pass; 'triton' needs no CuTe DSL and times the forward kernels the "
                         "same way (the backends share the Triton forward and intra-chunk backward)")
    ap.add_argument("--seed", type=int, default=20261129)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--reps", type=int, default=6)
    ap.add_argument("--profile-reps", type=int, default=3)
    ap.add_argument("--same-rel", type=float, default=4e-3,
                    help="largest relative difference (max|x - x_default| / max|x_default|) from the default "
                         "configuration's results accepted as 'the same computation'; the outputs and gradients "
                         "are bf16, so float32 sums in another order can flip a rounding: one bf16 step at the "
                         "largest magnitude is 2^-8 = 3.9e-3 (a tighter 1e-4 rejected every reordering on the H200)")
    ap.add_argument("--config-timeout-s", type=float, default=120)
    ap.add_argument("--budget-s", type=float, default=400)
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)  # child mode: one configuration, JSON job
    args = ap.parse_args(argv)
    if not args.one:
        check_candidates(args)
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("the launch sweep needs a CUDA GPU (the ahead-of-time view is experiments/gdn/triton_aot.py)")
    if args.one:
        job = json.loads(args.one)
        try:
            row = measure_one(job["kernel"], job["override"], job["V"], job["T"], job["B"], args)
        except Exception as exc:  # a configuration that does not compile or launch: its row says why
            row = {**job, "config": {**table_for(job["kernel"])[job["kernel"]], **job["override"]},
                   "is_default": not job["override"], "status": "error",
                   "reason": f"{type(exc).__name__}: {str(exc)[:300]}"}
        print("ROW " + json.dumps(row), flush=True)
        return row
    kernels = [k for k in args.kernels.split(",") if k]  # checked with the candidates above
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from lethe import provenance

    provenance.write(out / "provenance.json", command=" ".join(["python3", "experiments/gdn/triton_launch_sweep.py"]
                                                               + (argv or sys.argv[1:])),
                     experiment="gdn-triton-launch-sweep")
    start, rows = time.time(), []
    doc = {}
    for cell in args.cells.split(","):
        V, T, B = (int(x) for x in cell.split(":"))
        for kernel in kernels:
            default = table_for(kernel)[kernel]
            cands = json.loads(args.candidates) if args.candidates else CANDIDATES[kernel]
            configs = [{}] + [c for c in cands if any(default.get(k) != v for k, v in c.items())]
            for override in configs:
                if time.time() - start > args.budget_s:
                    row = {"kernel": kernel, "V": V, "T": T, "B": B, "config": {**default, **override},
                           "is_default": not override, "status": "skipped", "reason": "time budget"}
                else:
                    row = run_isolated(kernel, override, V, T, B, args)
                rows.append(row)
                print(f"[{time.time() - start:6.1f}s] V{V} T{T} {kernel} {row.get('config')}: {row.get('status')} "
                      f"kernel {row.get('kernel_ms')} ms, forward kernels {row.get('forward_kernels_ms')} ms, "
                      f"pass {row.get('fwd_bwd_wall_ms')} ms, "
                      f"diff {row.get('max_rel_vs_default', float('nan')):.1e} {row.get('reason', '')[:120]}",
                      flush=True)
                doc = {"schema": "lethe.gdn.launch_sweep/1", "device": torch.cuda.get_device_name(), "rows": rows,
                       "best": best_per_kernel(rows), "same_rel": args.same_rel,
                       "seconds": round(time.time() - start, 1)}
                (out / "sweep.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return doc


if __name__ == "__main__":
    main()
