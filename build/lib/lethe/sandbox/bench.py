"""Measure the per-run start overhead of each start mode: ``python -m lethe.sandbox.bench [--device cuda]``.

Runs a trivial target (``lethe.sandbox.testing:process_state``) ``--n`` times per mode, one at a time, and
prints per mode: the zygote's one-time boot (its first run), then the median and range of

* ``startup``: parent call to the child's ``ready`` (what a start mode costs per run),
* ``wall``: the whole ``run_isolated`` call, including the parent's cleanup,
* ``child_cpu``: CPU seconds the child had used when the target ran (independent of the machine's load).

With ``--device cuda`` each child also creates a CUDA context (``--touch-cuda``), which is a cost of every
fresh process in both modes and so belongs in the number an audit sees.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from lethe.sandbox.runner import run_isolated


def measure(start: str, n: int, device: str, touch_cuda: bool) -> dict:
    target = "lethe.sandbox.testing:process_state"
    payload = {"touch_cuda": touch_cuda}
    boot = None
    if start == "zygote":
        t = time.monotonic()
        first = run_isolated(target, payload=payload, start=start, device=device)
        boot = time.monotonic() - t
        if first.status != "ok":
            raise SystemExit(f"zygote boot run failed: {first.status} {first.detail}")
    rows = []
    for _ in range(n):
        t = time.monotonic()
        r = run_isolated(target, payload=payload, start=start, device=device)
        wall = time.monotonic() - t
        if r.status != "ok":
            raise SystemExit(f"{start} run failed: {r.status} {r.detail}")
        rows.append({"startup": r.startup_seconds, "wall": wall, "child_cpu": r.result["cpu_s"],
                     "mode_used": r.start})
    out = {"start": start, "device": device, "n": n, "boot_s": boot}
    for k in ("startup", "wall", "child_cpu"):
        xs = [row[k] for row in rows]
        out[k] = {"median": round(statistics.median(xs), 4), "min": round(min(xs), 4), "max": round(max(xs), 4)}
    out["modes_used"] = sorted({row["mode_used"] for row in rows})
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=5)
    ap.add_argument("--n-spawn", type=int, default=3)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--touch-cuda", action="store_true", help="create a CUDA context in each child")
    args = ap.parse_args(argv)
    print(json.dumps({"loadavg_before": [round(x, 2) for x in os.getloadavg()]}))
    for start, n in (("zygote", args.n), ("spawn", args.n_spawn)):
        print(json.dumps(measure(start, n, args.device, args.touch_cuda)), flush=True)
    print(json.dumps({"loadavg_after": [round(x, 2) for x in os.getloadavg()]}))


if __name__ == "__main__":
    main()
