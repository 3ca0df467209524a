"""The tensor-core stages of the native benchmark (:mod:`.bench`): K1 and K2 on Hopper tensor cores (TMA +
wgmma), each correctness first (real GDN data, judged against float64 within 2x the float64 replay of the
kernel's own bf16 roundings + 1e-4), then timed only when every correctness row passed."""

from __future__ import annotations

import json

import torch

from lethe.kernels.gdn import chunked

from .bench import (
    BenchRun,
    C,
    K,
    bytes_floor_ms,
    fmt_row,
    gdn_inputs,
    k1_counts,
    k2_counts,
    rel,
    synth_k1,
    synth_k2,
    upcast_ctx,
    within_bf16_model,
)


def k1_wgmma_impl(run: BenchRun):
    """The tensor-core K1 on flattened [L, ...] operands; the dry run (CPU) substitutes its float64 replay with
    the kernel's bf16 roundings (lethe.kernels.gdn.native.k1_scan_model), so only the plumbing is exercised."""
    if run.cuda:
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


def k1_wgmma_stage(run: BenchRun, out: dict, quick: bool) -> None:
    """Correctness first (real GDN data, erase on and off: vs float64 K1 within 2x the float64 replay of the
    kernel's own bf16 roundings + 1e-4, finite, bitwise over 3 runs), then timing against the SIMT K1 and the
    torch K1 on the K1 timing shapes, with the floor counted for bf16 operands."""
    from lethe.kernels.gdn.native.k1_scan_model import model

    launch = k1_wgmma_impl(run)
    corr = []
    out["k1_wgmma_correctness"] = corr
    B, H, T = (2, 4, 1000) if run.cuda else (1, 2, 200)
    for V, erase, split in ((128, True, False), (64, False, False), (128, True, True), (64, False, True)):
        run.progress(f"K1 wgmma correctness d_v={V} erase={erase} split={split}")
        q, k, v, gt, b, w, do, dS = gdn_inputs(run, B, H, T, V, torch.bfloat16, seed=60 + V, erase=erase)
        _, _, ctx = chunked.chunk_fwd(q, k, v, gt, b, w, None, C, None)
        do_c = chunked._to_chunks(do, C, torch.float32)
        Bc, Hc, N = do_c.shape[:3]

        def flat(x, *tail, Bc=Bc, Hc=Hc, N=N):
            return x.reshape(Bc * Hc * N, *tail).contiguous()
        args = (flat(ctx["P"], C, C), flat(ctx["Kend"], C, K), flat(ctx["Qg"], C, K),
                None if ctx["Wm"] is None else flat(ctx["Wm"], C, K), flat(ctx["GC"], K), flat(do_c, C, V),
                dS.reshape(Bc * Hc, K, V))
        runs = [launch(*args, N, split=split) for _ in range(3)]
        c64 = upcast_ctx(ctx)
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
        run.progress("  " + fmt_row(row))
        run.save(out)
    if not all(r["passed"] for r in corr):
        out["k1_wgmma_timing_skipped"] = "correctness failed: not timed"
        return
    ceil = out.get("ceilings", {})
    rows = []
    out["k1_wgmma_timing"] = rows
    shapes = [(T_, V_, 128 if T_ <= 4096 else 64) for V_ in (64, 128)
              for T_ in ((1024, 4096) if quick else (1024, 4096, 16384))]
    if not run.cuda:
        shapes = [(128, 64, 2)]
    for T_, V_, BH in shapes:
        N = T_ // C
        if run.over_budget():
            rows.append(dict(T=T_, V=V_, BH=BH, skipped="budget"))
            continue
        run.progress(f"K1 wgmma timing T={T_} d_v={V_} B*H={BH}")
        flops, nbytes32 = k1_counts(BH, N, V_)
        row = dict(T=T_, V=V_, BH=BH, flops=flops, bytes_bf16_operands=nbytes32 // 2)
        if ceil:  # operands in bf16; the bf16 tensor-core rate was not measured here, so the floor is the bytes'
            row["floor_bytes_ms"] = bytes_floor_ms(nbytes32 / 2, ceil)
        sets = []
        for sd in (1, 2):
            P, Kend, Qg, Wm, GC, dO, dSF = synth_k1(run, BH, N, V_, sd)
            sets.append(tuple(x.reshape(BH * N, *x.shape[2:]).contiguous() for x in (P, Kend, Qg, Wm, GC, dO))
                        + (dSF,))
        med, lo, hi = run.time(lambda s, N=N: launch(*s, N), sets)
        row.update(wgmma_ms=med, wgmma_spread_ms=[lo, hi])
        # split-operand mode, its operands prepared before timing (as the hybrid-tc backend hands them over)
        split_sets = [tuple(x.to(torch.bfloat16) for x in s_[:6]) + (s_[6],)
                      + tuple((x.float() - x.to(torch.bfloat16).float()).to(torch.bfloat16) for x in (s_[0], s_[2]))
                      for s_ in sets]
        if run.cuda:
            med_s, lo_s, hi_s = run.time(
                lambda s, N=N: launch(*s[:7], N, split=True, P_lo=s[7], Qg_lo=s[8]), split_sets)
            row.update(wgmma_split_ms=med_s, wgmma_split_spread_ms=[lo_s, hi_s])
            med_b, _, _ = run.time(lambda s, N=N: launch(*s[:7], N), split_sets)
            row["wgmma_bf16_in_ms"] = med_b  # the same kernel on bf16 inputs: no casts inside the timing
            from lethe.kernels.gdn.native.api import k1_launch

            def simt(s, BH=BH, N=N):
                P, Kend, Qg, Wm, GC, dO, dSF = s
                return k1_launch(*(x.reshape(BH, N, *x.shape[1:]) for x in (P, Kend, Qg, Wm, GC, dO)), dSF)
            med2, _, _ = run.time(simt, sets)
            row["simt_ms"] = med2
            row["speedup_vs_simt"] = med2 / med
        if "floor_bytes_ms" in row:
            row["wgmma_over_floor"] = med / row["floor_bytes_ms"]
        rows.append(row)
        run.progress("  " + json.dumps(row, default=str))
        run.save(out)


def k2_wgmma_stage(run: BenchRun, out: dict, quick: bool) -> None:
    """Correctness first (real GDN data: vs float64 K2 on the same operands within 2x the float64 replay of the
    kernel's own bf16 roundings (k2_model) + 1e-4, finite, dA zero on and above the diagonal, bitwise over 3
    runs), then timing against the SIMT K2 on the K2 timing shapes. The wgmma launch includes its operands'
    float32 -> bf16 casts (the wrapper's contract); a second timing hands it bf16 operands."""
    import numpy as np

    from lethe.kernels.gdn.native.k2_model import k2_batched

    if not run.cuda:
        out["k2_wgmma_skipped"] = "dry run: the tensor-core K2 has no CPU stand-in"
        return
    from lethe.kernels.gdn.native.api import k2_launch, k2_wgmma_launch

    corr = []
    out["k2_wgmma_correctness"] = corr
    B, H, T = 2, 4, 1000
    for V in (64, 128):
        run.progress(f"K2 wgmma correctness d_v={V}")
        q, k, v, gt, b, w, do, dS = gdn_inputs(run, B, H, T, V, torch.bfloat16, seed=70 + V)
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
        run.progress("  " + fmt_row(row))
        run.save(out)
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
            if run.over_budget():
                rows.append(dict(T=T_, V=V, BH=BH, skipped="budget"))
                continue
            run.progress(f"K2 wgmma timing T={T_} d_v={V} B*H={BH} chunks={L}")
            flops, nbytes = k2_counts(L, V)
            row = dict(T=T_, V=V, K=K, C=C, BH=BH, chunks=L, flops=flops, bytes_f32=nbytes)
            sets = [synth_k2(run, L, V, sd) for sd in (1, 2)]
            med, lo, hi = run.time(lambda s_: k2_wgmma_launch(*s_), sets)
            row.update(wgmma_ms=med, wgmma_spread_ms=[lo, hi])
            bf_sets = [tuple(x.to(torch.bfloat16) for x in s_) for s_ in sets]
            med_b, _, _ = run.time(lambda s_: k2_wgmma_launch(*s_), bf_sets)
            row["wgmma_bf16_in_ms"] = med_b
            med2, _, _ = run.time(lambda s_: k2_launch(*s_), sets)
            row["simt_ms"] = med2
            row["speedup_vs_simt"] = med2 / med_b
            if ceil:  # bf16 operands in, float32 results out
                row["floor_bytes_ms"] = bytes_floor_ms(nbytes * 0.75, ceil)
                row["wgmma_bf16_in_over_floor"] = med_b / row["floor_bytes_ms"]
            rows.append(row)
            run.progress("  " + json.dumps(row, default=str))
            run.save(out)
            del sets, bf_sets
            torch.cuda.empty_cache()
