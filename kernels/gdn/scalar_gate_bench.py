"""The scalar-gate benchmark's steps (experiments/gdn/scalar_gate_bench.py drives them into
results/gdn/scalar_gate/): the implementations it compares, the correctness check before anything is timed, the
timing of one cell through the one timing runner (:mod:`lethe.perf.timing`), the scalar path's kernels under
torch.profiler, and launch variants checked against the default before they are timed.

Every step reads the benchmark's sizes from a :class:`BenchConfig` (the driver builds it from its flags).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from lethe.kernels.gdn.bench import bench_inputs, bypass, fla_fn, ours_fn
from lethe.kernels.gdn.inputs import rel_err
from lethe.perf.timing import summary_ms, time_ms, wall_s, warm

SCHEMA = "lethe.gdn.scalar_gate_bench/1"
#: The ladder's end-to-end pin, per tensor, against float64.
PIN = 5e-3


@dataclass(frozen=True)
class BenchConfig:
    """The sizes every step shares: heads ``H`` and head dim ``K`` (d_k); ``head_tokens`` = B*H*T of a timed
    cell and ``check_head_tokens`` of a checked one; ``sets`` input sets rotated over ``reps`` rounds each after
    ``warmup`` untimed iterations; a variant is timed when within ``variant_rel`` of the default."""

    H: int = 2
    K: int = 128
    seed: int = 0
    head_tokens: int = 2**20
    check_head_tokens: int = 2**20
    sets: int = 3
    reps: int = 5
    warmup: int = 3
    variant_rel: float = 1e-2
    device: str = "cuda"

    @classmethod
    def from_args(cls, args) -> BenchConfig:
        """The config from a namespace holding (at least) these field names."""
        return cls(**{f.name: getattr(args, f.name) for f in fields(cls) if hasattr(args, f.name)})


def impl_fn(impl: str):
    """(forward function ``fn(leaves, scale)``, whether it needs fla's #640 guard lifted) of one implementation:
    ``ours`` (chunk_family on Triton: the scalar-gate kernels), ``general`` (gate_form="general": our per-channel
    kernels), ``general-tc`` (the same on hybrid-tc) or ``fla`` (chunk_gated_delta_rule)."""
    if impl == "fla":
        return fla_fn("sgdn"), True
    if impl == "ours":
        return ours_fn("sgdn", "triton", 64), False
    if impl == "general":
        return ours_fn("sgdn", "triton", 64, gate_form="general"), False
    if impl == "general-tc":
        return ours_fn("sgdn", "hybrid-tc", 64, gate_form="general"), False
    raise ValueError(impl)


def run_grads(fn, guarded, leaves, do, scale) -> dict:
    """o and every gradient (named d<input>) of one forward and backward with upstream gradient ``do``."""
    with bypass(guarded):
        o = fn(leaves, scale)
        grads = torch.autograd.grad(o, list(leaves.values()), do)
    return {"o": o.detach(), **{f"d{n}": g for n, g in zip(leaves, grads, strict=True)}}


def correctness(impls, V, T, cfg: BenchConfig, log) -> list[dict]:
    """First head of the first sequence against float64 (heads and sequences are independent): max-relative
    error per tensor against :data:`PIN`, finiteness, and for ``ours`` a bitwise repeat."""
    B = max(1, cfg.check_head_tokens // (cfg.H * T))
    leaves, do = bench_inputs("sgdn", B, T, cfg.H, cfg.K, V, torch.bfloat16, torch.bfloat16, cfg.seed, cfg.device)
    scale = cfg.K ** -0.5
    sl = lambda t: t[0:1, :, 0:1]  # noqa: E731
    x64 = {n: sl(t.detach()).double().requires_grad_() for n, t in leaves.items()}
    ref = run_grads(ours_fn("sgdn", "torch", 64), False, x64, sl(do).double(), scale)
    rows = []
    for impl in impls:
        fn, guarded = impl_fn(impl)
        got = run_grads(fn, guarded, leaves, do, scale)
        errs = {n: rel_err(sl(got[n]), ref[n]) for n in ref}
        row = {"impl": impl, "V": V, "T": T, "B": B, "H": cfg.H,
               "errors_vs_float64": {n: float(f"{e:.4g}") for n, e in errs.items()},
               "worst": max(errs.values()), "worst_tensor": max(errs, key=errs.get),
               "finite": all(bool(torch.isfinite(x).all()) for x in got.values())}
        row["within_pin"] = row["finite"] and row["worst"] <= PIN
        if impl == "ours":
            again = run_grads(fn, guarded, leaves, do, scale)
            row["bitwise_repeat"] = all(torch.equal(got[n], again[n]) for n in got)
        rows.append(row)
        log(f"check {impl:<8} V={V} T={T}: worst {row['worst']:.3e} ({row['worst_tensor']}) finite={row['finite']}"
            + (f" repeat-bitwise={row['bitwise_repeat']}" if "bitwise_repeat" in row else ""))
    return rows


def time_impl(impl, V, T, cfg: BenchConfig) -> dict:
    """Forward, backward and forward + backward of one implementation at one cell: the first call's seconds, then
    after a warm-up the median and spread over ``reps * sets`` rounds rotating over the input sets."""
    B = cfg.head_tokens // (cfg.H * T)
    fn, guarded = impl_fn(impl)
    cuda = cfg.device == "cuda"
    sets = [bench_inputs("sgdn", B, T, cfg.H, cfg.K, V, torch.bfloat16, torch.bfloat16, cfg.seed + i, cfg.device)
            for i in range(cfg.sets)]
    scale = cfg.K ** -0.5

    def fwd(i):
        with bypass(guarded):
            return fn(sets[i][0], scale)

    def bwd(o, i):
        with bypass(guarded):
            return torch.autograd.grad(o, list(sets[i][0].values()), sets[i][1])

    first = wall_s(lambda: bwd(fwd(0), 0), cuda=cuda)
    warm(lambda i: bwd(fwd(i % cfg.sets), i % cfg.sets), cfg.warmup, cuda=cuda)

    def timed(region):
        # bwd: the forward is each iteration's untimed setup; fwd runs under no_grad
        n = cfg.reps * cfg.sets
        if region == "bwd":
            walls = time_ms(lambda rep, o: bwd(o, rep % cfg.sets), n, cuda=cuda,
                            setup=lambda rep: fwd(rep % cfg.sets))
        elif region == "fwd":
            def fwd_only(rep):
                with torch.no_grad():
                    fwd(rep % cfg.sets)

            walls = time_ms(fwd_only, n, cuda=cuda)
        else:
            walls = time_ms(lambda rep: bwd(fwd(rep % cfg.sets), rep % cfg.sets), n, cuda=cuda)
        t = summary_ms(walls)
        return t["median_ms"], t["spread_ms"]

    row = {"impl": impl, "V": V, "T": T, "B": B, "H": cfg.H, "K": cfg.K, "head_tokens": B * cfg.H * T,
           "first_call_s": round(first, 2), "input_sets": cfg.sets, "rounds": cfg.reps * cfg.sets}
    for region in ("fwd", "bwd", "fwd_bwd"):
        row[f"{region}_ms"], row[f"{region}_spread_ms"] = timed(region)
    return row


def kernel_breakdown(V, T, cfg: BenchConfig) -> dict:
    """The scalar path's device kernels by name, forward and backward, summed over one call each (CUDA only)."""
    from torch.profiler import ProfilerActivity, profile

    B = cfg.head_tokens // (cfg.H * T)
    fn, _ = impl_fn("ours")
    leaves, do = bench_inputs("sgdn", B, T, cfg.H, cfg.K, V, torch.bfloat16, torch.bfloat16, cfg.seed, cfg.device)
    scale = cfg.K ** -0.5
    o = fn(leaves, scale)
    torch.autograd.grad(o, list(leaves.values()), do)
    torch.cuda.synchronize()
    out = {}
    for region in ("fwd", "bwd"):
        o = fn(leaves, scale) if region == "bwd" else None
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            if region == "fwd":
                o = fn(leaves, scale)
            else:
                torch.autograd.grad(o, list(leaves.values()), do)
            torch.cuda.synchronize()
        per = {}
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                per[e.name] = per.get(e.name, 0.0) + e.device_time * 1e-3
        out[region] = {n: round(v, 4) for n, v in sorted(per.items(), key=lambda kv: -kv[1])}
        out[f"{region}_sum_ms"] = round(sum(per.values()), 4)
    return out


def variants(specs, V, T, cfg: BenchConfig, log) -> list[dict]:
    """Each launch variant (``name=kernel:KEY=VAL[,KEY=VAL][;kernel:...]``) of the scalar path: its outputs and
    gradients against the default's (max-relative difference, bitwise or not), timed when within
    ``cfg.variant_rel``; a variant that does not compile or launch is recorded with its error."""
    from lethe.kernels.gdn.launch_tables import overridden, overrides_from_cli

    B = max(1, cfg.head_tokens // (cfg.H * T))
    leaves, do = bench_inputs("sgdn", B, T, cfg.H, cfg.K, V, torch.bfloat16, torch.bfloat16, cfg.seed, cfg.device)
    scale = cfg.K ** -0.5
    fn, _ = impl_fn("ours")
    base = run_grads(fn, False, leaves, do, scale)
    rows = []
    for spec in specs:
        name, _, items = spec.partition("=")
        ov = overrides_from_cli(items.split(";"), option="--variant")
        with overridden(ov):
            try:
                got = run_grads(fn, False, leaves, do, scale)
            except Exception as exc:  # a variant that does not compile or launch is recorded, not fatal
                rows.append({"variant": name, "overrides": ov, "V": V, "T": T, "error": repr(exc)[:300]})
                log(f"variant {name}: {exc!r}"[:200])
                continue
            diff = max(rel_err(got[n], base[n]) for n in base)
            bitwise = all(torch.equal(got[n], base[n]) for n in base)
            row = {"variant": name, "overrides": ov, "V": V, "T": T, "max_rel_vs_default": diff, "bitwise": bitwise}
            if diff <= cfg.variant_rel:
                row.update({k: v for k, v in time_impl("ours", V, T, cfg).items()
                            if k.endswith("_ms") or k.endswith("spread_ms")})
        rows.append(row)
        log(f"variant {name} V={V} T={T}: diff {diff:.2e} bitwise={bitwise} fwd_bwd {row.get('fwd_bwd_ms')}")
    return rows
