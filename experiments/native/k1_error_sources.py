"""Where K1's bf16 error comes from: the reverse state scan replayed in float64 with its operands rounded to bf16
all together, or all but one, on the GDN ladder's own inputs (CPU, a few seconds).

K1 = lethe.kernels.gdn.chunked.reverse_state_scan; the tensor-core kernel reads P, Kend, Qg, W and per-chunk copies of
dS and d delta in bf16. Leaving one of them exact and measuring d delta's and dS0's error against the exact scan
says which rounding dominates -- the measurement behind the kernel's split-operand mode (docs/native.md).

    python experiments/native/k1_error_sources.py --out results/native/k1_error_sources.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]

ROUNDED = ("P", "Kend", "Qg", "W", "dS copy", "dd copy")


def scan(ctx, do_c, rounded: set[str], split: set[str] = frozenset()):
    """K1 in float64 with the named operands rounded once to bf16 (``split``: as a bf16 hi/lo pair)."""
    def rnd(x, name):
        if name in split:
            hi = x.to(torch.bfloat16).double()
            return hi + (x - hi).to(torch.bfloat16).double()
        return x.to(torch.bfloat16).double() if name in rounded else x

    P, Ke, Qg, GC = rnd(ctx["P"], "P"), rnd(ctx["Kend"], "Kend"), rnd(ctx["Qg"], "Qg"), ctx["GC"]
    Wm = None if ctx["Wm"] is None else rnd(ctx["Wm"], "W")
    B, H, N, _, V = do_c.shape
    K = Qg.shape[-1]
    dS = torch.zeros(B, H, K, V, dtype=torch.float64)
    dds = [None] * N
    for n in reversed(range(N)):
        dS_op = rnd(dS, "dS copy")
        dS = GC[:, :, n, :, None] * dS
        dd = P[:, :, n].transpose(-1, -2) @ do_c[:, :, n] + Ke[:, :, n] @ dS_op
        dds[n] = dd
        dS = dS + Qg[:, :, n].transpose(-1, -2) @ do_c[:, :, n]
        if Wm is not None:
            dS = dS + Wm[:, :, n].transpose(-1, -2) @ rnd(-dd, "dd copy")
    return torch.stack(dds, 2), dS


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--members", default="kda,gla")
    ap.add_argument("--T", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=20260829)  # the ladder's default seed
    args = ap.parse_args(argv)
    from lethe.kernels.gdn import chunked
    from lethe.kernels.gdn import inputs as L
    from lethe.kernels.gdn.reference import gates_for_member

    def err(a, r):
        return float((a - r).abs().max() / r.abs().max().clamp_min(1e-300))

    rows = []
    for member in args.members.split(","):
        x = L.make_inputs(1, args.T, 2, 128, 128, args.seed, "cpu", member)
        names, src = L.member_args(member, x)
        low = {n: src[n].to(torch.bfloat16).double() for n in names}  # the ladder's bf16 inputs, exactly
        gf, bf, wf = gates_for_member(member, low["q"], low["v"], low.get("g"), low.get("b", low.get("beta")),
                                      low.get("w"))
        _, _, ctx = chunked.chunk_fwd(low["q"], low["k"], low["v"], gf, bf, wf, None, 64, None)
        do_c = chunked._to_chunks(x["do"].to(torch.bfloat16).double(), 64, torch.float64)
        ref = chunked.reverse_state_scan(do_c, ctx, None)
        cases = [("all rounded", set(ROUNDED), set())]
        cases += [(f"{name} exact", set(ROUNDED) - {name}, set()) for name in ROUNDED]
        cases += [("P, Qg as hi/lo pairs", set(ROUNDED), {"P", "Qg"})]
        for label, rounded, split in cases:
            dd, dS0 = scan(ctx, do_c, rounded, split)
            rows.append({"member": member, "d_v": 128, "T": args.T, "case": label,
                         "dd_rel_vs_exact": err(dd, ref[1]), "dS0_rel_vs_exact": err(dS0, ref[2])})
            print(f"{member:4s} {label:22s} dd {rows[-1]['dd_rel_vs_exact']:.2e}  dS0 {rows[-1]['dS0_rel_vs_exact']:.2e}",
                  flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps({"schema": "lethe.native.k1_error_sources/1", "rows": rows,
                                              "command": " ".join(["python", "experiments/native/k1_error_sources.py"]
                                                                  + (argv or sys.argv[1:]))},
                                             indent=1, sort_keys=True) + "\n")
    return rows


if __name__ == "__main__":
    main()
