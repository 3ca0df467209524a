"""Compile the Mamba Triton kernels (C1 to C6) ahead of time for sm_90a and sm_100a on the CPU, at
num_warps 2, 4 and 8, and report what each binary asks of the hardware.

    python experiments/mamba/triton_aot.py [--shape 8,2048,4096,16] [--dtype float32] [--json results/mamba/aot/triton_aot.json]

How: the six choosers run on CPU tensors inside ``lethe.aot.record_launches(execute=False)`` (their host code
runs, every ``kernel[grid](...)`` is recorded, nothing is launched), each launch is recompiled at each num_warps
for each target with ``lethe.aot.compile_launch`` exactly as the JIT would specialise it, and
``lethe.aot.limits.check`` judges the figures. The kernels use no ``tl.dot``, so they should need no tensor
memory on sm_100a and contain no MMA instruction at all: the script records both facts instead of assuming them.
Compiled, not executed: no kernel runs here (there is no GPU), and the figures say nothing about speed.
Needs TRITON_INTERPRET unset (an interpreted kernel cannot be compiled); the script clears it before Triton loads.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.pop("TRITON_INTERPRET", None)  # before triton is imported: the kernels must be JITFunctions

ROOT = Path(__file__).resolve().parents[2]

import torch  # noqa: E402
import triton.language as tl  # noqa: E402

SCHEMA = "lethe.mamba.triton_aot/1"
TARGETS = ("sm_90a", "sm_100a")
NUM_WARPS = (2, 4, 8)
OPS = {"scan_fwd_kernel": "C1 forward_chunked_scan", "scan_bwd_kernel": "C2 backward_selective_scan",
       "mimo_bwd_kernel": "C3 mimo_backward", "cp_local_kernel": "C1 chunk-parallel: local scans",
       "cp_carry_kernel": "C1 chunk-parallel: carry", "cp_fix_kernel": "C1 chunk-parallel: fix-up",
       "rope_scan_fwd_kernel": "C4 complex_scan_rope", "block_fwd_kernel": "C5 fused_block_forward",
       "block_bwd_kernel": "C6 fused_block_backward", "norm_kernel": "C5 chunk-parallel: norm",
       "norm_s_kernel": "C6 chunk-parallel: norm's s", "cp_adjoint_local_kernel": "C6 chunk-parallel: local adjoints",
       "dx_kernel": "C6 chunk-parallel: dx"}


def _mamba():
    """The Mamba ops of *this* checkout (an editable install of another one may own the lethe.kernels name)."""
    import lethe.kernels

    ours = str(ROOT / "kernels")
    if list(lethe.kernels.__path__) != [ours]:
        lethe.kernels.__path__[:] = [ours]
    import lethe.kernels.mamba as m

    return m


def record(batch: int, L: int, d: int, n: int, k: int = 4, chunk: int = 64, dtype=torch.float32,
           rope=(32, 64, 128, 64), rank: int = 2):
    """The launches the six choosers make for one shape (C3 and C4 at ``rope`` = heads, headdim, n_state,
    angles; C3 at rank ``rank``),
    recorded, not executed. Tensors are allocated but never read: only their dtype and alignment reach the compiler."""
    from lethe.aot import record_launches

    m = _mamba()
    e = lambda *s: torch.empty(*s, dtype=dtype)  # noqa: E731
    u, delta, dy = e(batch, L, d), e(batch, L, d), e(batch, L, d)
    A, B, C, D = e(d, n), e(batch, L, n), e(batch, L, n), e(d)
    x, w, bias, nw = e(batch, L + k - 1, d), e(d, k), e(d), e(d)
    f32 = torch.float32
    ckpt = torch.empty(batch, -(-L // chunk), d, n, dtype=f32)
    saved = dict(y=torch.empty(batch, L, d, dtype=f32), rstd=torch.empty(batch, L, dtype=f32), ckpt=ckpt)
    with record_launches(execute=False) as launches:
        m.forward_chunked_scan(u, delta, A, B, C, D, chunk=chunk, backend="triton")
        m.forward_chunked_scan(u, delta, A, B, C, D, chunk=chunk, backend="triton", scan_mode="chunk_parallel")
        m.backward_selective_scan(u, delta, A, B, C, D, dy, chunk=chunk, checkpoints=ckpt, backend="triton")
        m.fused_block_forward(x, w, bias, delta, A, B, C, D, nw, chunk=chunk, backend="triton")
        # C6 both ways: float32 arithmetic from the saved forward state, and the default exact_norm call, which
        # reruns the forward and the backward in float64 (for float64 inputs the two calls are the same launches)
        m.fused_block_backward(x, w, bias, delta, A, B, C, D, nw, dy, chunk=chunk, saved=saved, backend="triton",
                               exact_norm=False)
        m.fused_block_backward(x, w, bias, delta, A, B, C, D, nw, dy, chunk=chunk, backend="triton")
        # C5 / C6 chunk-parallel (float32 arithmetic from the saved state for C6, as its first call above)
        m.fused_block_forward(x, w, bias, delta, A, B, C, D, nw, chunk=chunk, backend="triton",
                              scan_mode="chunk_parallel")
        m.fused_block_backward(x, w, bias, delta, A, B, C, D, nw, dy, chunk=chunk, saved=saved, backend="triton",
                               exact_norm=False, scan_mode="chunk_parallel")
        H, P, N, S = rope
        m.complex_scan_rope(e(batch, L, H, P), e(batch, L, H), e(H), e(batch, L, H, N), e(batch, L, H, N),
                            e(batch, L, H, S), chunk=chunk, backend="triton")
        m.mimo_backward(e(batch, L, H, P), e(batch, L, H), e(H), e(batch, L, H, rank, N), e(batch, L, H, rank, N),
                        e(H, rank, P), e(H, rank, P), e(batch, L, H, P), chunk=chunk, backend="triton")
    return list(launches)


def run(shape=(8, 2048, 4096, 16), dtype="float32", k: int = 4, chunk: int = 64, targets=TARGETS,
        num_warps=NUM_WARPS, rope=(32, 64, 128, 64), rank: int = 2) -> dict:
    from lethe.aot import compile_launch

    b, L, d, n = shape
    rows = []
    for rec in record(b, L, d, n, k, chunk, getattr(torch, dtype), rope, rank):
        name = rec.jit.fn.__name__
        op = OPS.get(name, name)
        if name.startswith("block_") and rec.kwargs.get("CD") == tl.float64 and dtype != "float64":
            op += " (float64 arithmetic: exact_norm)"
        for target in targets:
            for nw in num_warps:
                kwargs = dict(rec.kwargs, num_warps=nw)
                t0 = time.time()
                rep = compile_launch(rec.jit, target, rec.args, kwargs)
                rows.append({"kernel": name, "op": op, "target": target, "num_warps": nw,
                             "compiles": rep.error is None, "error": rep.error, "registers": rep.registers,
                             "spill_bytes": rep.spill_bytes, "shared_bytes": rep.shared_bytes,
                             "tmem_columns": rep.tmem_columns, "mma": rep.mma, "violations": rep.violations(),
                             "ptxas": rep.ptxas, "config": rep.config, "compile_s": round(time.time() - t0, 1)})
    H, P, N, S = rope
    return {"schema": SCHEMA, "shape": dict(batch=b, seq_len=L, d_model=d, n_state=n, conv_k=k, chunk=chunk),
            "c4_shape": dict(batch=b, seq_len=L, nheads=H, headdim=P, n_state=N, num_angles=S),
            "c3_shape": dict(batch=b, seq_len=L, rank=rank, nheads=H, headdim=P, n_state=N),
            "dtype": dtype, "executed": False,
            "note": "compiled on a CPU host for each target, never run; registers and spills from the bundled "
                    "cuobjdump, shared memory and tensor-memory columns from Triton's compile metadata",
            "all_fit": all(r["compiles"] and not r["violations"] for r in rows), "rows": rows}


def markdown_table(doc: dict) -> str:
    lines = ["| op | target | num_warps | registers | spill B | shared B | TMEM cols | MMA instr. | fits |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in doc["rows"]:
        mma = sum(v for key, v in (r["mma"] or {}).items() if key in ("wgmma", "tcgen05_mma", "mma_sync"))
        fits = "yes" if r["compiles"] and not r["violations"] else "**no**: " + "; ".join(r["violations"])
        lines.append(f"| {r['op']} | {r['target']} | {r['num_warps']} | {r['registers']} | {r['spill_bytes']} | "
                     f"{r['shared_bytes']} | {r['tmem_columns']} | {mma} | {fits} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="8,2048,4096,16", help="batch,seq_len,d_model,n_state")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--json", default="", help="write the report here (provenance.json alongside)")
    args = ap.parse_args(argv)
    doc = run(tuple(int(s) for s in args.shape.split(",")), args.dtype)
    print(markdown_table(doc))
    if args.json:
        from lethe import provenance

        out = Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(doc, indent=1) + "\n")
        out.with_suffix(".md").write_text(markdown_table(doc))
        provenance.write(out.parent / "provenance.json", command=" ".join(["python", *sys.argv]),
                         experiment="mamba.triton_aot")
    return 0 if doc["all_fit"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
