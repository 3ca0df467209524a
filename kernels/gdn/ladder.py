"""The GDN verification ladder's rungs and summary (experiments/gdn/ladder.py drives them into
results/gdn/ladder*.json; docs/gdn.md).

Each rung reports the worst relative error per tensor (:func:`lethe.kernels.gdn.inputs.rel_err`, max|x - ref| /
max|ref|): :func:`rung_tile` (a kernel's tile math against float64 of the same tile, plus structural exactness),
:func:`rung_stage` (every Triton intermediate against the float64 chunked reference), :func:`rung_e2e` (a backend's
output, final state and gradients against the float64 oracle) and :func:`rung_fla` (fla's chunk ops, where fla is
importable). The oracle receives the low-precision inputs upcast to float64, so the errors measure the kernels, not
the input quantisation. The Triton modules are imported inside the rungs, so a caller can set ``TRITON_INTERPRET``
first.
"""

from __future__ import annotations

import time

import torch

from lethe.kernels.gdn.inputs import PIN_E2E, family_member, make_inputs, member_args, oracle_output, rel_err

PIN_TILE = 1e-5  # float32 tile vs float64 of the same tile
GRAD_NAMES = ("dq", "dk", "dv", "dg", "db", "dw")


def rung_tile(device, K, V, C, T, seed, smoke, fwd_options=None):
    """Rung 1: the WY kernel's triangular inverse against a float64 solve of the same float32 tile, and the tile's
    exact structure (strict upper triangle 0, diagonal 1, the first stored state the initial state bit for bit)."""
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
    """Rung 2: every Triton intermediate and gradient against the float64 chunked reference on the same rounded
    inputs."""
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
    """Rung 3: output, final state and every gradient of ``chunk_family(..., backend=)`` against the float64
    oracle on the same rounded inputs, with the end-to-end pin. ``repeats`` > 1 re-runs the same forward and backward and records whether every output and gradient
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
    """Rung 4: fla's chunk ops (forward, and backward where it runs) against the same float64 oracle; ``sink``
    receives the rows so far after each op."""
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


def guarded(fn, rung, **meta):
    """Run one arm; an exception becomes an explicit error row rather than a silently missing arm."""
    try:
        return fn()
    except Exception as exc:  # recorded, never hidden: the summary counts error rows
        return {"rung": rung, "status": "error", "reason": f"{type(exc).__name__}: {str(exc)[:400]}", **meta,
                "worst_rel_err": float("nan"), "pass": False}


NATIVE_FORWARD = "not used: the native backend runs the torch chunked forward in float32"


def fwd_launch_table() -> dict:
    """The Triton forward's launch table as it is now (overrides included), as plain dicts."""
    from lethe.kernels.gdn.triton_fwd import FWD_LAUNCH

    return {name: dict(cfg) for name, cfg in FWD_LAUNCH.items()}


# the forward kernels with a PREC of their own (FWD_LAUNCH), by the key the summary's dot_precision gives them
PREC_KERNEL_KEYS = {"wy_a_kernel": "fwd_wy_a", "wy_apply_kernel": "fwd_wy_apply", "state_fwd_kernel": "fwd_state"}


def kernel_precisions_ran(dot_precision: str, dtypes, wy_inverse: str = "split") -> dict:
    """What each PREC kernel's products ran at under the launch table as it is now (overrides included): one word
    per kernel when every dtype resolves alike, else {dtype: word}. The A and W/U kernels run only in the split WY
    step (the row and blocked kernels take the forward's dot_precision, "fwd")."""
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


def summarise(rows: list[dict], *, cpu_smoke: bool, backend: str, complete: bool, dot_precision: str,
              output_precision_ran, kernels_ran: dict, wy_inverse: str, launch: dict, members: list[str],
              repeats: int, seconds: float) -> dict:
    """The ladder's summary of the rows so far: worst errors per rung and member, pass counts, error rows, and the
    forward's options and launch table as they ran (None where the backend does not run the Triton forward)."""
    ok = lambda r: r.get("status") != "error"  # noqa: E731
    e2e = [r for r in rows if r["rung"] == "e2e" and ok(r)]
    stage = [r for r in rows if r["rung"] == "stage" and ok(r)]
    return {
        "mode": "cpu-smoke" if cpu_smoke else "gpu",
        "backend": backend,
        "complete": complete,
        "dot_precision": (NATIVE_FORWARD if backend == "native"
                          else "interpreter (numpy float32)" if cpu_smoke
                          else {"fwd": dot_precision, "fwd_output": output_precision_ran,
                                **kernels_ran, "bwd_scan": dot_precision, "bwd_intra": "tf32"}),
        "wy_inverse": None if backend == "native" else wy_inverse,
        # the Triton forward's launch table as it ran (KEND, for one, changes roundings on the GPU)
        "fwd_launch": None if backend == "native" else fwd_launch_table(),
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
        "seconds": seconds,
    }
