"""Native K1 and K2 on the H200: correctness first (torch code, float64 oracle, poison, bitwise determinism),
then timing.

Run on the device machine from the repository root (CuTe DSL on PYTHONPATH, see docs/native.md):

    LETHE_GIT_SHA=<sha> python3 experiments/native/bench.py --out $OUT/native [--stages ...] [--budget-s 540]
        [--merge results/native/bench.json]

Stages (``--stages``, comma-separated, default all, run in this order; each guarded: a failure is recorded
under ``<stage>_error`` and the script moves on, so one call returns everything it could measure):

1. ``ceilings``: device-to-device copy bandwidth and an fp32 (non-TF32) matmul rate, measured here;
2. ``correctness`` (K1): on real GDN data (chunked forward of random bf16 inputs, full member with erase, and
   the no-erase case): native K1 vs the torch K1 (``chunked.reverse_state_scan``) on the same float32 ctx, both
   vs the float64 oracle (the chunked path run in float64 on the upcast inputs); outputs poisoned with NaN
   first; three native runs compared bit for bit; the end-to-end native backward (now K1 and K2 native, see
   ``native_backend`` in each row) vs the float64 recurrence's autograd;
3. ``k2_correctness``: native K2 (``api.native_wy_vjp``, sm_90a) vs the torch K2 (``chunked.wy_vjp_torch``) on
   the same real float32 operands, both vs float64 on the same operands and vs the float64 pipeline;
   NaN-poisoned outputs, three runs compared bit for bit, dA zero on and above the diagonal;
4. ``k2_timing``: K2 alone, native vs torch on the same synthetic operands (K2 has no data-dependent control
   flow; operands random, T unit lower triangular), d_k=128, d_v in {64,128}, T in {1k,4k,16k}, B*H as for K1;
   CUDA events, warm-up, median over repetitions rotating between two input sets; floor from counted bytes and
   FLOPs;
5. ``backward_timing``: the whole chunked backward on real data: torch, native K1 only, native K1 + K2 (the
   ``backend="native"`` path); B*H capped so the torch path's [C, C, K] pairwise tensors fit in memory;
6. ``timing`` (K1): native (tile variants) vs Triton K1 (``triton_bwd.state_bwd_kernel``) vs torch K1, on
   synthetic operands, d_k=128, d_v in {64,128}, T in {1k,4k,16k}; the roofline floor.

``--budget-s``: wall-clock budget; a stage or timing row that would start after it is skipped and recorded as
such (the device command limit is 600 s). ``--merge FILE``: start from an earlier bench.json, so keys of stages
not run now are kept (its provenance is embedded under ``merged_from``). ``--dry-run``: on the CPU, with the
native kernels replaced by the torch code and tiny shapes, to exercise the script's plumbing (no numbers).

Writes ``bench.json`` (after every stage and timing row) and ``provenance.json`` under --out, prints progress
lines (``[t=..s] ...``) and a short summary last.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]

from lethe.kernels.gdn import chunked

from lethe.perf.timing import time_ms

C = 64
K = 128
OUTDIR = None
DEV = "cuda"  # the dry run on a CPU sets this to "cpu" to exercise the torch-only parts
START = time.perf_counter()
BUDGET_S = None  # --budget-s


def progress(msg):
    print(f"[t={time.perf_counter() - START:6.1f}s] {msg}", flush=True)


def over_budget():
    return BUDGET_S is not None and time.perf_counter() - START > BUDGET_S


def save(out):
    if OUTDIR is not None:
        (OUTDIR / "bench.json").write_text(json.dumps(out, indent=1, sort_keys=True, default=str))


def within_bf16_model(row: dict, name: str, got, ref, model) -> bool:
    """Record ``name``'s error against float64 and that of the float64 replay of the kernel's own bf16 roundings,
    and judge the tensor-core kernels' criterion: no further from float64 than 2x their model + 1e-4."""
    row[f"{name}_rel_vs_f64"] = rel(got, ref)
    row[f"{name}_bf16_model_rel_vs_f64"] = rel(model, ref)
    return row[f"{name}_rel_vs_f64"] <= 2 * row[f"{name}_bf16_model_rel_vs_f64"] + 1e-4


def rel(a, b):
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-300))


def events_median(fn, sets, reps=10, warm=2):
    """(median, min, max) milliseconds of ``fn(s)`` over ``reps`` calls rotating through ``sets`` (after ``warm``
    calls), from the one timing runner (wall clock in a CPU dry run, only to exercise the plumbing)."""
    times = time_ms(lambda i: fn(sets[i % len(sets)]), reps, cuda=DEV != "cpu", warmup=warm)
    return statistics.median(times), min(times), max(times)


def ceilings():
    n = 1 << (16 if DEV == "cpu" else 28)  # 1 GiB of float32 each way (tiny in a dry run)
    x = torch.randn(n, device=DEV)
    y = torch.empty_like(x)
    med, _, _ = events_median(lambda _: y.copy_(x), [0], reps=10)
    bw = 2 * n * 4 / (med * 1e-3)
    torch.backends.cuda.matmul.allow_tf32 = False
    m = 256 if DEV == "cpu" else 8192
    a = torch.randn(m, m, device=DEV)
    bm = torch.randn(m, m, device=DEV)
    med2, _, _ = events_median(lambda _: a @ bm, [0], reps=5)
    return {"copy_GBps": bw / 1e9, "fp32_matmul_TFLOPs": 2 * m**3 / (med2 * 1e-3) / 1e12}


def gdn_inputs(B, H, T, V, dtype, seed, erase=True):
    g = torch.Generator(device=DEV).manual_seed(seed)

    def r(*s):
        return torch.randn(*s, device=DEV, generator=g)

    q = r(B, T, H, K)
    k = torch.nn.functional.normalize(r(B, T, H, K), dim=-1)
    v = r(B, T, H, V)
    gate = -torch.nn.functional.softplus(r(B, T, H, K) - 4.0)  # log-decays, mostly small, never positive
    b = torch.rand(B, T, H, K, device=DEV, generator=g) if erase else None
    w = torch.rand(B, T, H, V, device=DEV, generator=g)
    do = r(B, T, H, V)
    dS = r(B, H, K, V)
    cast = [x if x is None else x.to(dtype) for x in (q, k, v, gate, b, w, do)]
    return (*cast, dS)


def check_correctness(out):
    from lethe.kernels.gdn.native.api import k1_launch, native_reverse_state_scan

    res = []
    for erase in (True, False):
        for V in (64, 128):
            B, H, T = 2, 4, 1000  # T not a multiple of C: the padded tail chunk is exercised
            q, k, v, gt, b, w, do, dS = gdn_inputs(B, H, T, V, torch.bfloat16, seed=V + erase)
            _, _, ctx = chunked.chunk_fwd(q, k, v, gt, b, w, None, C, None)
            do_c = chunked._to_chunks(do, C, torch.float32)
            ref32 = chunked.reverse_state_scan(do_c, ctx, dS)
            up = [None if x is None else x.double() for x in (q, k, v, gt, b, w)]
            _, _, ctx64 = chunked.chunk_fwd(*up, None, C, None)
            ref64 = chunked.reverse_state_scan(chunked._to_chunks(do.double(), C, torch.float64), ctx64, dS.double())
            Bh = B * H
            N = do_c.shape[2]
            for BV, split in ((32, 2), (64, 2), (16, 1)):
                flat = [ctx["P"].reshape(Bh, N, C, C), ctx["Kend"].reshape(Bh, N, C, K), ctx["Qg"].reshape(Bh, N, C, K),
                        None if ctx["Wm"] is None else ctx["Wm"].reshape(Bh, N, C, K), ctx["GC"].reshape(Bh, N, K),
                        do_c.reshape(Bh, N, C, V), dS.reshape(Bh, K, V)]
                flat = [None if x is None else x.contiguous() for x in flat]
                runs = [k1_launch(*flat, BV=BV, split=split, poison=True) for _ in range(3)]
                torch.cuda.synchronize()
                nat = [x.view(*r.shape) for x, r in zip(runs[0], ref32, strict=True)]
                row = dict(erase=erase, V=V, T=T, BV=BV, split=split,
                           nan_free=all(bool(torch.isfinite(x).all()) for x in runs[0]),
                           bitwise_3runs=all(torch.equal(a, b) for r in runs[1:] for a, b in zip(runs[0], r, strict=True)))
                for name, a, r32, r64 in zip(("dS_next", "ddelta", "dS0"), nat, ref32, ref64, strict=True):
                    row[f"{name}_rel_vs_torch32"] = rel(a, r32)
                    row[f"{name}_rel_vs_f64"] = rel(a, r64)
                    row[f"{name}_torch32_rel_vs_f64"] = rel(r32, r64)
                res.append(row)
            # the drop-in wrapper returns the chunked shapes
            w_out = native_reverse_state_scan(do_c, ctx, dS)
            assert all(a.shape == r.shape for a, r in zip(w_out, ref32, strict=True))
    out["k1_correctness"] = res
    # end to end: the native backend through the family's autograd vs the float64 recurrence
    from lethe.kernels.gdn import reference
    from lethe.kernels.gdn.autograd import chunk_family
    from lethe.kernels.gdn.native.backend import register

    register()
    e2e = []
    for dtype in (torch.float32, torch.bfloat16):
        B, H, T, V = 1, 2, 300, 64
        q, k, v, gt, b, w, do, _ = gdn_inputs(B, H, T, V, dtype, seed=7)
        leaves = [x.detach().clone().requires_grad_(True) for x in (q, k, v, gt, b, w)]
        o, _ = chunk_family(*leaves, member="gdn", backend="native")
        o.backward(do)
        g_nat = [x.grad for x in leaves]
        l64 = [x.detach().double().requires_grad_(True) for x in (q, k, v, gt, b, w)]
        o64 = reference.recurrent_gdn(*l64)
        o64 = o64[0] if isinstance(o64, tuple) else o64
        o64.backward(do.double())
        lt = [x.detach().clone().requires_grad_(True) for x in (q, k, v, gt, b, w)]
        ot, _ = chunk_family(*lt, member="gdn", backend="torch")
        ot.backward(do)
        from lethe.kernels.gdn.native.backend import NATIVE

        row = {"dtype": str(dtype), "native_backend": NATIVE.name}
        for name, a, t, r in zip("q k v g b w".split(), g_nat, [x.grad for x in lt], [x.grad for x in l64], strict=True):
            row[f"d{name}_native_rel_vs_f64"] = rel(a, r)
            row[f"d{name}_torch_rel_vs_f64"] = rel(t, r)
        e2e.append(row)
    out["end_to_end"] = e2e


def k1_counts(BH, N, V, erase=True):
    """FLOPs and the fewest bytes of one K1 call: each operand read once, each output written once (float32)."""
    per_chunk = 2 * (C * C * V + C * K * V + K * C * V + (K * C * V if erase else 0)) + K * V
    reads = N * (C * C + (3 if erase else 2) * C * K + K + C * V) + K * V
    writes = N * (K * V + C * V) + K * V
    return BH * N * per_chunk, 4 * BH * (reads + writes)


def synth_k1(BH, N, V, seed):
    g = torch.Generator(device=DEV).manual_seed(seed)

    def r(*s, scale=1.0):
        return torch.randn(*s, device=DEV, generator=g) * scale

    P = torch.tril(r(BH, N, C, C, scale=0.1)).contiguous()
    Kend = r(BH, N, C, K, scale=0.05)
    Qg = r(BH, N, C, K, scale=0.05)
    Wm = r(BH, N, C, K, scale=0.05)
    GC = torch.rand(BH, N, K, device=DEV, generator=g) * 0.1 + 0.9
    dO = r(BH, N, C, V)
    dSF = r(BH, K, V)
    return P, Kend, Qg, Wm, GC, dO, dSF


def synth_triton(BH, N, V, seed):
    g = torch.Generator(device=DEV).manual_seed(seed)
    TP = N * C
    q = torch.randn(1, BH, TP, K, device=DEV, generator=g)
    k = torch.nn.functional.normalize(torch.randn(1, BH, TP, K, device=DEV, generator=g), dim=-1)
    lg = -torch.rand(1, BH, N, C, K, device=DEV, generator=g) * 0.05
    gam = lg.cumsum(-2).reshape(1, BH, TP, K).contiguous()
    W = torch.randn(1, BH, TP, K, device=DEV, generator=g) * 0.05
    dO = torch.randn(1, BH, TP, V, device=DEV, generator=g)
    dSF = torch.randn(1, BH, K, V, device=DEV, generator=g)
    return q, k, gam, W, dO, dSF


def time_configs(out, quick):
    from lethe.kernels.gdn.native.api import k1_launch
    from lethe.kernels.gdn.triton_bwd import state_bwd_kernel

    ceil = out.get("ceilings", {})
    rows = []
    out["timing"] = rows  # filled in place and saved after each row, so a run cut short keeps what it measured
    Ts = (1024, 4096) if quick else (1024, 4096, 16384)
    for V in (64, 128):
        for T in Ts:
            N = T // C
            BH = 128 if T <= 4096 else 64
            if over_budget():
                rows.append(dict(T=T, V=V, BH=BH, skipped="budget"))
                continue
            progress(f"K1 timing T={T} d_v={V} B*H={BH}")
            flops, nbytes = k1_counts(BH, N, V)
            row = dict(T=T, V=V, K=K, C=C, BH=BH, flops=flops, bytes=nbytes)
            if ceil:
                row["floor_ms"] = max(nbytes / (ceil["copy_GBps"] * 1e9), flops / (ceil["fp32_matmul_TFLOPs"] * 1e12)) * 1e3
            sets = [synth_k1(BH, N, V, s) for s in (1, 2)]
            for BV, split in ((32, 2), (64, 2), (16, 1)):
                try:
                    t0 = time.perf_counter()
                    k1_launch(*sets[0], BV=BV, split=split)
                    torch.cuda.synchronize()
                    comp = time.perf_counter() - t0
                    med, lo, hi = events_median(lambda s, BV=BV, split=split: k1_launch(*s, BV=BV, split=split), sets)
                    row[f"native_bv{BV}_s{split}_ms"] = med
                    row[f"native_bv{BV}_s{split}_spread_ms"] = [lo, hi]
                    row[f"native_bv{BV}_s{split}_first_call_s"] = comp
                except Exception as e:  # noqa: BLE001 - record and go on
                    row[f"native_bv{BV}_s{split}_error"] = repr(e)[:300]
            # torch K1 on the same operands (chunked layout)
            try:
                def torch_k1(s):
                    P, Kend, Qg, Wm, GC, dO, dSF = s
                    ctx = dict(P=P[None], Kend=Kend[None], Qg=Qg[None], GC=GC[None], Wm=Wm[None])
                    return chunked.reverse_state_scan(dO[None], ctx, dSF[None])
                med, lo, hi = events_median(torch_k1, sets, reps=5, warm=1)
                row["torch_ms"] = med
                # agreement on the timed operands too (random, not zeros)
                a = k1_launch(*sets[0])
                rt = torch_k1(sets[0])
                row["native_vs_torch_rel_dS0"] = rel(a[2], rt[2][0])
                row["native_vs_torch_rel_dd"] = rel(a[1], rt[1][0])
            except Exception as e:  # noqa: BLE001
                row["torch_error"] = repr(e)[:300]
            del sets
            tsets = [synth_triton(BH, N, V, s) for s in (3, 4)]
            BVt = min(V, 64)

            for prec in ("ieee", "tf32"):
                try:
                    def tk(s, prec=prec, BH=BH, N=N, V=V, BVt=BVt):
                        q, k, gam, W, dO, dSF = s
                        dSn = torch.empty(1, BH, N, K, V, device=DEV)
                        dd = torch.empty_like(dO)
                        dS0 = torch.empty_like(dSF)
                        state_bwd_kernel[(BH, V // BVt)](q, k, gam, W, dO, dSF, dSn, dd, dS0, K**-0.5, NT=N, K=K,
                                                         V=V, C=C, BV=BVt, HAS_ERASE=True, HAS_DSF=True, PREC=prec)
                    med, lo, hi = events_median(tk, tsets)
                    row[f"triton_{prec}_ms"] = med
                except Exception as e:  # noqa: BLE001
                    row[f"triton_{prec}_error"] = repr(e)[:300]
            del tsets
            nat = [v for k_, v in row.items() if k_.startswith("native_") and k_.endswith("_ms") and "spread" not in k_]
            if nat:
                row["native_best_ms"] = min(nat)
                if "floor_ms" in row:
                    row["native_best_over_floor"] = row["native_best_ms"] / row["floor_ms"]
                for ref in ("triton_ieee_ms", "triton_tf32_ms", "torch_ms"):
                    if ref in row:
                        row[f"speedup_vs_{ref[:-3]}"] = row[ref] / row["native_best_ms"]
            rows.append(row)
            print(json.dumps(row), flush=True)
            if OUTDIR is not None:
                (OUTDIR / "bench.json").write_text(json.dumps(out, indent=1, sort_keys=True, default=str))
            torch.cuda.empty_cache()


# ---------------------------------------------------------------- K2 (WY / triangular-inverse VJP)

def k2_impls():
    """(native K2 on flattened [L, ...] operands, native drop-in for wy_vjp_torch, native K1 drop-in,
    native backward). The dry run (CPU) substitutes the torch code, so only the plumbing is exercised."""
    if DEV == "cpu":
        def launch(dd, Hs, Tm, Xe, uc, poison=False):
            return chunked.wy_vjp_torch(dd, dict(Hs=Hs, Tm=Tm, Xe=Xe, uc=uc))

        def backward(do, ctx, dS):
            return chunked.chunk_bwd(do, ctx, dS)
        return launch, chunked.wy_vjp_torch, chunked.reverse_state_scan, backward
    from lethe.kernels.gdn.native.api import k2_launch, native_reverse_state_scan, native_wy_vjp
    from lethe.kernels.gdn.native.backend import NATIVE

    return k2_launch, native_wy_vjp, native_reverse_state_scan, NATIVE.backward


def _upcast_ctx(ctx):
    c64 = {k_: (x.double() if torch.is_tensor(x) and x.is_floating_point() else x) for k_, x in ctx.items()}
    c64["dtype"] = torch.float64
    return c64


def check_k2_correctness(out):
    """Native K2 vs torch K2 on the same float32 operands of real GDN data; both vs float64 (same operands, and
    the float64 pipeline: forward, K1 and K2 in float64 on the upcast inputs); poison; 3 runs bitwise."""
    _, native_wy, _, native_bwd = k2_impls()
    res = []
    out["k2_correctness"] = res
    B, H, T = (1, 2, 200) if DEV == "cpu" else (2, 4, 1000)  # T not a multiple of C: padded tail chunk
    for V in (64, 128):
        progress(f"K2 correctness d_v={V}")
        q, k, v, gt, b, w, do, dS = gdn_inputs(B, H, T, V, torch.bfloat16, seed=40 + V)
        _, _, ctx = chunked.chunk_fwd(q, k, v, gt, b, w, None, C, None)
        do_c = chunked._to_chunks(do, C, torch.float32)
        dd = chunked.reverse_state_scan(do_c, ctx, dS)[1]
        ref32 = chunked.wy_vjp_torch(dd, ctx)
        ref64s = chunked.wy_vjp_torch(dd.double(), _upcast_ctx(ctx))
        up = [x.double() for x in (q, k, v, gt, b, w)]
        _, _, ctx64 = chunked.chunk_fwd(*up, None, C, None)
        dd64 = chunked.reverse_state_scan(chunked._to_chunks(do.double(), C, torch.float64), ctx64, dS.double())[1]
        ref64p = chunked.wy_vjp_torch(dd64, ctx64)
        runs = [native_wy(dd, ctx, **({} if DEV == "cpu" else {"poison": True})) for _ in range(3)]
        if DEV != "cpu":
            torch.cuda.synchronize()
        row = dict(V=V, T=T, B=B, H=H, chunks=int(dd.shape[0] * dd.shape[1] * dd.shape[2]),
                   nan_free=all(bool(torch.isfinite(x).all()) for x in runs[0]),
                   bitwise_3runs=all(torch.equal(x, y) for r in runs[1:] for x, y in zip(runs[0], r, strict=True)),
                   dA_upper_zero=bool((torch.triu(runs[0][2]) == 0).all()))
        for name, a, r32, r64s, r64p in zip(("dXe", "du", "dA"), runs[0], ref32, ref64s, ref64p, strict=True):
            row[f"{name}_rel_vs_torch32"] = rel(a, r32)
            row[f"{name}_rel_vs_f64_same_operands"] = rel(a, r64s)
            row[f"{name}_torch32_rel_vs_f64_same_operands"] = rel(r32, r64s)
            row[f"{name}_rel_vs_f64_pipeline"] = rel(a, r64p)
            row[f"{name}_torch32_rel_vs_f64_pipeline"] = rel(r32, r64p)
        # the whole backward with native K1 + K2 vs the torch backward, float32 inputs (float32 gradients)
        _, _, ctx32 = chunked.chunk_fwd(*[x.float() for x in (q, k, v, gt, b, w)], None, C, None)
        nat = native_bwd(do.float(), ctx32, dS)
        ref = chunked.chunk_bwd(do.float(), ctx32, dS)
        for name, a, r in zip("q k v g b w".split(), nat[:6], ref[:6], strict=True):
            row[f"bwd_d{name}_native_rel_vs_torch32"] = rel(a, r)
        row["passed"] = bool(row["nan_free"] and row["bitwise_3runs"] and row["dA_upper_zero"]
                             and max(row[f"{n}_rel_vs_torch32"] for n in ("dXe", "du", "dA")) < 1e-5)
        res.append(row)
        progress("  " + json.dumps({k_: (f"{v_:.2e}" if isinstance(v_, float) else v_) for k_, v_ in row.items()}))
        save(out)


def k2_counts(L, V):
    """FLOPs of one K2 call and its fewest bytes (each operand read once, each output written once, float32)."""
    from lethe.kernels.gdn.native.k2_hopper_plan import flops_per_chunk

    reads = C * V + K * V + C * C + C * K + C * V
    writes = C * K + C * V + C * C
    return L * flops_per_chunk(K, V, C), 4 * L * (reads + writes)


def synth_k2(L, V, seed):
    """Random K2 operands of the right shapes and magnitudes: dd, Hs, T (unit lower triangular), Xe, u."""
    g = torch.Generator(device=DEV).manual_seed(seed)

    def r(*s_, scale=1.0):
        return torch.randn(*s_, device=DEV, generator=g) * scale

    dd = r(L, C, V)
    Hs = r(L, K, V, scale=0.1)
    Tm = (torch.eye(C, device=DEV) + torch.tril(r(L, C, C, scale=0.05), -1)).contiguous()
    Xe = r(L, C, K, scale=0.05)
    uc = r(L, C, V)
    return dd, Hs, Tm, Xe, uc


def time_k2(out, quick):
    """K2 alone: native vs torch on the same operands; floor from counted bytes and FLOPs."""
    launch, _, _, _ = k2_impls()
    ceil = out.get("ceilings", {})
    rows = []
    out["k2_timing"] = rows
    Ts = (128, 256) if DEV == "cpu" else ((1024, 4096) if quick else (1024, 4096, 16384))
    for V in (64, 128):
        for T in Ts:
            N = T // C
            BH = 2 if DEV == "cpu" else (128 if T <= 4096 else 64)
            L = BH * N
            if over_budget():
                rows.append(dict(T=T, V=V, BH=BH, skipped="budget"))
                continue
            progress(f"K2 timing T={T} d_v={V} B*H={BH} chunks={L}")
            flops, nbytes = k2_counts(L, V)
            row = dict(T=T, V=V, K=K, C=C, BH=BH, chunks=L, flops=flops, bytes=nbytes)
            if ceil:
                row["floor_ms"] = max(nbytes / (ceil["copy_GBps"] * 1e9),
                                      flops / (ceil["fp32_matmul_TFLOPs"] * 1e12)) * 1e3
            try:
                sets = [synth_k2(L, V, sd) for sd in (1, 2)]
            except Exception as e:  # noqa: BLE001
                row["setup_error"] = repr(e)[:300]
                rows.append(row)
                save(out)
                continue
            try:
                t0 = time.perf_counter()
                launch(*sets[0])
                if DEV != "cpu":
                    torch.cuda.synchronize()
                row["native_first_call_s"] = time.perf_counter() - t0
                med, lo, hi = events_median(lambda s_: launch(*s_), sets)
                row["native_ms"], row["native_spread_ms"] = med, [lo, hi]
            except Exception as e:  # noqa: BLE001 - record and go on
                row["native_error"] = repr(e)[:300]

            def torch_k2(s_):
                dd, Hs, Tm, Xe, uc = s_
                return chunked.wy_vjp_torch(dd, dict(Hs=Hs, Tm=Tm, Xe=Xe, uc=uc))
            try:
                med, lo, hi = events_median(torch_k2, sets, reps=5, warm=1)
                row["torch_ms"], row["torch_spread_ms"] = med, [lo, hi]
            except Exception as e:  # noqa: BLE001
                row["torch_error"] = repr(e)[:300]
            try:  # agreement on the timed operands too
                a_ = launch(*sets[0])
                t_ = torch_k2(sets[0])
                for name, x, y in zip(("dXe", "du", "dA"), a_, t_, strict=True):
                    row[f"native_vs_torch_rel_{name}"] = rel(x, y)
            except Exception as e:  # noqa: BLE001
                row["agreement_error"] = repr(e)[:300]
            if "native_ms" in row:
                row["native_TFLOPs"] = flops / (row["native_ms"] * 1e-3) / 1e12
                if "floor_ms" in row:
                    row["native_over_floor"] = row["native_ms"] / row["floor_ms"]
                if "torch_ms" in row:
                    row["speedup_vs_torch"] = row["torch_ms"] / row["native_ms"]
            rows.append(row)
            progress("  " + json.dumps({k_: (round(v_, 4) if isinstance(v_, float) else v_) for k_, v_ in row.items()
                                        if k_.endswith(("_ms", "_floor", "torch", "TFLOPs"))}))
            save(out)
            del sets
            if DEV != "cpu":
                torch.cuda.empty_cache()


def _backward_row(row, native_scan, native_wy):
    """Time the three backward variants on one configuration (fills ``row``); locals freed on return."""
    q, k, v, gt, b, w, do, dS = gdn_inputs(1, row["BH"], row["T"], row["V"], torch.float32, seed=90 + row["V"])
    _, _, ctx = chunked.chunk_fwd(q, k, v, gt, b, w, None, C, None)
    variants = {
        "torch": lambda _: chunked.chunk_bwd(do, ctx, dS),
        "native_k1": lambda _: chunked.chunk_bwd(do, ctx, dS, scan=native_scan),
        "native_k1k2": lambda _: chunked.chunk_bwd(do, ctx, dS, scan=native_scan, wy_vjp=native_wy),
    }
    for name, fn in variants.items():
        try:
            med, lo, hi = events_median(fn, [0], reps=5, warm=1)
            row[f"{name}_ms"], row[f"{name}_spread_ms"] = med, [lo, hi]
        except Exception as e:  # noqa: BLE001
            row[f"{name}_error"] = repr(e)[:300]
    ref = variants["torch"](0)
    nat = variants["native_k1k2"](0)
    row["native_k1k2_vs_torch_max_rel"] = max(rel(a_, r_) for a_, r_ in zip(nat, ref, strict=True) if r_ is not None)
    for name in ("native_k1", "native_k1k2"):
        if f"{name}_ms" in row and "torch_ms" in row:
            row[f"speedup_{name}_vs_torch"] = row["torch_ms"] / row[f"{name}_ms"]


def time_backward(out, quick):
    """The whole chunked backward on real data (float32): torch, native K1 only, native K1 + K2."""
    _, native_wy, native_scan, _ = k2_impls()
    rows = []
    out["backward_timing"] = rows
    Ts = (128, 256) if DEV == "cpu" else ((1024, 4096) if quick else (1024, 4096, 16384))
    max_chunks = 4096  # the torch path holds [chunks, C, C, K] float32 pairwise tensors (2 MiB per chunk)
    for V in (64, 128):
        for T in Ts:
            N = T // C
            BH = 2 if DEV == "cpu" else min(128 if T <= 4096 else 64, max_chunks // N)
            if over_budget():
                rows.append(dict(T=T, V=V, BH=BH, skipped="budget"))
                continue
            progress(f"backward timing T={T} d_v={V} B*H={BH}")
            row = dict(T=T, V=V, K=K, C=C, BH=BH, chunks=BH * N)
            try:
                _backward_row(row, native_scan, native_wy)
            except Exception as e:  # noqa: BLE001
                row["error"] = repr(e)[:300]
            rows.append(row)
            progress("  " + json.dumps({k_: (round(v_, 4) if isinstance(v_, float) else v_) for k_, v_ in row.items()
                                        if k_.endswith("_ms") or k_.startswith("speedup") or k_.endswith("rel")}))
            save(out)
            if DEV != "cpu":
                torch.cuda.empty_cache()


# ---------------------------------------------------------------- K1 on Hopper tensor cores (TMA + wgmma)

def k1_wgmma_impl():
    """The tensor-core K1 on flattened [L, ...] operands; the dry run (CPU) substitutes its float64 replay with
    the kernel's bf16 roundings (lethe.kernels.gdn.native.k1_scan_model), so only the plumbing is exercised."""
    if DEV != "cpu":
        from lethe.kernels.gdn.native.api import k1_wgmma_launch

        return k1_wgmma_launch
    from lethe.kernels.gdn.native.k1_scan_model import model

    def launch(P, Kend, Qg, Wm, GC, dO, dSF, n_chunks, split=False):
        L = Kend.shape[0]
        BH = L // n_chunks

        def u(x):
            return x.reshape(1, BH, n_chunks, *x.shape[1:])
        dSN, dd, dS0 = model(u(P), u(Kend), u(Qg), None if Wm is None else u(Wm), u(GC), u(dO),
                             None if dSF is None else dSF[None], operand_dtype=torch.bfloat16, split=split)
        return dSN.reshape(L, *dSN.shape[3:]), dd.reshape(L, *dd.shape[3:]), dS0[0]
    return launch


def k1_wgmma_stage(out, quick):
    """Correctness first (real GDN data, erase on and off: vs float64 K1 within 2x the float64 replay of the
    kernel's own bf16 roundings + 1e-4, finite, bitwise over 3 runs), then timing against the SIMT K1 and the
    torch K1 on the K1 timing shapes, with the floor counted for bf16 operands."""
    from lethe.kernels.gdn.native.k1_scan_model import model

    launch = k1_wgmma_impl()
    corr = []
    out["k1_wgmma_correctness"] = corr
    B, H, T = (1, 2, 200) if DEV == "cpu" else (2, 4, 1000)
    for V, erase, split in ((128, True, False), (64, False, False), (128, True, True), (64, False, True)):
        progress(f"K1 wgmma correctness d_v={V} erase={erase} split={split}")
        q, k, v, gt, b, w, do, dS = gdn_inputs(B, H, T, V, torch.bfloat16, seed=60 + V, erase=erase)
        _, _, ctx = chunked.chunk_fwd(q, k, v, gt, b, w, None, C, None)
        do_c = chunked._to_chunks(do, C, torch.float32)
        Bc, Hc, N = do_c.shape[:3]

        def flat(x, *tail, Bc=Bc, Hc=Hc, N=N):
            return x.reshape(Bc * Hc * N, *tail).contiguous()
        args = (flat(ctx["P"], C, C), flat(ctx["Kend"], C, K), flat(ctx["Qg"], C, K),
                None if ctx["Wm"] is None else flat(ctx["Wm"], C, K), flat(ctx["GC"], K), flat(do_c, C, V),
                dS.reshape(Bc * Hc, K, V))
        runs = [launch(*args, N, split=split) for _ in range(3)]
        c64 = _upcast_ctx(ctx)
        ref = chunked.reverse_state_scan(do_c.double(), c64, dS.double())
        bfm = model(c64["P"], c64["Kend"], c64["Qg"], c64["Wm"], c64["GC"], do_c.double(), dS.double(),
                    operand_dtype=torch.bfloat16, split=split)
        row = dict(V=V, T=T, B=B, H=H, erase=erase, split=split, chunks=int(Bc * Hc * N),
                   finite=all(bool(torch.isfinite(x).all()) for x in runs[0]),
                   bitwise_3runs=all(torch.equal(x, y) for r in runs[1:] for x, y in zip(runs[0], r, strict=True)))
        ok = row["finite"] and row["bitwise_3runs"]
        for name, a, r, m in zip(("dS_next", "dd", "dS0"), runs[0], ref, bfm, strict=True):
            ok = within_bf16_model(row, name, a.reshape(r.shape), r, m) and ok
        row["passed"] = bool(ok)
        corr.append(row)
        progress("  " + json.dumps({k_: (f"{v_:.2e}" if isinstance(v_, float) else v_) for k_, v_ in row.items()}))
        save(out)
    if not all(r["passed"] for r in corr):
        out["k1_wgmma_timing_skipped"] = "correctness failed: not timed"
        return
    ceil = out.get("ceilings", {})
    rows = []
    out["k1_wgmma_timing"] = rows
    shapes = [(T_, V_, 128 if T_ <= 4096 else 64) for V_ in (64, 128)
              for T_ in ((1024, 4096) if quick else (1024, 4096, 16384))]
    if DEV == "cpu":
        shapes = [(128, 64, 2)]
    for T_, V_, BH in shapes:
        N = T_ // C
        if over_budget():
            rows.append(dict(T=T_, V=V_, BH=BH, skipped="budget"))
            continue
        progress(f"K1 wgmma timing T={T_} d_v={V_} B*H={BH}")
        flops, nbytes32 = k1_counts(BH, N, V_)
        row = dict(T=T_, V=V_, BH=BH, flops=flops, bytes_bf16_operands=nbytes32 // 2)
        if ceil:  # operands in bf16; the bf16 tensor-core rate was not measured here, so the floor is the bytes'
            row["floor_bytes_ms"] = nbytes32 / 2 / (ceil["copy_GBps"] * 1e9) * 1e3
        sets = []
        for sd in (1, 2):
            P, Kend, Qg, Wm, GC, dO, dSF = synth_k1(BH, N, V_, sd)
            sets.append(tuple(x.reshape(BH * N, *x.shape[2:]).contiguous() for x in (P, Kend, Qg, Wm, GC, dO))
                        + (dSF,))
        med, lo, hi = events_median(lambda s, N=N: launch(*s, N), sets)
        row.update(wgmma_ms=med, wgmma_spread_ms=[lo, hi])
        # split-operand mode, its operands prepared before timing (as the hybrid-tc backend hands them over)
        split_sets = [tuple(x.to(torch.bfloat16) for x in s_[:6]) + (s_[6],)
                      + tuple((x.float() - x.to(torch.bfloat16).float()).to(torch.bfloat16) for x in (s_[0], s_[2]))
                      for s_ in sets]
        if DEV != "cpu":
            med_s, lo_s, hi_s = events_median(
                lambda s, N=N: launch(*s[:7], N, split=True, P_lo=s[7], Qg_lo=s[8]), split_sets)
            row.update(wgmma_split_ms=med_s, wgmma_split_spread_ms=[lo_s, hi_s])
            med_b, _, _ = events_median(lambda s, N=N: launch(*s[:7], N), split_sets)
            row["wgmma_bf16_in_ms"] = med_b  # the same kernel on bf16 inputs: no casts inside the timing
        if DEV != "cpu":
            from lethe.kernels.gdn.native.api import k1_launch

            def simt(s, BH=BH, N=N):
                P, Kend, Qg, Wm, GC, dO, dSF = s
                return k1_launch(*(x.reshape(BH, N, *x.shape[1:]) for x in (P, Kend, Qg, Wm, GC, dO)), dSF)
            med2, _, _ = events_median(simt, sets)
            row["simt_ms"] = med2
            row["speedup_vs_simt"] = med2 / med
        if "floor_bytes_ms" in row:
            row["wgmma_over_floor"] = med / row["floor_bytes_ms"]
        rows.append(row)
        progress("  " + json.dumps(row, default=str))
        save(out)


# ---------------------------------------------------------------- K2 on Hopper tensor cores (TMA + wgmma)

def k2_wgmma_stage(out, quick):
    """Correctness first (real GDN data: vs float64 K2 on the same operands within 2x the float64 replay of the
    kernel's own bf16 roundings (k2_model) + 1e-4, finite, dA zero on and above the diagonal, bitwise over 3
    runs), then timing against the SIMT K2 on the K2 timing shapes. The wgmma launch includes its operands'
    float32 -> bf16 casts (the wrapper's contract); a second timing hands it bf16 operands."""
    import numpy as np
    from lethe.kernels.gdn.native.k2_model import k2_batched

    if DEV == "cpu":
        out["k2_wgmma_skipped"] = "dry run: the tensor-core K2 has no CPU stand-in"
        return
    from lethe.kernels.gdn.native.api import k2_launch, k2_wgmma_launch

    corr = []
    out["k2_wgmma_correctness"] = corr
    B, H, T = 2, 4, 1000
    for V in (64, 128):
        progress(f"K2 wgmma correctness d_v={V}")
        q, k, v, gt, b, w, do, dS = gdn_inputs(B, H, T, V, torch.bfloat16, seed=70 + V)
        _, _, ctx = chunked.chunk_fwd(q, k, v, gt, b, w, None, C, None)
        do_c = chunked._to_chunks(do, C, torch.float32)
        dd = chunked.reverse_state_scan(do_c, ctx, dS)[1]
        L = dd.shape[0] * dd.shape[1] * dd.shape[2]

        def flat(x, *tail, L=L):
            return x.reshape(L, *tail).contiguous()
        ops = (flat(dd, C, V), flat(ctx["Hs"], K, V), flat(ctx["Tm"], C, C), flat(ctx["Xe"], C, K),
               flat(ctx["uc"], C, V))
        runs = [k2_wgmma_launch(*ops) for _ in range(3)]
        torch.cuda.synchronize()
        np64 = [x.double().cpu().numpy() for x in ops]
        exact = k2_batched(*np64)
        model = k2_batched(*np64, operand_round="bf16")
        row = dict(V=V, T=T, B=B, H=H, chunks=L,
                   finite=all(bool(torch.isfinite(x).all()) for x in runs[0]),
                   dA_upper_zero=bool(torch.all(torch.triu(runs[0][2]) == 0)),
                   bitwise_3runs=all(torch.equal(x, y) for r in runs[1:] for x, y in zip(runs[0], r, strict=True)))
        ok = row["finite"] and row["bitwise_3runs"] and row["dA_upper_zero"]
        simt = k2_launch(*ops)
        for name, a, r, m, s_ in zip(("dXe", "du", "dA"), runs[0], exact, model, simt, strict=True):
            r = torch.from_numpy(np.ascontiguousarray(r))
            m = torch.from_numpy(np.ascontiguousarray(m))
            row[f"{name}_simt_rel_vs_f64"] = rel(s_.cpu(), r)
            ok = within_bf16_model(row, name, a.cpu(), r, m) and ok
        row["passed"] = bool(ok)
        corr.append(row)
        progress("  " + json.dumps({k_: (f"{v_:.2e}" if isinstance(v_, float) else v_) for k_, v_ in row.items()}))
        save(out)
    if not all(r["passed"] for r in corr):
        out["k2_wgmma_timing_skipped"] = "correctness failed: not timed"
        return
    ceil = out.get("ceilings", {})
    rows = []
    out["k2_wgmma_timing"] = rows
    for V in (64, 128):
        for T_ in ((1024, 4096) if quick else (1024, 4096, 16384)):
            BH = 128 if T_ <= 4096 else 64
            L = BH * (T_ // C)
            if over_budget():
                rows.append(dict(T=T_, V=V, BH=BH, skipped="budget"))
                continue
            progress(f"K2 wgmma timing T={T_} d_v={V} B*H={BH} chunks={L}")
            flops, nbytes = k2_counts(L, V)
            row = dict(T=T_, V=V, K=K, C=C, BH=BH, chunks=L, flops=flops, bytes_f32=nbytes)
            sets = [synth_k2(L, V, sd) for sd in (1, 2)]
            med, lo, hi = events_median(lambda s_: k2_wgmma_launch(*s_), sets)
            row.update(wgmma_ms=med, wgmma_spread_ms=[lo, hi])
            bf_sets = [tuple(x.to(torch.bfloat16) for x in s_) for s_ in sets]
            med_b, _, _ = events_median(lambda s_: k2_wgmma_launch(*s_), bf_sets)
            row["wgmma_bf16_in_ms"] = med_b
            med2, _, _ = events_median(lambda s_: k2_launch(*s_), sets)
            row["simt_ms"] = med2
            row["speedup_vs_simt"] = med2 / med_b
            if ceil:  # bf16 operands in, float32 results out
                row["floor_bytes_ms"] = nbytes * 0.75 / (ceil["copy_GBps"] * 1e9) * 1e3
                row["wgmma_bf16_in_over_floor"] = med_b / row["floor_bytes_ms"]
            rows.append(row)
            progress("  " + json.dumps(row, default=str))
            save(out)
            del sets, bf_sets
            torch.cuda.empty_cache()


STAGES = ("ceilings", "correctness", "k2_correctness", "k2_timing", "backward_timing", "timing", "k1_wgmma",
          "k2_wgmma")


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "results/native"))
    ap.add_argument("--quick", action="store_true", help="T in {1k, 4k} only")
    ap.add_argument("--stages", default=",".join(STAGES), help="comma-separated subset of " + ",".join(STAGES))
    ap.add_argument("--budget-s", type=float, default=None, help="skip what would start after this many seconds")
    ap.add_argument("--merge", default=None, help="start from this bench.json (keys of stages not run are kept)")
    ap.add_argument("--dry-run", action="store_true", help="CPU, torch code in place of the native kernels")
    a = ap.parse_args(argv)
    global OUTDIR, DEV, BUDGET_S, START
    START = time.perf_counter()
    BUDGET_S = a.budget_s
    if a.dry_run:
        DEV = "cpu"
    stages = [x.strip() for x in a.stages.split(",") if x.strip()]
    unknown = [x for x in stages if x not in STAGES]
    if unknown:
        ap.error(f"unknown stages {unknown}; choose from {STAGES}")
    outdir = OUTDIR = Path(a.out)
    outdir.mkdir(parents=True, exist_ok=True)
    out: dict = {}
    if a.merge:
        try:
            out = json.loads(Path(a.merge).read_text())
            prov = Path(a.merge).with_name("provenance.json")
            out["merged_from"] = {"file": str(a.merge),
                                  "provenance": json.loads(prov.read_text()) if prov.exists() else None}
        except Exception as e:  # noqa: BLE001
            out = {"merge_error": repr(e)}
    out.update({"device": "cpu (dry run)" if DEV == "cpu" else torch.cuda.get_device_name(),
                "torch": torch.__version__, "stages_run": stages,
                "matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32)})
    try:
        import cutlass
        import triton

        out["cutlass_dsl"] = getattr(cutlass, "__version__", "unknown")
        out["triton"] = triton.__version__
    except Exception as e:  # noqa: BLE001
        out["import_error"] = repr(e)
    torch.backends.cuda.matmul.allow_tf32 = False  # every torch reference and timing here is true float32
    runners = {"ceilings": lambda: out.__setitem__("ceilings", ceilings()),
               "correctness": lambda: check_correctness(out),
               "k2_correctness": lambda: check_k2_correctness(out),
               "k2_timing": lambda: time_k2(out, a.quick),
               "backward_timing": lambda: time_backward(out, a.quick),
               "timing": lambda: time_configs(out, a.quick),
               "k1_wgmma": lambda: k1_wgmma_stage(out, a.quick),
               "k2_wgmma": lambda: k2_wgmma_stage(out, a.quick)}
    for name in STAGES:
        if name not in stages:
            continue
        out.pop(f"{name}_error", None)
        out.pop(f"{name}_skipped", None)
        if over_budget():
            out[f"{name}_skipped"] = "budget"
            progress(f"stage {name}: skipped (budget {BUDGET_S} s)")
            save(out)
            continue
        progress(f"stage {name}")
        t0 = time.perf_counter()
        try:
            runners[name]()
        except Exception:  # noqa: BLE001 - keep the other stages
            out[f"{name}_error"] = traceback.format_exc()[-3000:]
            print(out[f"{name}_error"], flush=True)
        out[f"{name}_wall_s"] = round(time.perf_counter() - t0, 1)
        save(out)
        if DEV != "cpu":
            torch.cuda.empty_cache()
    from lethe import provenance

    provenance.write(outdir / "provenance.json", command="python3 experiments/native/bench.py " + " ".join(
        sys.argv[1:] if argv is None else argv), experiment="native-k1-k2", cutlass_dsl=out.get("cutlass_dsl"),
        stages_run=stages)
    print("== summary ==")
    print(json.dumps(out.get("ceilings"), default=str))
    if "correctness" in stages:
        for r in out.get("k1_correctness", []):
            print("corr", r["erase"], r["V"], r["BV"], r["split"], "nan_free", r["nan_free"], "bitwise",
                  r["bitwise_3runs"], "dd vs f64 %.2e (torch %.2e)" % (r["ddelta_rel_vs_f64"],
                                                                       r["ddelta_torch32_rel_vs_f64"]),
                  "dS0 vs f64 %.2e" % r["dS0_rel_vs_f64"], "vs t32 %.1e" % r["dS0_rel_vs_torch32"])
        for r in out.get("end_to_end", []):
            print("e2e", r["dtype"], {k_: "%.1e" % v for k_, v in r.items() if isinstance(v, float)})
    for r in out.get("k2_correctness", []) if "k2_correctness" in stages else []:
        print("k2 corr d_v=%d passed=%s" % (r["V"], r["passed"]),
              {k_: "%.1e" % v for k_, v in r.items() if isinstance(v, float) and "torch32_rel" not in k_})
    for key in ("k2_timing", "backward_timing", "timing"):
        if key not in stages:
            continue
        for r in out.get(key, []):
            print(key, "T=%d V=%d BH=%d" % (r["T"], r["V"], r["BH"]),
                  {k_: (round(v, 3) if isinstance(v, float) else v) for k_, v in r.items()
                   if k_.endswith(("_ms", "floor")) or k_.startswith("speedup") or k_ == "skipped"})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
