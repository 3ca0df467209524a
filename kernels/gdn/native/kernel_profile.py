"""Where a backward's time goes, kernel by kernel (driver: experiments/native/kernel_profile.py): fla, our Triton
backward and the native backends on one cell each, checked against ours before they are timed.

For each implementation and cell: the backward's wall time (the one timing runner, :mod:`lethe.perf.timing`; no
profiler attached), then the device's own kernel trace (torch.profiler, CUPTI) summed by kernel family
(:func:`kernel_summary`), and the roofline floors of the cell (:func:`floors`, :mod:`lethe.perf.roofline`).
Implementation names may carry Triton-forward options and launch-table words after an "@"
(:func:`parse_impl`, :func:`launch_overrides`); every row records the options it ran with
(:func:`resolved_fwd_options`).
"""

from __future__ import annotations

import re
import time

from lethe.kernels.gdn.bench import MEMBERS, bench_inputs, bypass, chunk_counts, fla_fn, ours_fn
from lethe.perf.roofline import roofline_ms
from lethe.perf.timing import summary_ms, time_ms

SCHEMA = "lethe.native.profile/1"
CELL_H, CELL_K = 2, 128  # every cell's heads and d_k

# Kernel families, matched on the demangled kernel name in this order (first match wins). cuBLAS on Hopper names
# its kernels after CUTLASS too, so matmuls are matched before the CuTe DSL kernels.
FAMILIES = (
    ("matmul (cuBLAS)", re.compile(r"gemm|xmma|nvjet|cublas|tensorop|s1688|s16816|splitKreduce", re.I)),
    ("CuTe DSL (native K1/K2)", re.compile(r"cutlass|cute", re.I)),
    ("torch reduction / scan", re.compile(r"reduce|cumsum|scan|norm_kernel|softmax", re.I)),
    ("torch copy / index / fill", re.compile(r"copy|cat_|CatArray|index|gather|scatter|fill|flip|tril|triu|"
                                              r"where|masked|arange|memcpy|memset", re.I)),
    ("torch elementwise", re.compile(r"elementwise|at::native::|pointwise", re.I)),
)


def family(name: str) -> str:
    """The kernel family of a demangled kernel name (:data:`FAMILIES`, then Triton or other)."""
    for label, rx in FAMILIES:
        if rx.search(name):
            return label
    # Triton kernels carry the Python function's name and no C++ namespace
    return "other" if ("::" in name or name.startswith("void ")) else "Triton"


#: every family a summary can name, in the order profile.json lists them
FAMILY_LABELS = [f for f, _ in FAMILIES] + ["Triton", "other"]


def kernel_summary(events) -> dict:
    """Summed and union device time of the kernel events of one backward, their count, the idle time inside the
    span from the first kernel's start to the last one's end, and time per family and per kernel name."""
    ks = sorted(((e.time_range.start, e.time_range.end, e.name) for e in events), key=lambda t: t[0])
    if not ks:
        return {"kernels": 0}
    busy, cur_s, cur_e = 0.0, ks[0][0], ks[0][1]
    for s, e, _ in ks[1:]:
        if s > cur_e:
            busy += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    busy += cur_e - cur_s
    span = max(e for _, e, _ in ks) - ks[0][0]
    fam: dict[str, list] = {}
    names: dict[str, list] = {}
    for s, e, n in ks:
        f = fam.setdefault(family(n), [0, 0.0])
        f[0] += 1
        f[1] += e - s
        k = names.setdefault(n, [0, 0.0])
        k[0] += 1
        k[1] += e - s
    us = 1e-3
    top = sorted(names.items(), key=lambda kv: -kv[1][1])[:20]
    return {"kernels": len(ks), "kernel_sum_ms": round(sum(e - s for s, e, _ in ks) * us, 4),
            "busy_ms": round(busy * us, 4), "span_ms": round(span * us, 4), "idle_in_span_ms": round((span - busy) * us, 4),
            "families": {k: {"kernels": v[0], "ms": round(v[1] * us, 4)} for k, v in
                         sorted(fam.items(), key=lambda kv: -kv[1][1])},
            "top_kernels": [{"name": n[:160], "family": family(n), "calls": c, "ms": round(t * us, 4)}
                            for n, (c, t) in top]}


IMPLS = ("ours", "fla", "native", "hybrid", "hybrid-tc")
FWD_OPTION_WORDS = {"rows": ("wy_inverse", "rows"), "blocked": ("wy_inverse", "blocked"),
                    "split": ("wy_inverse", "split"),
                    "tf32x3": ("dot_precision", "tf32x3"), "tf32": ("dot_precision", "tf32"),
                    "ieee": ("dot_precision", "ieee"), "otf32": ("output_precision", "tf32"),
                    "otf32rn": ("output_precision", "tf32rn"),
                    "otf32x3": ("output_precision", "tf32x3"),
                    "general": ("gate_form", "general")}
# words that change a launch-table entry of the Triton forward for that implementation's run (experiment switches of
# kernels/gdn/triton_fwd.FWD_LAUNCH; the launch tables are restored after it)
# ("a3x", "wu3x", "s3x", "direct0": the defaults before the ninth build, for A/B comparisons in one call)
LAUNCH_WORDS = {"arn": {"wy_a_kernel": {"PREC": "tf32rn"}}, "wurn": {"wy_apply_kernel": {"PREC": "tf32rn"}},
                "srn": {"state_fwd_kernel": {"PREC": "tf32rn"}}, "kend0": {"state_fwd_kernel": {"KEND": 0}},
                "direct": {"output_fwd_kernel": {"DIRECT": 1}}, "direct0": {"output_fwd_kernel": {"DIRECT": 0}},
                "a3x": {"wy_a_kernel": {"PREC": "tf32x3"}}, "wu3x": {"wy_apply_kernel": {"PREC": "tf32x3"}},
                "s3x": {"state_fwd_kernel": {"PREC": "tf32x3"}}}


def parse_impl(impl: str) -> tuple[str, dict]:
    """``"hybrid-tc@blocked+tf32"`` -> ``("hybrid-tc", {"wy_inverse": "blocked", "dot_precision": "tf32"})``: an
    implementation with its Triton forward configured (the words of FWD_OPTION_WORDS after an "@", joined by
    "+"); a plain name has no options. Only our Triton-forward implementations take options."""
    base, _, opts = impl.partition("@")
    if base not in IMPLS:
        raise ValueError(f"unknown implementation {base!r} in {impl!r}; expected one of {IMPLS}")
    if not opts:
        return base, {}
    if base not in ("ours", "hybrid", "hybrid-tc"):
        raise ValueError(f"{base} has no Triton forward to configure ({impl!r})")
    out = {}
    for word in opts.split("+"):
        if word in LAUNCH_WORDS:
            continue  # see launch_overrides
        if word not in FWD_OPTION_WORDS:
            raise ValueError(f"unknown forward option {word!r} in {impl!r}; expected "
                             f"{sorted(FWD_OPTION_WORDS) + sorted(LAUNCH_WORDS)}")
        key, value = FWD_OPTION_WORDS[word]
        out[key] = value
    return base, out


def launch_overrides(impl: str) -> dict:
    """The launch-table overrides an implementation's words ask for (LAUNCH_WORDS), merged per kernel; {} when
    none (``"hybrid-tc@srn+direct"`` -> the state kernel's PREC and the output kernel's DIRECT)."""
    parse_impl(impl)  # refuses unknown names and words
    out: dict = {}
    for word in impl.partition("@")[2].split("+"):
        for kernel, entry in LAUNCH_WORDS.get(word, {}).items():
            out.setdefault(kernel, {}).update(entry)
    return out


def resolved_fwd_options(impl: str) -> dict:
    """The Triton forward's options an implementation runs with, defaults filled in (recorded in every row, so a
    row says what "hybrid-tc" meant at its commit, and ``output_precision_bf16`` what the output kernel ran at on
    the GPU's bf16 inputs); {} for implementations without our Triton forward."""
    from lethe.kernels.gdn.fwd_options import (
        DOT_PRECISION_DEFAULT,
        GATE_FORM_DEFAULT,
        OUTPUT_PRECISION_DEFAULT,
        WY_INVERSE_DEFAULT,
        resolve_output_precision,
        resolve_precision,
    )
    from lethe.kernels.gdn.triton_fwd import FWD_LAUNCH

    base, opts = parse_impl(impl)
    if base not in ("ours", "hybrid", "hybrid-tc"):
        return {}
    # gate_form: which kernels a scalar-gate KDA (sgdn) cell runs on; rows from before it existed ran the general ones
    got = {"dot_precision": DOT_PRECISION_DEFAULT, "wy_inverse": WY_INVERSE_DEFAULT,
           "output_precision": OUTPUT_PRECISION_DEFAULT, "gate_form": GATE_FORM_DEFAULT, **opts}
    got["output_precision_bf16"] = resolve_output_precision(got["output_precision"], got["dot_precision"], True)
    # the PREC kernels' products on bf16 inputs, the implementation's launch words applied
    overrides = launch_overrides(impl)
    got["kernel_precisions_bf16"] = {
        kernel: resolve_precision(overrides.get(kernel, {}).get("PREC", cfg.get("PREC")), got["dot_precision"], True)
        for kernel, cfg in FWD_LAUNCH.items() if "PREC" in cfg}
    return got


def profile_cell(impl: str, member: str, B: int, H: int, T: int, K: int, V: int, args, ref_grads=None,
                 device: str = "cuda") -> tuple[dict, list | None]:
    """One implementation on one cell: check against ``ref_grads`` (ours), time the backward, profile it; returns
    (row, float32 gradients). ``args`` carries seed, sets, warmup, reps, profile_reps and check_rel (the driver's
    flags). ``device="cpu"`` (tests only) runs the same code on the torch path with host timers and host op
    events."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    cuda = device == "cuda"
    base_impl, fwd_options = parse_impl(impl)
    fn, guarded = {"fla": lambda: (fla_fn(member), MEMBERS[member]["guarded"]),
                   "ours": lambda: (ours_fn(member, "triton" if cuda else "torch", 64, **fwd_options), False),
                   "native": lambda: (ours_fn(member, "native", 64), False),
                   "hybrid": lambda: (ours_fn(member, "hybrid", 64, **fwd_options), False),
                   "hybrid-tc": lambda: (ours_fn(member, "hybrid-tc", 64, **fwd_options), False)}[base_impl]()
    dt = torch.bfloat16 if cuda else torch.float32
    sets = [bench_inputs(member, B, T, H, K, V, dt, dt, args.seed + i, device) for i in range(args.sets)]
    leaves, do = sets[0]
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    scale = K ** -0.5
    row = {"impl": impl, "member": member, "B": B, "H": H, "T": T, "K": K, "V": V, "dtype": str(dt)[6:],
           "head_tokens": B * H * T, "fla_640_bypass": bool(guarded)}

    def fwd(i=0):
        with bypass(guarded):
            return fn(sets[i][0], scale)

    def bwd(o, i=0):
        with bypass(guarded):
            return torch.autograd.grad(o, list(sets[i][0].values()), sets[i][1])

    t0 = time.perf_counter()
    grads = bwd(fwd())  # first call: compiles / autotunes
    sync()
    row["first_call_s"] = round(time.perf_counter() - t0, 2)
    grads = [g.float() for g in grads]
    if ref_grads is not None:
        errs = {n: float((g - r).abs().max() / r.abs().max().clamp_min(1e-30))
                for n, g, r in zip(leaves, grads, ref_grads, strict=True)}
        row["check_vs_ours_rel"] = {n: float(f"{e:.3g}") for n, e in errs.items()}
        if not all(e <= args.check_rel for e in errs.values()):
            row["status"] = "check_failed"
            return row, grads
    for _ in range(args.warmup):
        bwd(fwd())
    sync()
    n = args.reps * len(sets)  # rotating over the input sets
    # the backward alone, its forward the untimed setup of each iteration
    walls = time_ms(lambda rep, o: bwd(o, rep % len(sets)), n, cuda=cuda, setup=lambda rep: fwd(rep % len(sets)))
    row["timed_iterations"] = len(walls)
    row["input_sets"] = len(sets)
    t = summary_ms(walls)
    row["bwd_wall_ms"], row["bwd_wall_spread_ms"] = t["median_ms"], t["spread_ms"]
    # forward + backward, a training step's share of this layer, timed the same way
    t = summary_ms(time_ms(lambda rep: bwd(fwd(rep % len(sets)), rep % len(sets)), n, cuda=cuda))
    row["fwd_bwd_wall_ms"], row["fwd_bwd_wall_spread_ms"] = t["median_ms"], t["spread_ms"]
    prof_rows = []
    for _ in range(args.profile_reps):
        o = fwd()
        sync()
        t0 = time.perf_counter()
        with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
            bwd(o)
            sync()
        host_ms = (time.perf_counter() - t0) * 1e3
        want = torch.autograd.DeviceType.CUDA if cuda else torch.autograd.DeviceType.CPU
        kev = [e for e in prof.events() if e.device_type == want and (cuda or e.cpu_parent is None)]
        s = kernel_summary(kev)
        if cuda and not kev:  # a profiler build that only attaches kernels to their launching host op
            ks = [k for e in prof.events() for k in getattr(e, "kernels", [])]
            s = {"kernels": len(ks), "kernel_sum_ms": round(sum(k.duration for k in ks) * 1e-3, 4),
                 "note": "no device events with timestamps: sums only"}
        s["host_wall_ms_with_profiler"] = round(host_ms, 3)
        prof_rows.append(s)
    # the repetition whose summed kernel time is the median one represents the cell
    prof_rows.sort(key=lambda s: s.get("kernel_sum_ms", 0))
    row["profile"] = prof_rows[len(prof_rows) // 2]
    row["profile_reps"] = len(prof_rows)
    # the forward's kernels, once (where a fwd+bwd gap comes from)
    sync()
    with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
        fwd()
        sync()
    want = torch.autograd.DeviceType.CUDA if cuda else torch.autograd.DeviceType.CPU
    row["fwd_profile"] = kernel_summary([e for e in prof.events()
                                         if e.device_type == want and (cuda or e.cpu_parent is None)])
    row["status"] = "ok"
    return row, grads


def floors(member: str, B: int, T: int, V: int, ceilings: dict, H: int = 2, K: int = 128) -> dict:
    """FLOPs and minimal bytes of the cell (the benchmark's count, lethe.kernels.gdn.bench.chunk_counts: inputs and gradients
    at bf16, every intermediate on chip) and the roofline floors of the backward and of forward + backward at
    the measured bf16 matmul rate and copy bandwidth."""
    c = chunk_counts(member, B, H, T, K, V)
    out = {"counts": {k: c[k] for k in ("fwd_flops", "bwd_flops", "fwd_bytes", "bwd_bytes", "bwd_bytes_with_states")}}
    if ceilings.get("measured"):
        tf, bw = ceilings["bf16_matmul_tflops"], ceilings["copy_tbps"]
        out["bwd_floor_ms"] = roofline_ms(c["bwd_flops"], c["bwd_bytes"], tf, bw)
        out["fwd_bwd_floor_ms"] = roofline_ms(c["fwd_flops"] + c["bwd_flops"], c["fwd_bytes"] + c["bwd_bytes"],
                                                 tf, bw)
    return out


def profile_doc(rows: list, ceilings: dict, device: str, start: float) -> dict:
    """The profile.json document: the rows so far, the measured ceilings, the family labels, the seconds since
    ``start`` (``time.time()``)."""
    return {"schema": SCHEMA, "device": device, "rows": rows, "ceilings": ceilings, "families": FAMILY_LABELS,
            "seconds": round(time.time() - start, 1)}


def profile_cells(cells: list[str], impls: list[str], args, ceilings: dict, rows: list, start: float, save,
                  device: str = "cuda") -> None:
    """Profile every implementation of ``impls`` on every cell (``member:d_v:T:B[:H]``, H = 2 unless given,
    d_k = 128), appending
    one row each to ``rows`` and calling ``save()`` after each. "ours" runs first on every cell (listed or not):
    its gradients are the reference the others are checked against. A row that would start after
    ``args.budget_s`` seconds from ``start`` is recorded as skipped, so is native above
    ``args.native_max_head_tokens``; an implementation that raises is recorded as an error and the next one runs.
    Each runs under its launch-table overrides; its row carries the cell's floors, its forward options and (for
    our Triton forward) the launch table as it ran. ``device="cpu"`` (tests only) runs :func:`profile_cell` on
    the CPU torch path."""
    import torch

    for cell in cells:
        member, V, T, B, *heads = cell.split(":")
        V, T, B = int(V), int(T), int(B)
        H = int(heads[0]) if heads else CELL_H
        ref = None
        for impl in ["ours"] + [i for i in impls if i != "ours"]:
            base = {"impl": impl, "member": member, "B": B, "H": H, "T": T, "K": CELL_K, "V": V}
            if time.time() - start > args.budget_s:
                rows.append({**base, "status": "skipped", "reason": "time budget"})
                continue
            row_options = resolved_fwd_options(impl)
            if impl == "native" and B * H * T > args.native_max_head_tokens:
                rows.append({**base, "status": "skipped",
                             "reason": f"native above {args.native_max_head_tokens} head-tokens (memory)"})
                continue
            launch = launch_overrides(impl)
            try:
                from lethe.kernels.gdn.launch_tables import overridden

                with overridden(launch):
                    row, grads = profile_cell(impl, member, B, H, T, CELL_K, V, args, ref, device=device)
                    if row_options:  # the Triton forward's launch table as it ran (KEND, DIRECT, ...)
                        from lethe.kernels.gdn.triton_fwd import FWD_LAUNCH

                        row["fwd_launch"] = {name: dict(cfg) for name, cfg in FWD_LAUNCH.items()}
                if launch:
                    row["launch_overrides"] = launch
            except Exception as exc:  # recorded, the next implementation still runs
                row, grads = {**base, "status": "error", "reason": f"{type(exc).__name__}: {str(exc)[:300]}"}, None
            if impl == "ours":
                ref = grads
                if impl not in impls:
                    continue
            row.update(floors(member, B, T, V, ceilings, H=H))
            if row_options:
                row["fwd_options"] = row_options
            rows.append(row)
            p = row.get("profile", {})
            print(f"[{time.time() - start:6.1f}s] {cell} {impl}: {row.get('status')} wall {row.get('bwd_wall_ms')} ms "
                  f"(fwd+bwd {row.get('fwd_bwd_wall_ms')} ms), "
                  f"{p.get('kernels')} kernels, kernel sum {p.get('kernel_sum_ms')} ms, idle {p.get('idle_in_span_ms')} ms",
                  flush=True)
            save()
            torch.cuda.empty_cache()
