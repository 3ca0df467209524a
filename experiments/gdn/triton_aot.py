"""Compile the GDN Triton kernels ahead of time for sm_90a (on the CPU) with the launch configuration the
wrappers choose, and report shared memory, registers and spills against the H200's limits.

    python experiments/gdn/triton_aot.py [--dvs 64,128] [--dtypes bfloat16,float32] [--json results/gdn/triton_aot.json]
    python experiments/gdn/triton_aot.py --override state_bwd_kernel:BV=64,num_warps=4,num_stages=3   # what-if

How: ``triton_chunk_fwd`` / ``triton_chunk_bwd`` run on CPU tensors inside ``lethe.aot.record_launches(execute=False)``
(nothing is launched; the wrappers' host code runs and every ``kernel[grid](...)`` is recorded with its arguments),
then ``lethe.aot.compile_launch`` compiles each recorded launch for the target exactly as the JIT would specialise
it, and ``lethe.aot.limits.check`` judges the figures (232,448 B shared memory per block, 255 registers per
thread on sm_90a). Compiled, not executed: these numbers say what a launch asks of the hardware, not how fast it is.

Every kernel but the input-preparation one (``prep_fwd_kernel``, which reads the inputs as given and writes
float32) receives float32 tensors, so bf16 and fp32 inputs give the same specialisation; the script checks that
instead of assuming it and compiles each distinct one once (the table's "inputs" column).
Needs TRITON_INTERPRET unset (an interpreted kernel cannot be compiled); the script clears it before importing
Triton.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

os.environ.pop("TRITON_INTERPRET", None)  # before triton is imported: the kernels must be JITFunctions

ROOT = Path(__file__).resolve().parents[2]

import torch
from lethe.kernels.gdn.fwd_options import WY_INVERSE_DEFAULT, WY_INVERSES

SCHEMA = "lethe.gdn.triton_aot/1"
KERNEL_ORDER = ("prep_fwd_kernel", "wy_fwd_kernel", "wy_fwd_blocked_kernel", "wy_a_kernel", "wy_inverse_kernel",
                "wy_apply_kernel", "state_fwd_kernel", "output_fwd_kernel", "state_bwd_local_kernel", "state_bwd_kernel",
                "intra_bwd_kernel", "bwd_tail_kernel",
                "sg_a_kernel", "sg_wu_kernel", "sg_state_fwd_kernel", "sg_output_kernel", "sg_state_bwd_kernel",
                "sg_intra_out_bwd_kernel", "sg_intra_wy_bwd_kernel")
VARIANTS = ("erase", "noerase", "scalar")


def record_wrapper_launches(K: int, V: int, C: int, dtype: torch.dtype, erase: bool = True, T: int | None = None,
                            wy_inverse: str = WY_INVERSE_DEFAULT, B: int | None = None):
    """The launches ``triton_chunk_fwd`` + ``triton_chunk_bwd`` make for one shape (recorded, not executed); with
    ``erase="scalar"`` those of the scalar-gate path (``lethe.kernels.gdn.scalar_gate``: KDA with a per-head g), by
    default at 64 sequences of 2 heads: its scans choose their V-block from the number of heads (at B*H = 128 the
    benchmark's configuration), the other kernels do not depend on the batch."""
    from lethe.kernels.gdn.triton_bwd import triton_chunk_bwd
    from lethe.kernels.gdn.triton_fwd import triton_chunk_fwd

    from lethe.aot import record_launches

    T = T or 4 * C
    B, H = B or (64 if erase == "scalar" else 1), 2
    gen = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*s, generator=gen).to(dtype)  # noqa: E731
    if erase == "scalar":
        from lethe.kernels.gdn.scalar_gate import sg_chunk_bwd, sg_chunk_fwd

        q, k, v = r(B, T, H, K), r(B, T, H, K), r(B, T, H, V)
        g, beta = (-0.05 * torch.rand(B, T, H, generator=gen)).to(dtype), torch.rand(B, T, H, generator=gen).to(dtype)
        with record_launches(execute=False) as launches:
            o, _, ctx = sg_chunk_fwd(q, k, v, g, beta, chunk=C)
            sg_chunk_bwd(torch.zeros_like(o), ctx)
        return list(launches)
    q, k, v = r(B, T, H, K), r(B, T, H, K), r(B, T, H, V)
    g = (-0.05 * torch.rand(B, T, H, K, generator=gen)).to(dtype)
    b = torch.rand(B, T, H, K, generator=gen).to(dtype) if erase else None
    w = torch.rand(B, T, H, V, generator=gen).to(dtype)
    from lethe.kernels.gdn.triton_fwd import decay_floor_check_off

    with record_launches(execute=False) as launches, decay_floor_check_off():
        o, _, ctx = triton_chunk_fwd(q, k, v, g, b, w, chunk=C, wy_inverse=wy_inverse)
        triton_chunk_bwd(torch.zeros_like(o), ctx)
    return list(launches)


def launch_config(rec) -> dict:
    """The launch options and the meta-parameters that choose tiles (what the table reports as 'config')."""
    keys = ("BV", "NVL", "num_warps", "num_stages", "PREC", "HAS_ERASE", "SPLIT")
    return {k: rec.kwargs[k] for k in keys if k in rec.kwargs}


def run(dvs=(64, 128), dtypes=("bfloat16", "float32"), K=128, C=64, target="sm_90a", overrides=None,
        kernels=None, variants=("erase", "noerase"), log=print, wy_inverse=WY_INVERSE_DEFAULT,
        ptx_dir: Path | None = None) -> dict:
    from lethe.kernels.gdn.launch_tables import entry_name, find_table, overridden

    from lethe.aot import compile_launch, compiled_ptx
    from lethe.aot.launches import specialize
    from lethe.aot.limits import limits_for

    overrides = overrides or {}
    rows, seen = [], {}
    for variant in variants:
        if variant not in VARIANTS:
            raise ValueError(f"unknown variant {variant!r}")
    for V, variant, dt in ((V, var, dt) for var in variants for V in dvs for dt in dtypes):
        with overridden(overrides):  # the wrappers derive their launches from the tables
            recs = record_wrapper_launches(K, V, C, getattr(torch, dt),
                                           erase="scalar" if variant == "scalar" else variant == "erase",
                                           wy_inverse=wy_inverse)
        for rec in recs:
            name = entry_name(rec.jit.fn.__name__, rec.kwargs)  # a scalar-gate variant by its own entry
            if kernels and name not in kernels:
                continue
            kwargs = dict(rec.kwargs)
            # keys that are launch arguments as well (BV, num_warps, PREC, ...); table-only keys such as KEND
            # reached the launch through the table above
            ov = overrides.get(name, {})
            table = find_table(name)
            unknown = sorted(set(ov) - set(kwargs) - set(table[name] if table else ()) - {"PREC"})
            if unknown:
                raise ValueError(f"override keys {unknown} are neither launch arguments of {name} nor keys of its "
                                 "launch-table entry")
            kwargs.update({k_: v_ for k_, v_ in ov.items() if k_ in kwargs or k_ == "PREC"})
            spec = specialize(rec.jit, target, rec.args, kwargs)
            key = (name, V, variant, repr(spec.signature), repr(spec.constexprs),
                   repr(sorted(spec.options.items())))
            if key in seen:  # same binary as an input dtype already compiled: say so, do not recompile
                seen[key]["input_dtypes"].append(dt)
                continue
            t0 = time.time()
            rep = compile_launch(rec.jit, target, rec.args, kwargs)
            if ptx_dir is not None and rep.error is None:  # the same compilation again, from Triton's cache
                ptx_dir.mkdir(parents=True, exist_ok=True)
                (ptx_dir / f"{name}_V{V}_{variant}_{dt}_{target}.ptx").write_text(
                    compiled_ptx(rec.jit, target, rec.args, kwargs))
            cfg = {k: kwargs[k] for k in ("BV", "NVL", "num_warps", "num_stages", "PREC", "HAS_ERASE", "SPLIT",
                                          "KEND_IN", "WRITE_KEND", "NATIVE") if k in kwargs}
            row = {"kernel": name, "K": K, "V": V, "chunk": C, "target": target, "variant": variant,
                   "input_dtypes": [dt], "config": cfg, "overridden": name in overrides,
                   "signature_dtypes": sorted({s for s in spec.signature.values() if s.startswith("*")}),
                   "shared_bytes": rep.shared_bytes, "registers": rep.registers, "spill_bytes": rep.spill_bytes,
                   "mma": rep.mma, "ptxas": rep.ptxas, "error": rep.error,
                   "violations": rep.violations(), "compile_s": round(time.time() - t0, 1)}
            seen[key] = row
            rows.append(row)
            log(f"{name:<18} V={V:<4} {variant:<8} {json.dumps(cfg):<66} smem {rep.shared_bytes} "
                f"regs {rep.registers} spill {rep.spill_bytes} "
                f"{'FITS' if not row['violations'] else row['violations']}")
    lim = limits_for(target)
    order = {n: i for i, n in enumerate(KERNEL_ORDER)}
    rows.sort(key=lambda r: (r["variant"] != "erase", order.get(r["kernel"], 99), r["V"]))
    import triton

    return {"schema": SCHEMA, "target": target, "triton": triton.__version__, "torch": torch.__version__,
            "limits": {"max_shared_bytes_per_block": lim.max_shared_bytes_per_block,
                       "max_registers_per_thread": lim.max_registers_per_thread},
            "all_fit": all(not r["violations"] for r in rows), "rows": rows}


def markdown_table(doc: dict) -> str:
    lines = ["| kernel | erase | d_v | inputs | config (BV, warps, stages, dot precision) | shared B | regs | "
             "spill B/thread | fits |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        c = r["config"]
        bv = f"{c['BV']}x{c['NVL']}" if c.get("NVL", 1) > 1 else c.get("BV", "-")  # V-blocks per program
        cfg = f"{bv}, {c.get('num_warps')}, {c.get('num_stages')}, {c.get('PREC')}"
        fits = "yes" if not r["violations"] else "**no**: " + "; ".join(r["violations"])
        er = {"erase": "yes", "noerase": "no", "scalar": "yes (scalar gate)"}[r["variant"]]
        ins = ", ".join(r.get("input_dtypes", []))
        lines.append(f"| `{r['kernel']}` | {er} | {r['V']} | {ins} | {cfg} | {r['shared_bytes']:,} | {r['registers']} | "
                     f"{r['spill_bytes']:,} | {fits} |" if r["error"] is None else
                     f"| `{r['kernel']}` | {er} | {r['V']} | {ins} | {cfg} | - | - | - | error: {r['error'][:80]} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dvs", default="64,128")
    ap.add_argument("--dtypes", default="bfloat16,float32", help="input dtypes handed to the wrappers")
    ap.add_argument("--dk", type=int, default=128)
    ap.add_argument("--chunk", type=int, default=64)
    ap.add_argument("--target", default="sm_90a")
    ap.add_argument("--kernels", default="", help="comma list; default: every kernel the wrappers launch")
    ap.add_argument("--override", action="append", default=[], help="kernel:KEY=VAL[,KEY=VAL] (what-if configs)")
    ap.add_argument("--variants", default="erase,noerase",
                    help="erase: b given (KDA/GDN launches); noerase: b=None (LA/GLA/SSD launches); scalar: the "
                         "scalar-gate path (KDA with a per-head g, kernels/gdn/scalar_gate.py)")
    ap.add_argument("--wy-inverse", choices=WY_INVERSES, default=WY_INVERSE_DEFAULT,
                    help="the forward's triangular-inverse kernels")
    ap.add_argument("--json", default="", help="write the report here (with a provenance block alongside)")
    ap.add_argument("--ptx-dir", default="", help="also write each compiled kernel's PTX into this folder")
    args = ap.parse_args(argv)
    from lethe.kernels.gdn.launch_tables import parse_overrides

    doc = run(dvs=[int(x) for x in args.dvs.split(",")], dtypes=args.dtypes.split(","), K=args.dk, C=args.chunk,
              target=args.target, overrides=parse_overrides(args.override),
              kernels=set(filter(None, args.kernels.split(","))), variants=tuple(args.variants.split(",")),
              wy_inverse=args.wy_inverse, ptx_dir=Path(args.ptx_dir) if args.ptx_dir else None)
    print(markdown_table(doc))
    print("all fit:", doc["all_fit"])
    if args.json:
        out = Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        from lethe import provenance

        provenance.write(out.with_name(out.stem + ".provenance.json"), experiment="gdn_triton_aot")
    return doc


if __name__ == "__main__":
    main()
