"""C1's launch-configuration search on one GPU: every configuration of ``lethe.kernels.mamba.tuning.launch_space``
at every shape of the grid, correctness first, then CUDA-event time.

Per shape (float32 inputs drawn as the CPU tests draw them: delta in [0.05, 0.5], A in [-2, -0.5]):

1. the default configuration's y and final state, and the magnitude recurrence's Y and H (the same kernel on
   |u|, |B|, |C|, |D|: every term of the exact result, summed in absolute value);
2. each configuration's y and final state against the default's: |difference| <= (bound of the configuration +
   bound of the default) times the magnitude (both are within their bound of the exact value); a failure, an
   exception or a non-finite output drops the configuration at that shape, with the reason in its row;
3. each surviving configuration timed: ``lethe.perf.timing.time_ms``, warm-up calls (the first compiles), the
   median of a number of calls sized to the configuration's first time.

Before the grid, every configuration runs at a small shape against the float64 oracle (``selective_scan_ref``, on
the same float32 inputs); a configuration that fails there is dropped everywhere.

    LETHE_GIT_SHA=<sha> python3 experiments/mamba/launch_search.py --out $OUT/launch_search

Output: ``launch_search.json`` (schema :data:`SCHEMA`: the space, the shapes, one row per shape and configuration,
whether the grid finished, and ``lethe.kernels.mamba.tuning.evaluate_policies`` of the rows) and ``provenance.json``. ``--max-s`` stops between two measurements once the budget is
spent and writes what it has (``complete: false``, the reason). ``--dry-run``: the CPU interpreter, two tiny shapes,
two configurations (the plumbing, not a measurement; wall-clock times).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

SCHEMA = "lethe.mamba.launch_search/1"

# The records' shapes (scan_mode_boundary / scan_mode_smoke: batch 1 to 8, sequence 512 to 16384, width 256 to
# 4096), the model shapes of the benchmarks (batch 8, sequence 2048, width 4096, N 16 and 128), and small-batch long
# sequences where the chunk-parallel form should win. (batch, seq_len, d_model, n_state)
GRID = (
    (1, 2048, 256, 16), (1, 16384, 1024, 16), (2, 16384, 1024, 16), (2, 4096, 1024, 16), (1, 4096, 2048, 16),
    (2, 1024, 1024, 64), (2, 512, 4096, 16), (8, 512, 4096, 16), (8, 2048, 2048, 64), (8, 2048, 4096, 16),
    (8, 2048, 4096, 128), (4, 8192, 2048, 16), (1, 8192, 4096, 128), (8, 16384, 1024, 16),
)
ORACLE_SHAPE = (2, 300, 40, 12)  # odd sizes: partial chunks, channel and state blocks
DRY_GRID = ((1, 12, 4, 3), (2, 17, 6, 2))
DRY_ORACLE_SHAPE = (1, 9, 5, 3)


def draw(shape, seed, device):
    """u, delta, A, B, C, D in float32 (the CPU tests' draw: |delta A| <= 1, the regime of the step counts)."""
    import torch

    b, L, d, n = shape
    gen = torch.Generator(device="cpu").manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=gen)
    un = lambda lo, hi, *s: lo + (hi - lo) * torch.rand(*s, generator=gen)
    x = (r(b, L, d), un(0.05, 0.5, b, L, d), -un(0.5, 2.0, d, n), r(b, L, n), r(b, L, n), r(d))
    return tuple(t.to(device) for t in x)


def run_config(cfg, x):
    """(y, final state) of one configuration on the Triton path."""
    from lethe.kernels.mamba import forward_chunked_scan

    d, n = x[2].shape
    y, _, hlast = forward_chunked_scan(*x, backend="triton", return_checkpoints=True, **cfg.kwargs(d, n))
    return y, hlast


def magnitude(x):
    """(Y, H_last): the magnitude recurrence, run by the default configuration on |u|, delta, A, |B|, |C|, |D|.
    delta > 0 makes the scan of those exactly the recurrence of ``selective_scan_magnitude``; computed in float32,
    it is within a relative gamma of itself, which :func:`within` widens it by."""
    from lethe.kernels.mamba.tuning import DEFAULT_CONFIG

    u, delta, A, B, C, D = x
    if not bool((delta > 0).all()):
        raise ValueError("the magnitude recurrence by scan needs delta > 0")
    return run_config(DEFAULT_CONFIG, (u.abs(), delta, A, B.abs(), C.abs(), D.abs()))


def within(got, want, mags, rel):
    """None when every |got - want| <= rel * magnitude (widened by its own float32 bound); else the reason."""
    import torch

    for name, g, w, m in zip(("y", "h_last"), got, want, mags, strict=True):
        if not bool(torch.isfinite(g).all()):
            return f"{name}: non-finite output"
        err = (g.double() - w.double()).abs()
        # the magnitude itself may be a float32 scan: widened by its own relative bound (rel exceeds it)
        bound = rel * m.double() * (1 + 2 * rel) + 1e-30
        worst = float((err / bound).max())
        if worst > 1:
            return f"{name}: difference {float(err.max()):.3e} exceeds the bound by x{worst:.3g}"
    return None


def oracle_check(space, shape, device):
    """{config name: None or the reason it disagrees with the float64 oracle at a small shape}."""
    import torch
    from lethe.kernels.mamba.forward_chunked_scan.reference import selective_scan_magnitude, selective_scan_ref
    from lethe.kernels.mamba.tuning import forward_error_bound

    x = draw(shape, 1, device)
    x64 = tuple(t.double() for t in x)
    y_ref, hs = selective_scan_ref(*x64, return_states=True)
    Y, Hs = selective_scan_magnitude(*x64)
    out = {}
    for cfg in space:
        try:
            got = run_config(cfg, x)
            if device == "cuda":
                torch.cuda.synchronize()
            rel = forward_error_bound(cfg, shape[1], shape[3])
            out[cfg.name] = within(got, (y_ref, hs[:, -1]), (Y, Hs[:, -1]), rel)
        except Exception as e:  # a launch that fails to compile or run is a dropped configuration, not a crash
            out[cfg.name] = f"{type(e).__name__}: {e}"[:300]
    return out


def time_config(cfg, x, cuda, target_ms, max_iters):
    """Median milliseconds of one configuration: warm-up (the first call compiles), a probe call, then
    ``target_ms`` worth of calls (between 3 and ``max_iters``)."""
    import statistics

    from lethe.perf.timing import time_ms

    probe = time_ms(lambda i: run_config(cfg, x), 1, cuda=cuda, warmup=2)[0]
    iters = max(3, min(max_iters, math.ceil(target_ms / max(probe, 1e-3))))
    ts = time_ms(lambda i: run_config(cfg, x), iters, cuda=cuda, warmup=1)
    return statistics.median(ts), iters


def search(space, grid, oracle_shape, device, max_s, target_ms, max_iters, log=print):
    """The search itself (see the module docstring); returns the result document."""
    import torch
    from lethe.kernels.mamba.tuning import (DEFAULT_CONFIG, DEFAULT_SM_COUNT, Shape, evaluate_policies,
                                            forward_error_bound)

    t0 = time.monotonic()
    cuda = device == "cuda"
    rows, stop = [], None
    oracle = oracle_check(space, oracle_shape, device)
    for name, why in oracle.items():
        log(f"oracle {name}: {'ok' if why is None else why}")
    for shp in grid:
        if stop:
            break
        shape = Shape(*shp)
        sdict = {"batch": shape.batch, "seq_len": shape.seq_len, "d_model": shape.d_model, "n_state": shape.n_state}
        try:
            x = draw(shp, 0, device)
            want = run_config(DEFAULT_CONFIG, x)
            mags = magnitude(x)
        except Exception as e:  # the default itself cannot run here (memory): every row of the shape says so
            for cfg in space:
                rows.append({"shape": sdict, "config": cfg.as_dict(), "status": "error",
                             "reason": f"default or magnitude failed: {type(e).__name__}: {e}"[:300]})
            continue
        for cfg in space:
            if time.monotonic() - t0 > max_s:
                stop = f"--max-s {max_s} reached before {shape.name} {cfg.name}"
                break
            row = {"shape": sdict, "config": cfg.as_dict(), "status": "ok", "reason": None}
            if oracle[cfg.name] is not None:
                row.update(status="mismatch", reason=f"float64 oracle at {oracle_shape}: {oracle[cfg.name]}")
                rows.append(row)
                continue
            try:
                t_c = time.monotonic()
                got = want if cfg == DEFAULT_CONFIG else run_config(cfg, x)
                rel = forward_error_bound(cfg, shape.seq_len, shape.n_state) + forward_error_bound(
                    DEFAULT_CONFIG, shape.seq_len, shape.n_state)
                why = within(got, want, mags, rel)
                if why is not None:
                    row.update(status="mismatch", reason=f"against the default: {why}")
                else:
                    row["median_ms"], row["iters"] = time_config(cfg, x, cuda, target_ms, max_iters)
                row["wall_s"] = round(time.monotonic() - t_c, 3)
                del got
            except Exception as e:  # out of resources, a launch error: the configuration is dropped at this shape
                row.update(status="error", reason=f"{type(e).__name__}: {e}"[:300])
            rows.append(row)
            log(f"{shape.name} {cfg.name}: {row['status']} {row.get('median_ms', row['reason'])}")
        del x, want, mags
        if cuda:
            torch.cuda.empty_cache()
    sm_count = torch.cuda.get_device_properties(0).multi_processor_count if cuda else None
    return {
        "schema": SCHEMA,
        "device": torch.cuda.get_device_name() if cuda else "cpu (Triton interpreter: wall clock, not a GPU time)",
        "sm_count": sm_count,
        "dtype": "float32",
        "space": [c.as_dict() for c in space],
        "grid": [list(s) for s in grid],
        "oracle_shape": list(oracle_shape),
        "oracle_check": oracle,
        "rows": rows,
        "complete": stop is None and len(rows) == len(space) * len(grid),
        "stopped": stop,
        "elapsed_s": round(time.monotonic() - t0, 1),
        # the package's policy comparison of these rows, kept for the claims ledger (renderers recompute it)
        "policies": evaluate_policies(rows, sm_count=sm_count or DEFAULT_SM_COUNT),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for launch_search.json and provenance.json")
    ap.add_argument("--max-s", type=float, default=330.0, help="stop cleanly once this many seconds are spent")
    ap.add_argument("--target-ms", type=float, default=200.0, help="timed milliseconds per configuration")
    ap.add_argument("--max-iters", type=int, default=25)
    ap.add_argument("--shapes", default="", help="batch,L,d_model,N;... instead of the built-in grid")
    ap.add_argument("--dry-run", action="store_true", help="CPU interpreter, tiny shapes, two configurations")
    args = ap.parse_args(argv)
    if args.dry_run:
        os.environ["TRITON_INTERPRET"] = "1"  # before Triton is imported: the kernels are decorated at import
    import torch
    from lethe.kernels.mamba.tuning import DEFAULT_CONFIG, LaunchConfig, launch_space

    if args.dry_run:
        space = [DEFAULT_CONFIG, LaunchConfig("chunk_parallel", 4, 4)]
        grid, oracle_shape, device = DRY_GRID, DRY_ORACLE_SHAPE, "cpu"
        args.target_ms, args.max_iters = 0.0, 3  # the interpreter's wall clock measures nothing worth repeating
    else:
        if not torch.cuda.is_available():
            sys.exit("launch_search: no CUDA device (use --dry-run on a CPU)")
        space, grid, oracle_shape, device = launch_space(), GRID, ORACLE_SHAPE, "cuda"
    if args.shapes:
        grid = tuple(tuple(int(v) for v in s.split(",")) for s in args.shapes.split(";") if s)
    print(f"launch search: {len(space)} configurations x {len(grid)} shapes", flush=True)
    doc = search(space, grid, oracle_shape, device, args.max_s, args.target_ms, args.max_iters,
                 log=lambda m: print(m, flush=True))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "launch_search.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    from lethe import provenance

    provenance.write(out / "provenance.json", experiment="mamba_launch_search", dry_run=args.dry_run)
    print(f"wrote {out / 'launch_search.json'}: {len(doc['rows'])} rows, complete={doc['complete']}")
    return doc


if __name__ == "__main__":
    main()
