"""Which of the Triton forward's products can run as single-pass TF32: the forward replayed in float64 with the
operands of chosen products rounded to TF32, its saved tensors plugged into the float64 chunked backward, on the
end-to-end ladder's own inputs (CPU, a few minutes).

The Triton forward (kernels/gdn/triton_fwd.py) has four groups of tensor-core products:
  A       A = strict_tril(Xe Kg^T)                         (wy_a_kernel)
  WU      W = T Xe, U = T u                                (wy_apply_kernel)
  state   delta = U - W S, S <- Diag(Gamma_C) S + Kend^T delta  (state_fwd_kernel, sequential over chunks)
  output  P = tril(Qg Kg^T), o = Qg S + P delta            (output_fwd_kernel)
By default each runs in 3xTF32 (about float32 accuracy; "exact" here). Single-pass TF32 keeps 10 mantissa bits of
each operand. On the H200, ``dot_precision="tf32"`` (all four, and -- through the saved ctx -- the backward's
operand kernel for K1, which forms P = tril(Qg Kg^T) at the forward's precision: group "K1_P" here) put 2 of 14
bf16 ladder arms past the 5e-3 pin (results/gdn/fwd_variants/) -- this script says which group is responsible and
whether a subset is safe. The backward reads T, W, the states S and delta from the forward (the Triton backward recomputes
P, Kend and the gates' products itself), so those four tensors carry the forward's error into the gradients; o
carries its own.

For each ladder arm (member, d_v, T as in experiments/gdn/ladder.py, bf16 inputs, seed 20260829) and each case it
reports the error against the exact float64 forward + backward of the output and of the member's gradients: alone
("alone": everything else exact), and after rounding to bf16 ("bf16": what the ladder compares, without the
pipeline's other error sources, so a lower bound), next to the bf16 rounding of the exact values ("floor"). Rounding
mode: truncation to TF32 (what the tensor core does with fp32 operands it reads as TF32), and round-to-nearest for
comparison. A calibration block puts the H200 ladders (3xTF32 and all-TF32 forward) beside the replay.

    python experiments/gdn/fwd_error_sources.py --out results/gdn/fwd_error_sources.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]

STAGES = ("A", "WU", "state", "output")
K1_P = "K1_P"  # the backward's P for K1 (kernels/gdn/native/k1_operands.py), made at the forward's dot precision
SCHEMA = "lethe.gdn.fwd_error_sources/1"


def tf32(x: torch.Tensor, mode: str = "trunc") -> torch.Tensor:
    """``x`` as the tensor core sees a float32 operand in TF32 (8-bit exponent, 10-bit mantissa), back in float64:
    the value is first a float32 (what the kernel holds), then its 13 low mantissa bits are dropped ("trunc") or
    rounded to nearest, ties away from zero ("rna", what cvt.rna.tf32.f32 does)."""
    if mode not in ("trunc", "rna"):
        raise ValueError(f"unknown TF32 rounding {mode!r}")
    bits = x.float().contiguous().view(torch.int32)
    if mode == "rna":
        bits = bits + 0x1000  # half a TF32 unit on the magnitude bits (sign-magnitude: both signs)
    return (bits & ~0x1FFF).view(torch.float32).double()


def replay_forward(ctx: dict, rounded: frozenset, mode: str = "trunc") -> dict:
    """The Triton forward's products in float64 from the exact chunked ctx (``lethe.kernels.gdn.chunked.chunk_fwd``),
    with the operands of the ``rounded`` product groups rounded to TF32. Returns o (chunked) and the tensors the
    backward reads from the forward: Tm, Wm, Hs, delta."""
    def R(x, stage):
        return tf32(x, mode) if stage in rounded else x

    qc, kc, uc, ec, gam, Gam = (ctx[n] for n in ("qc", "kc", "uc", "ec", "gam", "Gam"))
    C = qc.shape[-2]
    strict = torch.ones(C, C, dtype=torch.bool).tril(-1)
    incl = torch.ones(C, C, dtype=torch.bool).tril()
    Kg = kc * torch.exp(-gam)
    if ec is not None:
        Xe = ctx["Xe"]
        A = (R(Xe, "A") @ R(Kg, "A").transpose(-1, -2)) * strict
        eye = torch.eye(C, dtype=A.dtype)
        Tm = torch.linalg.solve_triangular(eye + A, eye.expand_as(A), upper=False, unitriangular=True)
        Wm = R(Tm, "WU") @ R(Xe, "WU")
        Um = R(Tm, "WU") @ R(uc, "WU")
    else:
        Tm = Wm = None
        Um = uc
    Kend, GC = ctx["Kend"], ctx["GC"]
    B, H, N, _, V = uc.shape
    S = torch.zeros(B, H, qc.shape[-1], V, dtype=qc.dtype)
    hs, deltas = [], []
    for n in range(N):
        hs.append(S)
        d = Um[:, :, n] if Wm is None else Um[:, :, n] - R(Wm[:, :, n], "state") @ R(S, "state")
        deltas.append(d)
        S = GC[:, :, n, :, None] * S + R(Kend[:, :, n], "state").transpose(-1, -2) @ R(d, "state")
    Hs, delta = torch.stack(hs, dim=2), torch.stack(deltas, dim=2)
    Qg = ctx["Qg"]
    P = (R(Qg, "output") @ R(Kg, "output").transpose(-1, -2)) * incl
    o = R(Qg, "output") @ R(Hs, "output") + R(P, "output") @ R(delta, "output")
    return {"o": o, "Tm": Tm, "Wm": Wm, "Hs": Hs, "delta": delta}


def perturbed(ctx: dict, rounded: frozenset, mode: str = "trunc") -> tuple[torch.Tensor, dict]:
    """o (chunked) and the ctx the float64 backward runs on when the ``rounded`` groups take TF32 operands: the
    forward's saved T, W, states and delta from :func:`replay_forward`, and with ``K1_P`` the reverse scan's P
    (only the scan reads ctx["P"]; the pair VJP uses Ei, q and k)."""
    rep = replay_forward(ctx, rounded, mode)
    ctx2 = {**ctx, "Tm": rep["Tm"], "Wm": rep["Wm"], "Hs": rep["Hs"], "delta": rep["delta"]}
    if K1_P in rounded:
        Kg = ctx["kc"] * torch.exp(-ctx["gam"])
        incl = torch.ones(ctx["C"], ctx["C"], dtype=torch.bool).tril()
        ctx2["P"] = (tf32(ctx["Qg"], mode) @ tf32(Kg, mode).transpose(-1, -2)) * incl
    return rep["o"], ctx2


def rel(a: torch.Tensor, r: torch.Tensor) -> float:
    return float((a - r).abs().max() / r.abs().max().clamp_min(1e-300))


def _bf16(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.bfloat16).double()


def member_outputs(member, leaves, names, o, general_grads):
    """o and the member's own gradients: the general recurrence's (dq, dk, dv, dg, db, dw) taken back through the
    member's gate broadcast (lethe.kernels.gdn.reference.gates_for_member), as the ladder's autograd sees them."""
    from lethe.kernels.gdn.reference import gates_for_member

    dq, dk, dv, dg, db, dw = general_grads
    gf, bf, wf = gates_for_member(member, leaves["q"], leaves["v"], leaves.get("g"), leaves.get("b"),
                                  leaves.get("w"))
    outs, grads_out = [], []
    for t, d in ((gf, dg), (bf, db), (wf, dw)):
        if t is not None and t.requires_grad:
            outs.append(t)
            grads_out.append(d)
    gate_names = [n for n in names if n in ("g", "b", "w")]
    got = dict(zip(gate_names, torch.autograd.grad(outs, [leaves[n] for n in gate_names], grads_out,
                                                   allow_unused=True), strict=True)) if gate_names else {}
    res = {"o": o, "dq": dq, "dk": dk, "dv": dv}
    res.update({"d" + n: got[n] for n in gate_names})
    return res


H200_VARIANT = "all four + K1's P (the H200 tf32 variant)"


def cases():
    out = [("none (3xTF32 everywhere)", frozenset(), "trunc"),
           (H200_VARIANT, frozenset(STAGES) | {K1_P}, "trunc"),
           ("all four forward groups", frozenset(STAGES), "trunc"),
           ("K1's P only", frozenset({K1_P}), "trunc")]
    out += [(f"{s} only", frozenset({s}), "trunc") for s in STAGES]
    out += [("all but output", frozenset(STAGES) - {"output"}, "trunc"),
            ("all four, round-to-nearest", frozenset(STAGES), "rna"),
            ("output only, round-to-nearest", frozenset({"output"}), "rna")]
    # the output kernel runs TF32 rounded to nearest by default since the eighth build: what could join it
    out += [(f"output + {s}, round-to-nearest", frozenset({"output", s}), "rna") for s in ("A", "WU", "state", K1_P)]
    out += [("all four + K1's P, round-to-nearest", frozenset(STAGES) | {K1_P}, "rna")]
    return out


def run_arm(member, V, T, seed, log=print) -> list[dict]:
    from lethe.kernels.gdn import chunked
    from lethe.kernels.gdn import inputs as L
    from lethe.kernels.gdn.reference import gates_for_member

    x = L.make_inputs(1, T, 2, 128, V, seed, "cpu", member)
    names, src = L.member_args(member, x)
    low = {n: _bf16(src[n]) for n in names}  # the ladder's bf16 inputs, exactly, in float64
    leaves = {n: t.clone().requires_grad_() for n, t in low.items()}
    gf, bf, wf = gates_for_member(member, low["q"], low["v"], low.get("g"), low.get("b"), low.get("w"))
    o_ex, _, ctx = chunked.chunk_fwd(low["q"], low["k"], low["v"], gf, bf, wf, None, 64, None)
    do = _bf16(x["do"])
    exact = member_outputs(member, leaves, names, o_ex, chunked.chunk_bwd(do, ctx)[:6])
    floor = {n: rel(_bf16(t), t) for n, t in exact.items()}
    rows = []
    for label, rounded, mode in cases():
        t0 = time.time()
        o_c, ctx2 = perturbed(ctx, rounded, mode)
        o2 = chunked._from_chunks(o_c, T)
        got = member_outputs(member, leaves, names, o2, chunked.chunk_bwd(do, ctx2)[:6])
        alone = {n: rel(got[n], exact[n]) for n in exact}
        bf = {n: rel(_bf16(got[n]), exact[n]) for n in exact}
        rows.append({"member": member, "d_v": V, "T": T, "case": label, "rounded": sorted(rounded), "mode": mode,
                     "alone": alone, "bf16": bf, "floor": floor, "worst_alone": max(alone.values()),
                     "worst_bf16": max(bf.values()), "worst_bf16_tensor": max(bf, key=bf.get),
                     "seconds": round(time.time() - t0, 1)})
        log(f"{member:4s} V{V:<4d} T{T:<5d} {label:36s} worst alone {rows[-1]['worst_alone']:.2e} | bf16 "
            f"{rows[-1]['worst_bf16']:.2e} ({rows[-1]['worst_bf16_tensor']}) | o alone {alone['o']:.1e}")
    return rows


def default_ladder_errors() -> dict:
    """The H200's bf16 end-to-end errors of the forward with every product at 3xTF32 -- the default until the
    output kernel's products became TF32 (rounded to nearest) on this replay's evidence -- per arm and tensor
    (results/gdn/fwd_variants/ladder_htc_split_otf32x3.json, run at 04c7855)."""
    path = ROOT / "results/gdn/fwd_variants/ladder_htc_split_otf32x3.json"
    if not path.exists():
        return {}
    return {(r["member"], r["V"], r["T"]): r["errors"] for r in json.loads(path.read_text())["rows"]
            if r.get("rung") == "e2e" and r.get("dtype") == "bfloat16"}


def calibration(rows) -> list[dict]:
    """The H200 ladders beside the replay, arm by arm: 3xTF32 forward (results/gdn/fwd_variants/ladder_htc_blocked
    .json, the same forward products as the default up to the inverse's block order) and TF32
    (ladder_htc_tf32.json, row inverse), bf16 arms. Per tensor, the replay's error of the H200 variant alone should
    bound the H200's increase (max|x' - r| <= max|x - r| + max|x' - x|, up to the difference between the two runs'
    other rounding): ``bound_holds`` says where it does."""
    out = []
    src = {"3xtf32": ROOT / "results/gdn/fwd_variants/ladder_htc_blocked.json",
           "tf32": ROOT / "results/gdn/fwd_variants/ladder_htc_tf32.json"}
    gpu = {}
    for key, path in src.items():
        if not path.exists():
            continue
        for r in json.loads(path.read_text())["rows"]:
            if r.get("rung") == "e2e" and r.get("dtype") == "bfloat16":
                gpu.setdefault((r["member"], r["V"], r["T"]), {})[key] = r["errors"]
    for (member, V, T), g in sorted(gpu.items()):
        mine = {r["case"]: r for r in rows if (r["member"], r["d_v"], r["T"]) == (member, V, T)}
        if H200_VARIANT not in mine or "3xtf32" not in g or "tf32" not in g:
            continue
        alone = mine[H200_VARIANT]["alone"]
        bound = {n: bool(g["tf32"][n] <= g["3xtf32"][n] + alone[n] + 1e-9) for n in g["tf32"] if n in alone}
        out.append({"member": member, "d_v": V, "T": T, "h200_3xtf32": g["3xtf32"], "h200_tf32": g["tf32"],
                    "replay_variant_alone": alone, "bound_holds": bound,
                    "replay_none_bf16": mine["none (3xTF32 everywhere)"]["bf16"]})
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--arms", default="gdn:256,gdn:1024,gdn:4096,la:1024,gla:1024,ssd:1024,kda:1024",
                    help="member:T, as the ladder's end-to-end rung")
    ap.add_argument("--dvs", default="64,128")
    ap.add_argument("--seed", type=int, default=20260829)  # the ladder's default seed
    args = ap.parse_args(argv)
    rows, t0 = [], time.time()
    for V in (int(v) for v in args.dvs.split(",")):
        for arm in args.arms.split(","):
            member, T = arm.split(":")
            rows += run_arm(member, V, int(T), args.seed)
    pin = 5e-3
    base = default_ladder_errors()
    summary = {}
    for label, _, _ in cases():
        sel = [r for r in rows if r["case"] == label]
        for r in sel:  # the H200 default's error plus this case's own, tensor by tensor: a bound, not a guess
            b = base.get((r["member"], r["d_v"], r["T"]))
            r["bound_with_h200_default"] = None if b is None else max(b[n] + r["alone"][n] for n in r["alone"])
        bounded = [r["bound_with_h200_default"] for r in sel if r["bound_with_h200_default"] is not None]
        summary[label] = {"arms": len(sel), "within_pin_bf16": sum(r["worst_bf16"] <= pin for r in sel),
                          "worst_bf16": max(r["worst_bf16"] for r in sel),
                          "worst_alone": max(r["worst_alone"] for r in sel),
                          "arms_with_bound": len(bounded), "within_pin_by_bound": sum(x <= pin for x in bounded),
                          "worst_bound": max(bounded) if bounded else None}
    doc = {"schema": SCHEMA, "rows": rows, "summary": summary, "calibration": calibration(rows), "pin_e2e": pin,
           "seconds": round(time.time() - t0, 1),
           "command": " ".join(["python", "experiments/gdn/fwd_error_sources.py"] + (argv or sys.argv[1:]))}
    if args.out:
        from lethe import provenance

        out = Path(args.out)
        out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        provenance.write(out.with_name(out.stem + ".provenance.json"), command=doc["command"],
                         experiment="gdn-fwd-error-sources")
    for label, s in summary.items():
        wb = "-" if s["worst_bound"] is None else f"{s['worst_bound']:.2e}"
        print(f"{label:42s} worst alone {s['worst_alone']:.2e} | bf16 (lower bound) {s['within_pin_bf16']}/"
              f"{s['arms']} within the pin | H200 default + alone (upper bound) {s['within_pin_by_bound']}/"
              f"{s['arms_with_bound']}, worst {wb}")
    return doc


if __name__ == "__main__":
    main()
