"""The GDN verification ladder: correctness first, one rung at a time, into results/gdn/ladder.json.

Rungs (each reports the worst relative error per tensor, err = max|x - ref| / max|ref|):

1. tile spec-pins   -- a kernel's tile math against float64 of the *same* tile: the triangular inverse T of
                       the WY kernel against a float64 solve of the float32 tile, plus structural exactness
                       (strict upper triangle exactly 0, diagonal exactly 1, the stored first-chunk state a
                       bit-exact copy of the initial state).
2. per stage        -- every Triton intermediate (T, W, S_n, delta, o; dS_n, d delta; all gradients) against
                       the float64 PyTorch chunked reference fed the same rounded inputs.
3. end to end       -- bf16 / fp16 inputs, d_k = 128, chunk 64, d_v in {64, 128}, several lengths: output,
                       final state and every gradient of ``chunk_family(..., backend="triton")`` against the
                       float64 oracle (the recurrent loop, autograd), with the paper's 5e-3 pin.
4. vs fla           -- against fla's chunk ops where fla is importable (optional; recorded as skipped if not).

The oracle receives the low-precision inputs upcast to float64, so the errors measure the kernels, not the
input quantisation. ``--cpu-smoke`` runs every rung at tiny float32 sizes on the Triton interpreter.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]

from lethe.kernels.gdn.fwd_options import (
    DOT_PRECISION_DEFAULT,
    DOT_PRECISIONS,
    OUTPUT_PRECISION_DEFAULT,
    OUTPUT_PRECISIONS,
    WY_INVERSE_DEFAULT,
    WY_INVERSES,
    resolve_output_precision,
)
from lethe.kernels.gdn.inputs import PIN_E2E, family_member, make_inputs, member_args, oracle_output, rel_err

PIN_TILE = 1e-5  # float32 tile vs float64 of the same tile
GRAD_NAMES = ("dq", "dk", "dv", "dg", "db", "dw")


def rung_tile(device, K, V, C, T, seed, smoke, fwd_options=None):
    from lethe.kernels.gdn import chunked
    from lethe.kernels.gdn.triton_fwd import triton_chunk_fwd

    x = make_inputs(1, T, 2, K, V, seed, "cpu")
    f32 = {n: t.float().to(device) for n, t in x.items()}
    S0 = torch.randn(1, 2, K, V, generator=torch.Generator().manual_seed(seed + 1)).to(device)
    _, _, ctx = triton_chunk_fwd(f32["q"], f32["k"], f32["v"], f32["g"], f32["b"], f32["w"], chunk=C,
                                 initial_state=S0, **(fwd_options or {}))
    # float64 of the same tile: the float32 inputs upcast, solved in float64
    _, T64 = chunked.wy_intra(f32["k"].double().cpu(), f32["g"].double().cpu(), f32["b"].double().cpu(), chunk=C)
    Tm = ctx["Tm"].cpu()
    err = rel_err(Tm, T64)
    upper_zero = bool(torch.equal(Tm.triu(1), torch.zeros_like(Tm)))
    diag_one = bool(torch.equal(Tm.diagonal(dim1=-2, dim2=-1), torch.ones(Tm.shape[:-1])))
    h0_exact = bool(torch.equal(ctx["Hs"][:, :, 0].cpu(), S0.cpu()))
    return {
        "rung": "tile", "tile": "wy_triangular_inverse", "K": K, "V": V, "chunk": C, "T": T,
        "worst_rel_err": err, "pin": PIN_TILE, "pass": err <= PIN_TILE and upper_zero and diag_one and h0_exact,
        "exact": {"strict_upper_is_zero": upper_zero, "diagonal_is_one": diag_one, "h0_is_initial_state": h0_exact},
    }


def rung_stage(device, K, V, C, T, dtype, seed, fwd_options=None):
    """Triton intermediates against the float64 chunked reference on the same rounded inputs."""
    from lethe.kernels.gdn import chunked
    from lethe.kernels.gdn.triton_bwd import triton_chunk_bwd
    from lethe.kernels.gdn.triton_fwd import triton_chunk_fwd

    x = make_inputs(1, T, 2, K, V, seed, device)
    low = {n: t.to(dtype) for n, t in x.items()}
    ref64 = {n: t.double() for n, t in low.items()}
    o_r, S_r, c_r = chunked.chunk_fwd(ref64["q"], ref64["k"], ref64["v"], ref64["g"], ref64["b"], ref64["w"], chunk=C)
    g_r = chunked.chunk_bwd(ref64["do"], c_r)
    do_c = chunked._to_chunks(ref64["do"], C, torch.float64)
    dSn_r, dd_r, _ = chunked.reverse_state_scan(do_c, c_r)
    o_t, S_t, c_t = triton_chunk_fwd(low["q"], low["k"], low["v"], low["g"], low["b"], low["w"], chunk=C,
                                     **(fwd_options or {}))
    g_t = triton_chunk_bwd(low["do"], c_t)
    B, H, TP, _ = c_t["qi"].shape
    NT = TP // C
    chunks = lambda t, D: t.reshape(B, H, NT, C, D)
    errs = {
        "T": rel_err(c_t["Tm"], c_r["Tm"]),
        "W": rel_err(chunks(c_t["Wi"], K), c_r["Wm"]),
        "S_n": rel_err(c_t["Hs"], c_r["Hs"]),
        "delta": rel_err(chunks(c_t["Di"], V), c_r["delta"]),
        "o": rel_err(o_t, o_r),
        "S_final": rel_err(S_t, S_r),
    }
    errs["dS_n"] = rel_err(c_t["bwd_dSn"], dSn_r)
    errs["d_delta"] = rel_err(chunks(c_t["bwd_ddelta"], V), dd_r)
    for name, got, ref in zip(GRAD_NAMES, g_t[:6], g_r[:6], strict=True):
        errs[name] = rel_err(got, ref)
    return {"rung": "stage", "dtype": str(dtype).replace("torch.", ""), "K": K, "V": V, "chunk": C, "T": T,
            "errors": errs, "worst_rel_err": max(errs.values()), "worst_tensor": max(errs, key=errs.get)}


def rung_e2e(device, member, K, V, C, T, dtype, seed, H=2, backend="triton", repeats=1, fwd_options=None):
    """``repeats`` > 1 re-runs the same forward and backward and records whether every output and gradient
    came back bit for bit the same (the determinism the native kernels promise). ``fwd_options`` (dot_precision,
    wy_inverse) configure the Triton forward through chunk_family."""
    from lethe.kernels.gdn import reference as R
    from lethe.kernels.gdn.autograd import chunk_family

    x = make_inputs(1, T, H, K, V, seed, device, member)
    names, src = member_args(member, x)
    low = {n: src[n].to(dtype) for n in names}
    do = x["do"].to(dtype)
    ref_leaves = {n: low[n].double().requires_grad_() for n in names}
    ref = oracle_output(member, *(ref_leaves.get(n) for n in ("q", "k", "v", "g", "b", "w")))
    ref_grads = torch.autograd.grad((ref * do.double()).sum(), list(ref_leaves.values()))
    # the final state is returned to the caller too (a float32 output: no final rounding hides its error)
    with torch.no_grad():
        ref_state = R.member_final_state(family_member(member), *(low[n].double() if n in low else None
                                                                  for n in ("q", "k", "v", "g", "b", "w")))

    def run_once():
        leaves = {n: low[n].clone().requires_grad_() for n in names}
        o, S = chunk_family(member=family_member(member), backend=backend, chunk=C, output_final_state=True,
                            **(fwd_options or {}), **leaves)
        got = torch.autograd.grad((o.float() * do.float()).sum(), list(leaves.values()))
        if o.is_cuda:
            torch.cuda.synchronize()
        return o.detach(), S.detach(), got

    t0 = time.time()
    o, S, got = run_once()
    elapsed = time.time() - t0
    errs = {"o": rel_err(o, ref), "S_final": rel_err(S, ref_state)}
    for n, a, r in zip(names, got, ref_grads, strict=True):
        errs["d" + n] = rel_err(a, r)
    worst = max(errs.values())
    row = {"rung": "e2e", "member": member, "backend": backend, "dtype": str(dtype).replace("torch.", ""), "K": K,
           "V": V, "chunk": C, "T": T, "H": H, "errors": errs, "worst_rel_err": worst,
           "worst_tensor": max(errs, key=errs.get), "pin": PIN_E2E,
           "pass": bool(worst <= PIN_E2E and all(map(lambda e: e == e, errs.values()))),
           "seconds_incl_compile": round(elapsed, 3)}
    if repeats > 1:
        same = True
        for _ in range(repeats - 1):
            o2, S2, got2 = run_once()
            same &= (torch.equal(o2, o) and torch.equal(S2, S)
                     and all(torch.equal(a, b) for a, b in zip(got2, got, strict=True)))
        row["bitwise_repeat"] = {"runs": repeats, "identical": bool(same)}
        row["pass"] = row["pass"] and bool(same)
    return row


def rung_fla(device, K, V, T, dtype, seed, budget_s, sink=None):
    """fla's chunk ops (forward, and backward where it runs) against the same float64 oracle."""
    try:
        from fla.ops.gdn2 import chunk_gdn2  # noqa: F401
    except Exception as exc:  # fla is optional and not on the GPU image
        return [{"rung": "fla", "status": "skipped", "reason": f"fla not importable: {type(exc).__name__}: {exc}"}]
    import fla
    from fla.ops.gdn2 import chunk_gdn2
    from fla.ops.gla import chunk_gla
    from fla.ops.kda import chunk_kda
    from fla.ops.simple_gla import chunk_simple_gla
    from lethe.kernels.gdn import reference as R

    ops = {
        "la": lambda a: chunk_simple_gla(a["q"], a["k"], a["v"], g=None),
        "gla": lambda a: chunk_gla(a["q"], a["k"], a["v"], a["g"]),
        "ssd": lambda a: chunk_simple_gla(a["q"], a["k"], a["v"], g=a["g"]),
        "kda": lambda a: chunk_kda(a["q"], a["k"], a["v"], a["g"], a["b"]),
        "gdn": lambda a: chunk_gdn2(a["q"], a["k"], a["v"], a["g"], a["b"], a["w"]),
    }
    rows = []
    start = time.time()
    for member, op in ops.items():
        if time.time() - start > budget_s:
            rows.append({"rung": "fla", "member": member, "status": "skipped", "reason": "time budget"})
            continue
        x = make_inputs(1, T, 2, K, V, seed, device, member)
        names, src = member_args(member, x)
        low = {n: src[n].to(dtype) for n in names}
        do = x["do"].to(dtype)
        ref_leaves = {n: low[n].double().requires_grad_() for n in names}
        ref = R.member_reference(member, *(ref_leaves.get(n) for n in ("q", "k", "v", "g", "b", "w")))
        ref_grads = torch.autograd.grad((ref * do.double()).sum(), list(ref_leaves.values()))
        row = {"rung": "fla", "member": member, "dtype": str(dtype).replace("torch.", ""), "K": K, "V": V, "T": T,
               "fla_version": getattr(fla, "__version__", None)}
        leaves = {n: low[n].clone().requires_grad_() for n in names}
        try:
            o, _ = op(leaves)
            row["errors"] = {"o": rel_err(o, ref)}
        except Exception as exc:
            row.update(status="error", reason=f"forward: {type(exc).__name__}: {str(exc)[:300]}")
            rows.append(row)
            if sink is not None:
                sink(rows)
            continue
        try:
            got = torch.autograd.grad((o.float() * do.float()).sum(), list(leaves.values()))
            for n, a, r in zip(names, got, ref_grads, strict=True):
                row["errors"]["d" + n] = rel_err(a, r)
            row["status"] = "ok"
        except Exception as exc:
            row.update(status="forward_only", reason=f"backward: {type(exc).__name__}: {str(exc)[:300]}")
        row["worst_rel_err"] = max(row["errors"].values())
        rows.append(row)
        if sink is not None:  # the fla rung may be cut by a wall-clock limit: keep what finished
            sink(rows)
    return rows


def _guarded(fn, rung, **meta):
    """Run one arm; an exception becomes an explicit error row rather than a silently missing arm."""
    try:
        return fn()
    except Exception as exc:  # recorded, never hidden: the summary counts error rows
        return {"rung": rung, "status": "error", "reason": f"{type(exc).__name__}: {str(exc)[:400]}", **meta,
                "worst_rel_err": float("nan"), "pass": False}


def _write(out: Path, name: str, payload: dict, **prov) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / name).write_text(json.dumps(payload, indent=1, sort_keys=True) + "\n")
    from lethe import provenance

    provenance.write(out / name.replace(".json", ".provenance.json"), **prov)


NATIVE_FORWARD = "not used: the native backend runs the torch chunked forward in float32"


def fwd_launch_table() -> dict:
    from lethe.kernels.gdn.triton_fwd import FWD_LAUNCH

    return {name: dict(cfg) for name, cfg in FWD_LAUNCH.items()}


# the forward kernels with a PREC of their own (FWD_LAUNCH), by the key the summary's dot_precision gives them
PREC_KERNEL_KEYS = {"wy_a_kernel": "fwd_wy_a", "wy_apply_kernel": "fwd_wy_apply", "state_fwd_kernel": "fwd_state"}


def kernel_precisions_ran(dot_precision: str, dtypes, wy_inverse: str = "split") -> dict:
    """What each PREC kernel's products ran at under the launch table as it is now (overrides included): one word
    per kernel when every dtype resolves alike, else {dtype: word}. The A and W/U kernels run only in the split WY
    step (the row and blocked kernels take the forward's dot_precision, "fwd")."""
    import torch
    from lethe.kernels.gdn.fwd_options import resolve_precision
    from lethe.kernels.gdn.triton_fwd import FWD_LAUNCH

    out = {}
    for kernel, key in PREC_KERNEL_KEYS.items():
        if kernel != "state_fwd_kernel" and wy_inverse != "split":
            continue
        ran = {str(dt).removeprefix("torch."): resolve_precision(
            FWD_LAUNCH[kernel].get("PREC"), dot_precision, dt in (torch.bfloat16, torch.float16)) for dt in dtypes}
        out[key] = next(iter(ran.values())) if len(set(ran.values())) == 1 else ran
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu-smoke", action="store_true", help="tiny float32 sizes on the Triton interpreter")
    ap.add_argument("--out", default=str(ROOT / "results" / "gdn"))
    ap.add_argument("--lengths", default="256,1024,4096")
    ap.add_argument("--seed", type=int, default=20260829)
    ap.add_argument("--fla", choices=("skip", "only"), default="skip",
                    help="'only': run just the fla rung into ladder_fla.json (fla autotuning can take minutes)")
    ap.add_argument("--fla-budget-s", type=float, default=240.0)
    ap.add_argument("--members", default="la,gla,ssd,kda,sgdn,gdn",
                    help="members of the end-to-end rung (sgdn: kda with a per-head g, the scalar-gate kernels)")
    ap.add_argument("--backend", choices=("triton", "native", "hybrid", "hybrid-tc"), default="triton",
                    help="backend of the end-to-end rung; the others than 'triton' (CuTe DSL kernels, CUDA only) "
                         "run that rung alone, with a bitwise repeat check, into ladder_<backend>.json (the tile "
                         "and stage rungs pin Triton intermediates)")
    ap.add_argument("--repeats", type=int, default=None, help="runs per end-to-end arm compared bit for bit "
                    "(default 1 for triton, 3 for native)")
    ap.add_argument("--dtypes", default="bfloat16,float16", help="input dtypes of the stage and end-to-end rungs (GPU)")
    ap.add_argument("--dot-precision", choices=DOT_PRECISIONS, default=DOT_PRECISION_DEFAULT,
                    help="tl.dot input precision of the Triton forward (and the Triton backward's scan)")
    ap.add_argument("--wy-inverse", choices=WY_INVERSES, default=WY_INVERSE_DEFAULT,
                    help="the Triton forward's triangular inverse (kernels/gdn/fwd_options.py)")
    ap.add_argument("--output-precision", choices=[p for p in OUTPUT_PRECISIONS if p], default=OUTPUT_PRECISION_DEFAULT,
                    help="tl.dot input precision of the forward's output kernel alone; its products feed only o "
                         "(auto: tf32rn for bf16/fp16 inputs under the default --dot-precision, else --dot-precision)")
    ap.add_argument("--launch", action="append", default=[], metavar="KERNEL:KEY=VAL[,KEY=VAL]",
                    help="run with a launch-table entry changed (kernels/gdn/launch_tables.py), e.g. "
                         "state_fwd_kernel:PREC=tf32rn; recorded in the summary (launch_overrides, fwd_launch)")
    ap.add_argument("--name", default=None, help="output file name (default ladder[_<backend>].json)")
    args = ap.parse_args(argv)
    from lethe.kernels.gdn.launch_tables import overridden, overrides_from_cli

    launch = overrides_from_cli(args.launch)
    with overridden(launch):
        return _run(args, launch)


def _run(args, launch: dict):
    """The ladder with the parsed arguments, inside ``launch``'s overrides of the launch tables."""
    fwd_options = {"dot_precision": args.dot_precision, "wy_inverse": args.wy_inverse,
                   "output_precision": args.output_precision}
    if args.backend == "native" and (launch or args.dot_precision != DOT_PRECISION_DEFAULT
                                     or args.output_precision != OUTPUT_PRECISION_DEFAULT
                                     or args.wy_inverse != WY_INVERSE_DEFAULT):
        raise SystemExit(f"--backend native: {NATIVE_FORWARD}, so the Triton forward's options and --launch would "
                         "change nothing")
    if args.cpu_smoke and (args.dot_precision != DOT_PRECISION_DEFAULT
                           or args.output_precision != OUTPUT_PRECISION_DEFAULT):
        raise SystemExit("--cpu-smoke runs the interpreter's float32 dots: --dot-precision and --output-precision "
                         "are GPU-only")
    repeats = args.repeats or (1 if args.backend == "triton" else 3)

    if args.cpu_smoke:
        os.environ.setdefault("TRITON_INTERPRET", "1")
        device, K, dvs, C, lengths, dtypes = "cpu", 16, (16, 32), 16, (32, 48), (torch.float32,)
        member_T = 32
    else:
        if not torch.cuda.is_available():
            raise SystemExit("the full ladder needs a CUDA GPU; use --cpu-smoke on the CPU")
        device, K, dvs, C = "cuda", 128, (64, 128), 64
        dtypes = tuple(getattr(torch, d) for d in args.dtypes.split(",") if d)
        lengths = tuple(int(t) for t in args.lengths.split(","))
        member_T = 1024
    # what the output kernel ran at: one word when every dtype resolves alike (the GPU ladder's bf16 + fp16)
    ran = {str(dt).removeprefix("torch."): resolve_output_precision(
        args.output_precision, args.dot_precision, dt in (torch.bfloat16, torch.float16)) for dt in dtypes}
    output_precision_ran = next(iter(ran.values())) if len(set(ran.values())) == 1 else ran
    kernels_ran = kernel_precisions_ran(args.dot_precision, dtypes, args.wy_inverse)
    if args.backend != "triton" and args.cpu_smoke:
        raise SystemExit(f"the {args.backend} backend runs CuTe DSL kernels: it needs the GPU (no --cpu-smoke)")
    from lethe.kernels.gdn.reference import MEMBERS

    members = [m for m in args.members.split(",") if m]
    unknown = set(members) - set(MEMBERS) - {"sgdn"}
    if unknown:
        raise SystemExit(f"unknown members {sorted(unknown)} (expected {', '.join((*MEMBERS, 'sgdn'))})")
    out = Path(args.out)
    t_start = time.time()
    if args.fla == "only":
        if args.cpu_smoke:
            raise SystemExit("the fla rung needs the GPU")
        sink = lambda rows: _write(out, "ladder_fla.json", {"rows": rows, "seconds": round(time.time() - t_start, 1)},
                                   experiment="gdn_ladder_fla")
        rows = rung_fla(device, K, 128, member_T, torch.bfloat16, args.seed, args.fla_budget_s, sink)
        sink(rows)
        print(json.dumps(rows, indent=1, sort_keys=True))
        return rows
    rows = []
    name = args.name or ("ladder_smoke.json" if args.cpu_smoke else ("ladder.json" if args.backend == "triton"
                                                                     else f"ladder_{args.backend}.json"))

    def flush(complete=False):
        """Summarise and write what has run so far, so a wall-clock cut still leaves a valid partial ladder."""
        ok = lambda r: r.get("status") != "error"
        e2e = [r for r in rows if r["rung"] == "e2e" and ok(r)]
        stage = [r for r in rows if r["rung"] == "stage" and ok(r)]
        summary = {
            "mode": "cpu-smoke" if args.cpu_smoke else "gpu",
            "backend": args.backend,
            "complete": complete,
            "dot_precision": (NATIVE_FORWARD if args.backend == "native"
                              else "interpreter (numpy float32)" if args.cpu_smoke
                              else {"fwd": args.dot_precision, "fwd_output": output_precision_ran,
                                    **kernels_ran, "bwd_scan": args.dot_precision, "bwd_intra": "tf32"}),
            "wy_inverse": None if args.backend == "native" else args.wy_inverse,
            # the Triton forward's launch table as it ran (KEND, for one, changes roundings on the GPU)
            "fwd_launch": None if args.backend == "native" else fwd_launch_table(),
            "launch_overrides": launch,
            "error_rows": sum(1 for r in rows if not ok(r)),
            "tile_all_pass": (all(r["pass"] for r in rows if r["rung"] == "tile")
                              if any(r["rung"] == "tile" for r in rows) else None),
            "stage_worst": max((r["worst_rel_err"] for r in stage), default=None),
            "e2e_worst": max((r["worst_rel_err"] for r in e2e), default=None),
            "e2e_worst_arm": max(e2e, key=lambda r: r["worst_rel_err"]) if e2e else None,
            "e2e_pass": sum(r["pass"] for r in rows if r["rung"] == "e2e"),
            "e2e_arms": sum(1 for r in rows if r["rung"] == "e2e"),
            "e2e_worst_per_member": {m: max((r["worst_rel_err"] for r in e2e if r["member"] == m), default=None)
                                     for m in members},
            "bitwise_repeat_all_identical": (all(r["bitwise_repeat"]["identical"] for r in e2e)
                                             if repeats > 1 and e2e else None),
            "seconds": round(time.time() - t_start, 1),
        }
        _write(out, name, {"summary": summary, "rows": rows},
               experiment="gdn_ladder" if args.backend == "triton" else f"gdn_ladder_{args.backend}",
               pins={"e2e": PIN_E2E, "tile": PIN_TILE})
        return summary

    for V in dvs if args.backend == "triton" else ():
        rows.append(_guarded(lambda V=V: rung_tile(device, K, V, C, 2 * C, args.seed, args.cpu_smoke, fwd_options),
                             "tile", V=V))
        print("tile", V, rows[-1]["worst_rel_err"], rows[-1]["pass"], flush=True)
    for dtype in dtypes if args.backend == "triton" else ():
        for V in dvs:
            rows.append(_guarded(lambda V=V, dtype=dtype: rung_stage(device, K, V, C, lengths[0], dtype, args.seed,
                                                                     fwd_options),
                                 "stage", V=V, dtype=str(dtype)))
            print("stage", dtype, V, rows[-1].get("worst_tensor"), rows[-1]["worst_rel_err"], flush=True)
            flush()
    for dtype in dtypes:
        for V in dvs:
            arms = [("gdn", T) for T in lengths] if "gdn" in members else []
            arms += [(m, member_T) for m in members if m != "gdn"]
            for member, T in arms:
                rows.append(_guarded(
                    lambda member=member, T=T, V=V, dtype=dtype: rung_e2e(device, member, K, V, C, T, dtype,
                                                                          args.seed, backend=args.backend,
                                                                          repeats=repeats, fwd_options=fwd_options),
                    "e2e", member=member, V=V, T=T, dtype=str(dtype).replace("torch.", "")))
                print("e2e", member, dtype, V, T, rows[-1].get("worst_tensor"), rows[-1]["worst_rel_err"],
                      flush=True)
                flush()
    rows.append({"rung": "fla", "status": "skipped",
                 "reason": "cpu smoke" if args.cpu_smoke else "run separately (--fla only -> ladder_fla.json)"})
    summary = flush(complete=True)
    print(json.dumps(summary, indent=1, sort_keys=True))
    return summary


if __name__ == "__main__":
    main()
