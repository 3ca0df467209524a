"""The H200 benchmark of the native K1 and K2 (driver: experiments/native/bench.py): correctness first (torch code,
float64 oracle, poison, bitwise determinism), then timing.

One :class:`BenchRun` carries what a run shares (output folder, device, wall-clock budget, start time); every
stage is a function ``stage(run, out, quick)`` that fills the result dict ``out`` in place and saves it after
every row, so a run cut short keeps what it measured. Timing is the one runner (:mod:`lethe.perf.timing`),
floors and ceilings :mod:`lethe.perf.roofline`. The SIMT K1 / K2 stages are here, the tensor-core ones in
:mod:`.bench_wgmma`; :mod:`.bench_stages` holds their order and the guarded loop over them.

A dry run (``BenchRun(device="cpu")``) replaces the native kernels by the torch code (or the tensor-core K1 by
its float64 replay) and uses tiny shapes where the stage has them: it exercises the plumbing, not the numbers.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from lethe.kernels.gdn import chunked
from lethe.perf.roofline import measure_fp32_ceilings, memory_ms, roofline_ms
from lethe.perf.timing import summary_ms, time_ms

C = 64
K = 128


@dataclass
class BenchRun:
    """What the stages of one benchmark run share: ``out_dir`` (where ``bench.json`` is saved; None: not saved),
    ``device`` (``"cpu"`` in a dry run), ``budget_s`` (skip what would start after this many seconds from
    ``start``; None: no budget)."""

    out_dir: Path | None = None
    device: str = "cuda"
    budget_s: float | None = None
    start: float = field(default_factory=time.perf_counter)

    @property
    def cuda(self) -> bool:
        """True unless this is the CPU dry run."""
        return self.device != "cpu"

    def progress(self, msg: str) -> None:
        """Print a progress line stamped with the seconds since the start."""
        print(f"[t={time.perf_counter() - self.start:6.1f}s] {msg}", flush=True)

    def over_budget(self) -> bool:
        """True once the wall-clock budget is spent."""
        return self.budget_s is not None and time.perf_counter() - self.start > self.budget_s

    def save(self, out: dict) -> None:
        """Write ``out`` to ``<out_dir>/bench.json`` (sorted keys)."""
        if self.out_dir is not None:
            (self.out_dir / "bench.json").write_text(json.dumps(out, indent=1, sort_keys=True, default=str))

    def time(self, fn, sets, reps: int = 10, warm: int = 2) -> tuple[float, float, float]:
        """(median, min, max) milliseconds of ``fn(s)`` over ``reps`` timed calls rotating through the input sets
        ``sets`` after ``warm`` untimed ones, from the one timing runner (CUDA events; wall clock in a dry run,
        only to exercise the plumbing)."""
        t = summary_ms(time_ms(lambda i: fn(sets[i % len(sets)]), reps, cuda=self.cuda, warmup=warm), digits=None)
        return t["median_ms"], *t["spread_ms"]


def rel(a, b) -> float:
    """Relative Frobenius error of ``a`` against ``b`` (in float64)."""
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-300))


def within_bf16_model(row: dict, name: str, got, ref, model) -> bool:
    """Record ``name``'s error against float64 and that of the float64 replay of the kernel's own bf16 roundings,
    and judge the tensor-core kernels' criterion: no further from float64 than 2x their model + 1e-4."""
    row[f"{name}_rel_vs_f64"] = rel(got, ref)
    row[f"{name}_bf16_model_rel_vs_f64"] = rel(model, ref)
    return row[f"{name}_rel_vs_f64"] <= 2 * row[f"{name}_bf16_model_rel_vs_f64"] + 1e-4


def fp32_floor_ms(flops: float, nbytes: float, ceil: dict) -> float:
    """The roofline floor of a float32 kernel at the ceilings measured by :func:`ceilings` (the true float32
    matmul rate and the copy bandwidth)."""
    return roofline_ms(flops, nbytes, ceil["fp32_matmul_TFLOPs"], ceil["copy_GBps"] / 1e3)


def bytes_floor_ms(nbytes: float, ceil: dict) -> float:
    """The memory floor alone at the measured copy bandwidth (kernels whose compute rate was not measured)."""
    return memory_ms(nbytes, ceil["copy_GBps"] / 1e3)


def ceilings(run: BenchRun) -> dict:
    """Device-to-device copy bandwidth (1 GiB of float32 each way) and the float32 (non-TF32) matmul rate
    measured here (tiny sizes in a dry run)."""
    cpu = not run.cuda
    return measure_fp32_ceilings(run.device, copy_elems=1 << (16 if cpu else 28), m=256 if cpu else 8192)


def gdn_inputs(run: BenchRun, B, H, T, V, dtype, seed, erase=True):
    """Random GDN inputs (q, k, v, gate, b or None, w, do in ``dtype``; the final-state gradient dS in float32)
    with k normalised and log-decays mostly small, never positive."""
    dev = run.device
    g = torch.Generator(device=dev).manual_seed(seed)

    def r(*s):
        return torch.randn(*s, device=dev, generator=g)

    q = r(B, T, H, K)
    k = torch.nn.functional.normalize(r(B, T, H, K), dim=-1)
    v = r(B, T, H, V)
    gate = -torch.nn.functional.softplus(r(B, T, H, K) - 4.0)
    b = torch.rand(B, T, H, K, device=dev, generator=g) if erase else None
    w = torch.rand(B, T, H, V, device=dev, generator=g)
    do = r(B, T, H, V)
    dS = r(B, H, K, V)
    cast = [x if x is None else x.to(dtype) for x in (q, k, v, gate, b, w, do)]
    return (*cast, dS)


def upcast_ctx(ctx: dict) -> dict:
    """The chunked forward's saved context with every floating tensor in float64."""
    c64 = {k_: (x.double() if torch.is_tensor(x) and x.is_floating_point() else x) for k_, x in ctx.items()}
    c64["dtype"] = torch.float64
    return c64


def fmt_row(row: dict) -> str:
    """A correctness row for a progress line (floats in 3 significant digits)."""
    return json.dumps({k_: (f"{v_:.2e}" if isinstance(v_, float) else v_) for k_, v_ in row.items()})


# ---------------------------------------------------------------- K1 (reverse-time inter-chunk state scan)

def check_correctness(run: BenchRun, out: dict, quick: bool = False) -> None:
    """Native K1 vs the torch K1 on the same float32 ctx of real GDN data (erase on and off), both vs the float64
    oracle; NaN-poisoned outputs, three runs bitwise; then the native backend end to end vs the float64
    recurrence's autograd. Needs the native kernels (no dry-run stand-in)."""
    from lethe.kernels.gdn.native.api import k1_launch, native_reverse_state_scan

    res = []
    for erase in (True, False):
        for V in (64, 128):
            B, H, T = 2, 4, 1000  # T not a multiple of C: the padded tail chunk is exercised
            q, k, v, gt, b, w, do, dS = gdn_inputs(run, B, H, T, V, torch.bfloat16, seed=V + erase)
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
    from lethe.kernels.gdn.native.backend import NATIVE, register

    register()
    e2e = []
    for dtype in (torch.float32, torch.bfloat16):
        B, H, T, V = 1, 2, 300, 64
        q, k, v, gt, b, w, do, _ = gdn_inputs(run, B, H, T, V, dtype, seed=7)
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


def synth_k1(run: BenchRun, BH, N, V, seed):
    """Random K1 operands in the chunked layout [BH, N, ...] of the right magnitudes: P (lower triangular), Kend,
    Qg, Wm, GC (decays near 1), dO, dS_final."""
    dev = run.device
    g = torch.Generator(device=dev).manual_seed(seed)

    def r(*s, scale=1.0):
        return torch.randn(*s, device=dev, generator=g) * scale

    P = torch.tril(r(BH, N, C, C, scale=0.1)).contiguous()
    Kend = r(BH, N, C, K, scale=0.05)
    Qg = r(BH, N, C, K, scale=0.05)
    Wm = r(BH, N, C, K, scale=0.05)
    GC = torch.rand(BH, N, K, device=dev, generator=g) * 0.1 + 0.9
    dO = r(BH, N, C, V)
    dSF = r(BH, K, V)
    return P, Kend, Qg, Wm, GC, dO, dSF


def synth_triton(run: BenchRun, BH, N, V, seed):
    """Random operands of the Triton K1 (``triton_bwd.state_bwd_kernel``): q, k, cumulative log-decays, W, dO, dS_final."""
    dev = run.device
    g = torch.Generator(device=dev).manual_seed(seed)
    TP = N * C
    q = torch.randn(1, BH, TP, K, device=dev, generator=g)
    k = torch.nn.functional.normalize(torch.randn(1, BH, TP, K, device=dev, generator=g), dim=-1)
    lg = -torch.rand(1, BH, N, C, K, device=dev, generator=g) * 0.05
    gam = lg.cumsum(-2).reshape(1, BH, TP, K).contiguous()
    W = torch.randn(1, BH, TP, K, device=dev, generator=g) * 0.05
    dO = torch.randn(1, BH, TP, V, device=dev, generator=g)
    dSF = torch.randn(1, BH, K, V, device=dev, generator=g)
    return q, k, gam, W, dO, dSF


def time_configs(run: BenchRun, out: dict, quick: bool) -> None:
    """K1 timing: native (tile variants) vs the Triton K1 vs the torch K1 on synthetic operands, d_k=128, d_v in
    {64,128}, T in {1k,4k,16k} ({1k,4k} when ``quick``); the roofline floor at the measured ceilings."""
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
            if run.over_budget():
                rows.append(dict(T=T, V=V, BH=BH, skipped="budget"))
                continue
            run.progress(f"K1 timing T={T} d_v={V} B*H={BH}")
            flops, nbytes = k1_counts(BH, N, V)
            row = dict(T=T, V=V, K=K, C=C, BH=BH, flops=flops, bytes=nbytes)
            if ceil:
                row["floor_ms"] = fp32_floor_ms(flops, nbytes, ceil)
            sets = [synth_k1(run, BH, N, V, s) for s in (1, 2)]
            for BV, split in ((32, 2), (64, 2), (16, 1)):
                try:
                    t0 = time.perf_counter()
                    k1_launch(*sets[0], BV=BV, split=split)
                    torch.cuda.synchronize()
                    comp = time.perf_counter() - t0
                    med, lo, hi = run.time(lambda s, BV=BV, split=split: k1_launch(*s, BV=BV, split=split), sets)
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
                med, lo, hi = run.time(torch_k1, sets, reps=5, warm=1)
                row["torch_ms"] = med
                # agreement on the timed operands too (random, not zeros)
                a = k1_launch(*sets[0])
                rt = torch_k1(sets[0])
                row["native_vs_torch_rel_dS0"] = rel(a[2], rt[2][0])
                row["native_vs_torch_rel_dd"] = rel(a[1], rt[1][0])
            except Exception as e:  # noqa: BLE001
                row["torch_error"] = repr(e)[:300]
            del sets
            tsets = [synth_triton(run, BH, N, V, s) for s in (3, 4)]
            BVt = min(V, 64)

            for prec in ("ieee", "tf32"):
                try:
                    def tk(s, prec=prec, BH=BH, N=N, V=V, BVt=BVt):
                        q, k, gam, W, dO, dSF = s
                        dSn = torch.empty(1, BH, N, K, V, device=run.device)
                        dd = torch.empty_like(dO)
                        dS0 = torch.empty_like(dSF)
                        state_bwd_kernel[(BH, V // BVt)](q, k, gam, W, dO, dSF, dSn, dd, dS0, k, K**-0.5, NT=N, K=K,
                                                         V=V, C=C, BV=BVt, HAS_ERASE=True, HAS_DSF=True, PREC=prec)
                    med, lo, hi = run.time(tk, tsets)
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
            run.save(out)
            torch.cuda.empty_cache()


# ---------------------------------------------------------------- K2 (WY / triangular-inverse VJP)

def k2_impls(run: BenchRun):
    """(native K2 on flattened [L, ...] operands, native drop-in for wy_vjp_torch, native K1 drop-in,
    native backward). The dry run (CPU) substitutes the torch code, so only the plumbing is exercised."""
    if not run.cuda:
        def launch(dd, Hs, Tm, Xe, uc, poison=False):
            return chunked.wy_vjp_torch(dd, dict(Hs=Hs, Tm=Tm, Xe=Xe, uc=uc))

        def backward(do, ctx, dS):
            return chunked.chunk_bwd(do, ctx, dS)
        return launch, chunked.wy_vjp_torch, chunked.reverse_state_scan, backward
    from lethe.kernels.gdn.native.api import k2_launch, native_reverse_state_scan, native_wy_vjp
    from lethe.kernels.gdn.native.backend import NATIVE

    return k2_launch, native_wy_vjp, native_reverse_state_scan, NATIVE.backward


def check_k2_correctness(run: BenchRun, out: dict, quick: bool = False) -> None:
    """Native K2 vs torch K2 on the same float32 operands of real GDN data; both vs float64 (same operands, and
    the float64 pipeline: forward, K1 and K2 in float64 on the upcast inputs); poison; 3 runs bitwise."""
    _, native_wy, _, native_bwd = k2_impls(run)
    res = []
    out["k2_correctness"] = res
    B, H, T = (2, 4, 1000) if run.cuda else (1, 2, 200)  # T not a multiple of C: padded tail chunk
    for V in (64, 128):
        run.progress(f"K2 correctness d_v={V}")
        q, k, v, gt, b, w, do, dS = gdn_inputs(run, B, H, T, V, torch.bfloat16, seed=40 + V)
        _, _, ctx = chunked.chunk_fwd(q, k, v, gt, b, w, None, C, None)
        do_c = chunked._to_chunks(do, C, torch.float32)
        dd = chunked.reverse_state_scan(do_c, ctx, dS)[1]
        ref32 = chunked.wy_vjp_torch(dd, ctx)
        ref64s = chunked.wy_vjp_torch(dd.double(), upcast_ctx(ctx))
        up = [x.double() for x in (q, k, v, gt, b, w)]
        _, _, ctx64 = chunked.chunk_fwd(*up, None, C, None)
        dd64 = chunked.reverse_state_scan(chunked._to_chunks(do.double(), C, torch.float64), ctx64, dS.double())[1]
        ref64p = chunked.wy_vjp_torch(dd64, ctx64)
        runs = [native_wy(dd, ctx, **({"poison": True} if run.cuda else {})) for _ in range(3)]
        if run.cuda:
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
        run.progress("  " + fmt_row(row))
        run.save(out)


def k2_counts(L, V):
    """FLOPs of one K2 call and its fewest bytes (each operand read once, each output written once, float32)."""
    from lethe.kernels.gdn.native.k2_hopper_plan import flops_per_chunk

    reads = C * V + K * V + C * C + C * K + C * V
    writes = C * K + C * V + C * C
    return L * flops_per_chunk(K, V, C), 4 * L * (reads + writes)


def synth_k2(run: BenchRun, L, V, seed):
    """Random K2 operands of the right shapes and magnitudes: dd, Hs, T (unit lower triangular), Xe, u."""
    dev = run.device
    g = torch.Generator(device=dev).manual_seed(seed)

    def r(*s_, scale=1.0):
        return torch.randn(*s_, device=dev, generator=g) * scale

    dd = r(L, C, V)
    Hs = r(L, K, V, scale=0.1)
    Tm = (torch.eye(C, device=dev) + torch.tril(r(L, C, C, scale=0.05), -1)).contiguous()
    Xe = r(L, C, K, scale=0.05)
    uc = r(L, C, V)
    return dd, Hs, Tm, Xe, uc


def time_k2(run: BenchRun, out: dict, quick: bool) -> None:
    """K2 alone: native vs torch on the same operands; floor from counted bytes and FLOPs."""
    launch, _, _, _ = k2_impls(run)
    ceil = out.get("ceilings", {})
    rows = []
    out["k2_timing"] = rows
    Ts = ((1024, 4096) if quick else (1024, 4096, 16384)) if run.cuda else (128, 256)
    for V in (64, 128):
        for T in Ts:
            N = T // C
            BH = (128 if T <= 4096 else 64) if run.cuda else 2
            L = BH * N
            if run.over_budget():
                rows.append(dict(T=T, V=V, BH=BH, skipped="budget"))
                continue
            run.progress(f"K2 timing T={T} d_v={V} B*H={BH} chunks={L}")
            flops, nbytes = k2_counts(L, V)
            row = dict(T=T, V=V, K=K, C=C, BH=BH, chunks=L, flops=flops, bytes=nbytes)
            if ceil:
                row["floor_ms"] = fp32_floor_ms(flops, nbytes, ceil)
            try:
                sets = [synth_k2(run, L, V, sd) for sd in (1, 2)]
            except Exception as e:  # noqa: BLE001
                row["setup_error"] = repr(e)[:300]
                rows.append(row)
                run.save(out)
                continue
            try:
                t0 = time.perf_counter()
                launch(*sets[0])
                if run.cuda:
                    torch.cuda.synchronize()
                row["native_first_call_s"] = time.perf_counter() - t0
                med, lo, hi = run.time(lambda s_: launch(*s_), sets)
                row["native_ms"], row["native_spread_ms"] = med, [lo, hi]
            except Exception as e:  # noqa: BLE001 - record and go on
                row["native_error"] = repr(e)[:300]

            def torch_k2(s_):
                dd, Hs, Tm, Xe, uc = s_
                return chunked.wy_vjp_torch(dd, dict(Hs=Hs, Tm=Tm, Xe=Xe, uc=uc))
            try:
                med, lo, hi = run.time(torch_k2, sets, reps=5, warm=1)
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
            run.progress("  " + json.dumps({k_: (round(v_, 4) if isinstance(v_, float) else v_)
                                            for k_, v_ in row.items()
                                            if k_.endswith(("_ms", "_floor", "torch", "TFLOPs"))}))
            run.save(out)
            del sets
            if run.cuda:
                torch.cuda.empty_cache()


def backward_row(run: BenchRun, row: dict, native_scan, native_wy) -> None:
    """Time the three backward variants on one configuration (fills ``row``); locals freed on return."""
    q, k, v, gt, b, w, do, dS = gdn_inputs(run, 1, row["BH"], row["T"], row["V"], torch.float32, seed=90 + row["V"])
    _, _, ctx = chunked.chunk_fwd(q, k, v, gt, b, w, None, C, None)
    variants = {
        "torch": lambda _: chunked.chunk_bwd(do, ctx, dS),
        "native_k1": lambda _: chunked.chunk_bwd(do, ctx, dS, scan=native_scan),
        "native_k1k2": lambda _: chunked.chunk_bwd(do, ctx, dS, scan=native_scan, wy_vjp=native_wy),
    }
    for name, fn in variants.items():
        try:
            med, lo, hi = run.time(fn, [0], reps=5, warm=1)
            row[f"{name}_ms"], row[f"{name}_spread_ms"] = med, [lo, hi]
        except Exception as e:  # noqa: BLE001
            row[f"{name}_error"] = repr(e)[:300]
    ref = variants["torch"](0)
    nat = variants["native_k1k2"](0)
    row["native_k1k2_vs_torch_max_rel"] = max(rel(a_, r_) for a_, r_ in zip(nat, ref, strict=True) if r_ is not None)
    for name in ("native_k1", "native_k1k2"):
        if f"{name}_ms" in row and "torch_ms" in row:
            row[f"speedup_{name}_vs_torch"] = row["torch_ms"] / row[f"{name}_ms"]


def time_backward(run: BenchRun, out: dict, quick: bool) -> None:
    """The whole chunked backward on real data (float32): torch, native K1 only, native K1 + K2."""
    _, native_wy, native_scan, _ = k2_impls(run)
    rows = []
    out["backward_timing"] = rows
    Ts = ((1024, 4096) if quick else (1024, 4096, 16384)) if run.cuda else (128, 256)
    max_chunks = 4096  # the torch path holds [chunks, C, C, K] float32 pairwise tensors (2 MiB per chunk)
    for V in (64, 128):
        for T in Ts:
            N = T // C
            BH = min(128 if T <= 4096 else 64, max_chunks // N) if run.cuda else 2
            if run.over_budget():
                rows.append(dict(T=T, V=V, BH=BH, skipped="budget"))
                continue
            run.progress(f"backward timing T={T} d_v={V} B*H={BH}")
            row = dict(T=T, V=V, K=K, C=C, BH=BH, chunks=BH * N)
            try:
                backward_row(run, row, native_scan, native_wy)
            except Exception as e:  # noqa: BLE001
                row["error"] = repr(e)[:300]
            rows.append(row)
            run.progress("  " + json.dumps({k_: (round(v_, 4) if isinstance(v_, float) else v_)
                                            for k_, v_ in row.items()
                                            if k_.endswith("_ms") or k_.startswith("speedup") or k_.endswith("rel")}))
            run.save(out)
            if run.cuda:
                torch.cuda.empty_cache()
