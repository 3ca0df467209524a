"""The one timing runner of the project's benchmarks.

Every benchmark times the same way: an untimed ``setup`` per iteration (e.g. the forward whose backward is
timed), a device synchronisation, then the timed stages between CUDA events (one event before the first stage
and one after each), a synchronisation, and the elapsed milliseconds between consecutive events. Without CUDA
(the CPU dry runs that exercise the plumbing) the same points are read from ``time.perf_counter``: those numbers
are wall clock and say nothing about a GPU.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence


def quantile(xs: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile (numpy's default method) of a non-empty sequence."""
    s = sorted(xs)
    pos = (len(s) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


@dataclass
class StageTimes:
    """Milliseconds per timed iteration: ``stages[j][i]`` is stage j of iteration i, ``total[i]`` the first
    event to the last of iteration i."""

    stages: list[list[float]]
    total: list[float]

    def median(self, j: int | None = None) -> float:
        """Median of stage ``j`` (None: of the totals)."""
        return statistics.median(self.total if j is None else self.stages[j])


def _sync(cuda: bool) -> None:
    if cuda:
        import torch

        torch.cuda.synchronize()


def time_stages(stages: Sequence[Callable[[int, Any], Any]], iterations: int, *, cuda: bool, warmup: int = 0,
                setup: Callable[[int], Any] | None = None) -> StageTimes:
    """Time ``iterations`` runs of a chain of stages.

    Iteration i: ``x = setup(i)`` (untimed; None without a setup), synchronise, then ``x = stage(i, x)`` for each
    stage in order with a timing point before the first and after each, then synchronise. ``warmup`` untimed
    iterations (same calls, indices 0..warmup-1) run first. The index lets a caller rotate over input sets.
    """
    for i in range(warmup):
        x = setup(i) if setup is not None else None
        for stage in stages:
            x = stage(i, x)
    _sync(cuda)
    per_stage: list[list[float]] = [[] for _ in stages]
    total: list[float] = []
    if cuda:
        import torch
    for i in range(iterations):
        x = setup(i) if setup is not None else None
        _sync(cuda)
        if cuda:
            events = [torch.cuda.Event(enable_timing=True) for _ in range(len(stages) + 1)]
            events[0].record()
            for stage, ev in zip(stages, events[1:], strict=True):
                x = stage(i, x)
                ev.record()
            torch.cuda.synchronize()
            elapsed = [a.elapsed_time(b) for a, b in zip(events, events[1:], strict=False)]
            total.append(events[0].elapsed_time(events[-1]))
        else:
            marks = [time.perf_counter()]
            for stage in stages:
                x = stage(i, x)
                marks.append(time.perf_counter())
            elapsed = [(b - a) * 1e3 for a, b in zip(marks, marks[1:], strict=False)]
            total.append((marks[-1] - marks[0]) * 1e3)
        for j, ms in enumerate(elapsed):
            per_stage[j].append(ms)
    return StageTimes(per_stage, total)


def time_ms(fn: Callable[[int], Any], iterations: int, *, cuda: bool, warmup: int = 0,
            setup: Callable[[int], Any] | None = None) -> list[float]:
    """Milliseconds of ``iterations`` timed calls ``fn(i)`` (``fn(i, setup(i))`` when a setup is given): the
    one-stage case of :func:`time_stages`."""
    if setup is None:
        return time_stages([lambda i, _: fn(i)], iterations, cuda=cuda, warmup=warmup).total
    return time_stages([fn], iterations, cuda=cuda, warmup=warmup, setup=setup).total


def warm(fn: Callable[[int], Any], iterations: int, *, cuda: bool) -> None:
    """``iterations`` untimed calls ``fn(i)``, then a synchronisation: a warm-up shared by several timed regions
    that follow (the warm-up of :func:`time_stages` with nothing timed)."""
    time_ms(fn, 0, cuda=cuda, warmup=iterations)


def wall_s(fn: Callable[[], Any], *, cuda: bool) -> float:
    """Wall-clock seconds of one call ``fn()`` up to a synchronisation after it: a first call's cost, compilation
    and autotuning included (host time, which device events would not see)."""
    t0 = time.perf_counter()
    fn()
    _sync(cuda)
    return time.perf_counter() - t0


def summary_ms(xs: Sequence[float], digits: int | None = 4) -> dict:
    """Median and [min, max] of a list of timings, rounded to ``digits`` for a result row (None: unrounded)."""
    med, lo, hi = statistics.median(xs), min(xs), max(xs)
    if digits is None:
        return {"median_ms": med, "spread_ms": [lo, hi]}
    return {"median_ms": round(med, digits), "spread_ms": [round(lo, digits), round(hi, digits)]}
