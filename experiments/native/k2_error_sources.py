"""Where the tensor-core K2's bf16 error comes from, and what it does to the gradients: K2 replayed in float64
with its rounding points rounded to bf16 all together, all but one, or as bf16 hi/lo pairs, plugged into the
float64 chunked backward on the GDN ladder's own inputs (CPU, about a minute).

K2 = lethe.kernels.gdn.chunked.wy_vjp_torch; the Hopper tensor-core K2 (kernels/gdn/native/k2_hopper_wgmma.py) holds
its inputs dd, S0 (= Hs), T, Xe, U and the intermediates dW, dT, Y in bf16 (the rounding points of
lethe.kernels.gdn.native.k2_model, which the H200 run matched: docs/native.md). For each case the script reports the
K2 outputs' error against the exact K2 and the end-to-end gradients' error against the exact float64 backward
(everything else exact), next to the ladder's 5e-3 pin -- the measurement that decides whether the kernel can
enter a backend, and with which operands split.

    python experiments/native/k2_error_sources.py --out results/native/k2_error_sources.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]

POINTS = ("dd", "S0", "T", "Xe", "U", "dW", "dT", "Y")
GRADS = ("dq", "dk", "dv", "dg", "db", "dw")


def _bf16(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.bfloat16).double()


def k2(dd, ctx, rounded=frozenset(), split=frozenset()):
    """K2 in float64 with the named rounding points rounded once to bf16 (``split``: as a bf16 hi/lo pair, about
    16 bits). Same products as :func:`lethe.kernels.gdn.chunked.wy_vjp_torch` (and as the kernel's, up to the
    accumulation order, which float64 makes immaterial here)."""
    def rnd(x, name):
        if name in split:
            hi = _bf16(x)
            return hi + _bf16(x - hi)
        return _bf16(x) if name in rounded else x

    S0 = rnd(ctx["Hs"], "S0")
    T = rnd(ctx["Tm"], "T")
    Xe = rnd(ctx["Xe"], "Xe")
    U = rnd(ctx["uc"], "U")
    dd = rnd(dd, "dd")
    C = T.shape[-1]
    dW = rnd(-(dd @ S0.transpose(-1, -2)), "dW")
    TT = T.transpose(-1, -2)
    dXe = TT @ dW
    du = TT @ dd
    dT = rnd(dW @ Xe.transpose(-1, -2) + dd @ U.transpose(-1, -2), "dT")
    Y = rnd(TT @ dT, "Y")
    strict = torch.tril(torch.ones(C, C, dtype=torch.bool), -1)
    dA = torch.where(strict, -(Y @ TT), torch.zeros((), dtype=Y.dtype))
    return dXe, du, dA


def err(a, r) -> float:
    return float((a - r).abs().max() / r.abs().max().clamp_min(1e-300))


def cases():
    everything = set(POINTS)
    out = [("all rounded (the kernel)", everything, set())]
    out += [(f"{p} exact", everything - {p}, set()) for p in POINTS]
    out += [("inputs exact, intermediates rounded", {"dW", "dT", "Y"}, set()),
            ("intermediates exact, inputs rounded", {"dd", "S0", "T", "Xe", "U"}, set()),
            ("dd, S0 as hi/lo pairs", everything, {"dd", "S0"}),
            ("dW, dT, Y as hi/lo pairs", everything, {"dW", "dT", "Y"}),
            ("all as hi/lo pairs", everything, everything)]
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--members", default="gdn,kda")
    ap.add_argument("--T", type=int, default=1024)
    ap.add_argument("--dvs", default="128,64")
    ap.add_argument("--seed", type=int, default=20260829)  # the ladder's default seed
    args = ap.parse_args(argv)
    from lethe.kernels.gdn import chunked
    from lethe.kernels.gdn import inputs as L
    from lethe.kernels.gdn.reference import gates_for_member

    rows = []
    for member in args.members.split(","):
        for V in (int(v) for v in args.dvs.split(",")):
            x = L.make_inputs(1, args.T, 2, 128, V, args.seed, "cpu", member)
            names, src = L.member_args(member, x)
            low = {n: _bf16(src[n]) for n in names}  # the ladder's bf16 inputs, exactly, in float64
            gf, bf, wf = gates_for_member(member, low["q"], low["v"], low.get("g"), low.get("b", low.get("beta")),
                                          low.get("w"))
            _, _, ctx = chunked.chunk_fwd(low["q"], low["k"], low["v"], gf, bf, wf, None, 64, None)
            do = _bf16(x["do"])
            exact = chunked.chunk_bwd(do, ctx)[:6]
            do_c = chunked._to_chunks(do, 64, torch.float64)
            dd = chunked.reverse_state_scan(do_c, ctx, None)[1]
            k2_exact = chunked.wy_vjp_torch(dd, ctx)
            for label, rounded, split in cases():
                got_k2 = k2(dd, ctx, rounded, split)
                grads = chunked.chunk_bwd(do, ctx, wy_vjp=lambda d, c, r=rounded, s=split: k2(d, c, r, s))[:6]
                row = {"member": member, "d_v": V, "T": args.T, "case": label,
                       "rounded": sorted(rounded), "split": sorted(split)}
                for name, a, r in zip(("dXe", "du", "dA"), got_k2, k2_exact, strict=True):
                    row[f"{name}_rel_vs_exact"] = err(a, r)
                # the gates' gradients as the member sees them would need the broadcast undone; the general
                # recurrence's gradients (g, b, w as K2 reaches them) are what K2 changes
                row["grads_rel_vs_exact"] = {n: err(a, r) for n, a, r in zip(GRADS, grads, exact, strict=True)
                                             if r is not None}
                row["worst_grad_rel"] = max(row["grads_rel_vs_exact"].values())
                rows.append(row)
                print(f"{member:4s} V{V:<4d} {label:38s} K2 dXe {row['dXe_rel_vs_exact']:.1e} du "
                      f"{row['du_rel_vs_exact']:.1e} dA {row['dA_rel_vs_exact']:.1e} | worst grad "
                      f"{row['worst_grad_rel']:.1e}", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps({"schema": "lethe.native.k2_error_sources/1", "rows": rows,
                                              "pin_e2e": L.PIN_E2E,
                                              "command": " ".join(["python", "experiments/native/k2_error_sources.py"]
                                                                  + (argv or sys.argv[1:]))},
                                             indent=1, sort_keys=True) + "\n")
    return rows


if __name__ == "__main__":
    main()
