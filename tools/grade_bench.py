"""CPU reproduction of the grading cost of one foreign matmul audit (issue #10, throughput).

Runs ``verify_profiles(..., profiles=[strict, cuda-default, fast-math], timings=d)`` on a KernelBench level-1
task-1 style reference (square matmul, N x N, float32 inputs) and an honest ``torch.matmul`` candidate, on
device="cpu" through the in-process runner (the candidate is trusted, and grading does not depend on how the
arrays came back). The reference and the candidate run once; the candidate's result is then replayed so that
``grade_s`` can be measured several times, which is the phase this tool exists for.

    .venv/bin/python tools/grade_bench.py --n 2048 --repeats 5 [--threads 2] [--profile out.prof]

The in-process runner sets torch to one thread (the sandbox entry points do that in their own process); the
parent's thread count is restored to ``--threads`` before grading, as on a host where the candidate runs in
another process.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pickle
import pstats
import statistics
import time
from pathlib import Path

import torch

from lethe.verifier import api
from lethe.verifier.testing import inprocess_runner

PROFILES = ("strict", "cuda-default", "fast-math")

REF = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


N = {n}


def get_inputs():
    A = torch.randn(N, N)
    B = torch.randn(N, N)
    return [A, B]


def get_init_inputs():
    return []
'''

CAND = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)
'''


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--profile", default="", help="write a cProfile of one grading pass here")
    ap.add_argument("--cache", default="", help="pickle of the runner results: reused when present, so the "
                    "float64 reference and the candidate run once across invocations (before/after a change)")
    args = ap.parse_args()
    threads = args.threads
    ref = REF.format(n=args.n)
    cached: dict = {}
    if args.cache and Path(args.cache).exists():
        with open(args.cache, "rb") as fh:
            cached = pickle.load(fh)
    torch.set_num_threads(threads)

    def runner(target, *a, **kw):
        # Reference and candidate run once; later calls replay their results.
        if target in cached:
            return cached[target]
        res = inprocess_runner(target, *a, **kw)
        torch.set_num_threads(threads)
        cached[target] = res
        if args.cache:
            with open(args.cache, "wb") as fh:
                pickle.dump(cached, fh, protocol=pickle.HIGHEST_PROTOCOL)
        return res

    t = time.perf_counter()
    d: dict = {}
    rows = api.verify_profiles(ref, CAND, profiles=PROFILES, device="cpu", seed=0, runner=runner, timings=d)
    first = {k: v for k, v in d.items() if k.endswith("_s")}
    print(json.dumps({"n": args.n, "threads": threads, "first_run_total_s": round(time.perf_counter() - t, 2),
                      "first_run": first}))
    print("verdicts", {r["profile"]: api.verdict(r) for r in rows})
    grades, cpu = [], []
    for _ in range(args.repeats):
        d = {}
        c0 = time.process_time()
        api.verify_profiles(ref, CAND, profiles=PROFILES, device="cpu", seed=0, runner=runner, timings=d)
        cpu.append(round(time.process_time() - c0, 3))
        grades.append(d["grade_s"])
    # process CPU seconds (all threads) of a replayed call: almost all of it is grading; less sensitive than
    # wall time to other jobs on a shared machine
    print(json.dumps({"grade_s": grades, "median": statistics.median(grades), "cpu_s": cpu,
                      "cpu_median": statistics.median(cpu)}))
    if args.profile:
        pr = cProfile.Profile()
        pr.enable()
        api.verify_profiles(ref, CAND, profiles=PROFILES, device="cpu", seed=0, runner=runner)
        pr.disable()
        pr.dump_stats(args.profile)
        pstats.Stats(pr).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
