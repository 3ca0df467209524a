"""Native K1 on the H200: correctness first (torch K1, float64 oracle, poison, bitwise determinism), then timing.

Run on the device machine from the repository root (CuTe DSL on PYTHONPATH, see docs/native.md):

    LETHE_GIT_SHA=<sha> python3 experiments/native/bench.py --out $OUT

Stages (each guarded: a failure is recorded and the script moves on, so one call returns everything):

1. ceilings: device-to-device copy bandwidth and an fp32 (non-TF32) matmul rate, measured here;
2. correctness on real GDN data (chunked forward of random bf16 inputs, full member with erase, and the
   no-erase case): native K1 vs the torch K1 (``chunked.reverse_state_scan``) on the same float32 ctx, both vs
   the float64 oracle (the chunked path run in float64 on the upcast inputs); outputs poisoned with NaN first;
   three native runs compared bit for bit; the end-to-end native backward vs the float64 recurrence's autograd;
3. timing of K1 alone: native (tile variants) vs Triton K1 (``triton_bwd.state_bwd_kernel``) vs torch K1, on
   synthetic operands of the right shapes and magnitudes (K1 has no data-dependent control flow; the operands are
   random, never zeros), d_k=128, d_v in {64,128}, T in {1k,4k,16k}, B*H filling the chip; CUDA events, warm-up,
   median over repetitions rotating between two input sets; the roofline floor from counted bytes and FLOPs.

Writes ``bench.json`` and ``provenance.json`` under --out and prints a short table last.
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
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from kernels.gdn import chunked  # noqa: E402

C = 64
K = 128
OUTDIR = None
DEV = "cuda"  # the dry run on a CPU sets this to "cpu" to exercise the torch-only parts


def rel(a, b):
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-300))


def events_median(fn, sets, reps=10, warm=2):
    """Median milliseconds of ``fn(s)`` over ``reps`` calls rotating through ``sets`` (after ``warm`` calls)."""
    for i in range(warm):
        fn(sets[i % len(sets)])
    torch.cuda.synchronize()
    times = []
    for i in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn(sets[i % len(sets)])
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times), min(times), max(times)


def ceilings():
    n = 1 << 28  # 1 GiB of float32 each way
    x = torch.randn(n, device=DEV)
    y = torch.empty_like(x)
    med, _, _ = events_median(lambda _: y.copy_(x), [0], reps=10)
    bw = 2 * n * 4 / (med * 1e-3)
    torch.backends.cuda.matmul.allow_tf32 = False
    a = torch.randn(8192, 8192, device=DEV)
    bm = torch.randn(8192, 8192, device=DEV)
    med2, _, _ = events_median(lambda _: a @ bm, [0], reps=5)
    return {"copy_GBps": bw / 1e9, "fp32_matmul_TFLOPs": 2 * 8192**3 / (med2 * 1e-3) / 1e12}


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
    from kernels.gdn.native.api import k1_launch, native_reverse_state_scan

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
    from kernels.gdn import reference
    from kernels.gdn.autograd import chunk_family
    from kernels.gdn.native.backend import register

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
        row = {"dtype": str(dtype)}
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
    from kernels.gdn.native.api import k1_launch
    from kernels.gdn.triton_bwd import state_bwd_kernel

    ceil = out.get("ceilings", {})
    rows = []
    out["timing"] = rows  # filled in place and saved after each row, so a run cut short keeps what it measured
    Ts = (1024, 4096) if quick else (1024, 4096, 16384)
    for V in (64, 128):
        for T in Ts:
            N = T // C
            BH = 128 if T <= 4096 else 64
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "results/native"))
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    global OUTDIR
    outdir = OUTDIR = Path(a.out)
    outdir.mkdir(parents=True, exist_ok=True)
    out: dict = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    try:
        import cutlass
        import triton

        out["cutlass_dsl"] = getattr(cutlass, "__version__", "unknown")
        out["triton"] = triton.__version__
    except Exception as e:  # noqa: BLE001
        out["import_error"] = repr(e)
    for name, stage in (("ceilings", lambda: out.__setitem__("ceilings", ceilings())),
                        ("correctness", lambda: check_correctness(out)),
                        ("timing", lambda: time_configs(out, a.quick))):
        t0 = time.perf_counter()
        try:
            stage()
        except Exception:  # noqa: BLE001 - keep the other stages
            out[f"{name}_error"] = traceback.format_exc()[-3000:]
            print(out[f"{name}_error"], flush=True)
        out[f"{name}_wall_s"] = round(time.perf_counter() - t0, 1)
        (outdir / "bench.json").write_text(json.dumps(out, indent=1, sort_keys=True, default=str))
    from lethe import provenance

    provenance.write(outdir / "provenance.json", command="python3 experiments/native/bench.py", experiment="native-k1",
                     cutlass_dsl=out.get("cutlass_dsl"))
    print("== summary ==")
    print(json.dumps(out.get("ceilings"), default=str))
    for r in out.get("k1_correctness", []):
        print("corr", r["erase"], r["V"], r["BV"], r["split"], "nan_free", r["nan_free"], "bitwise", r["bitwise_3runs"],
              "dd vs f64 %.2e (torch %.2e)" % (r["ddelta_rel_vs_f64"], r["ddelta_torch32_rel_vs_f64"]),
              "dS0 vs f64 %.2e" % r["dS0_rel_vs_f64"], "vs t32 %.1e" % r["dS0_rel_vs_torch32"])
    for r in out.get("end_to_end", []):
        print("e2e", r["dtype"], {k_: "%.1e" % v for k_, v in r.items() if k_ != "dtype"})
    for r in out.get("timing", []):
        print("time T=%d V=%d BH=%d" % (r["T"], r["V"], r["BH"]),
              {k_: (round(v, 3) if isinstance(v, float) else v) for k_, v in r.items()
               if k_.endswith("_ms") or k_.startswith("speedup") or k_.endswith("floor")})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
