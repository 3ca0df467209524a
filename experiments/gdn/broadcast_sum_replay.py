"""CPU replay: what summing a broadcast gate's gradient after the bf16 rounding cost, and what summing first gives.

KDA's beta is broadcast into the general recurrence's b (over d_k) and w (over d_v), a per-head decay into g (over
d_k); their gradients are sums over those axes. Until 621acc8 the sums were autograd's, over gradients already
rounded to bf16; now the autograd Function sums in float32 and rounds once. This replays both on the float32 torch
path (no TF32 anywhere) with fla_compare's inputs and metric against the float64 oracle, beside the error of the
oracle itself rounded to bf16 (the floor any bf16 result has), for the cells where the H200 runs found the gate
gradients worst (docs/gdn.md §8).

    python experiments/gdn/broadcast_sum_replay.py [--cells sgdn:128:4096,kda:64:1024,sgdn:128:1024]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
from lethe.kernels.gdn.bench import oracle_fn, ours_fn, parse_cells, rounded_inputs

ROOT = Path(__file__).resolve().parents[2]


def replay_cell(member: str, V: int, T: int, K: int = 128, H: int = 2, seed: int = 20260829) -> dict:
    """Gate-gradient errors of the float32 torch path, summed after rounding ("before") and before ("after")."""
    from lethe.kernels.gdn import autograd

    if member not in ("sgdn", "kda"):
        raise SystemExit(f"--cells: {member!r}: the replay covers the beta-carrying members sgdn and kda")
    names = ("q", "k", "v", "g", "beta")
    low, do = rounded_inputs(member, 1, T, H, K, V, seed, torch.bfloat16, "cpu")
    scale = K ** -0.5
    ref_leaves = {n: t.double().requires_grad_() for n, t in low.items()}
    ref = oracle_fn(member)(ref_leaves, scale)
    ref_g = dict(zip(names, torch.autograd.grad(ref, list(ref_leaves.values()), do.double()), strict=True))

    def grads():
        lv = {n: t.clone().requires_grad_() for n, t in low.items()}
        o = ours_fn(member, "torch", 64)(lv, scale)
        return dict(zip(names, torch.autograd.grad(o, list(lv.values()), do), strict=True))

    after = grads()
    real = autograd.summed_gradients
    autograd.summed_gradients = lambda m, own: ()  # every gradient rounded to bf16 before the sums, as before
    try:
        before = grads()
    finally:
        autograd.summed_gradients = real

    def err(t, n):
        return float((t.double() - ref_g[n]).abs().max() / ref_g[n].abs().max())

    return {"member": member, "V": V, "T": T, "K": K, "H": H, "seed": seed,
            "gates": {"d" + n: {"summed_after_rounding": err(before[n], n), "summed_then_rounded": err(after[n], n),
                                "oracle_rounded": err(ref_g[n].to(torch.bfloat16), n)} for n in ("g", "beta")}}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", default="sgdn:128:4096,kda:64:1024,sgdn:128:1024")
    ap.add_argument("--out", default=str(ROOT / "results" / "gdn" / "broadcast_sum_replay.json"))
    args = ap.parse_args(argv)
    t0, rows = time.time(), []
    for member, V, T in parse_cells(args.cells):
        rows.append(replay_cell(member, V, T))
        print(json.dumps(rows[-1]), flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {"schema": "lethe.gdn.broadcast_sum_replay/1", "device": "cpu", "path": "chunk_family(backend='torch')",
           "triton_interpret": os.environ.get("TRITON_INTERPRET"), "seconds": round(time.time() - t0, 1), "rows": rows}
    out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    from lethe import provenance

    provenance.write(out.with_name(out.stem + ".provenance.json"), experiment="gdn_broadcast_sum_replay")
    return doc


if __name__ == "__main__":
    main()
