"""Bounded-concurrency runner for many sandboxed jobs (used by the audit shard runner)."""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from lethe.sandbox.runner import SandboxResult, run_isolated


def _one(job: Mapping[str, Any]) -> SandboxResult:
    try:
        kwargs = dict(job)
        target = kwargs.pop("target")
        return run_isolated(target, **kwargs)
    except BaseException as exc:  # noqa: BLE001 - a broken job description is that job's row, not the batch's
        return SandboxResult(
            status="error",
            detail=f"sandbox harness error: {type(exc).__name__}: {exc}\n{traceback.format_exc()[-3000:]}",
        )


def run_many(
    jobs: Iterable[Mapping[str, Any]],
    max_workers: int = 2,
    on_result: Callable[[int, SandboxResult], None] | None = None,
) -> list[SandboxResult]:
    """Run each job (a dict of :func:`run_isolated` keyword arguments plus ``target``) with at most
    ``max_workers`` children alive at once; return the results in job order.

    Each job is its own process and its own try/except, so no failure of one job (in the child or in the
    harness, e.g. a bad argument) can change another job's result. ``on_result(index, result)`` is called as
    results arrive (from worker threads), e.g. to write rows incrementally; an exception it raises is
    recorded in that job's detail and does not stop the batch.
    """
    jobs = list(jobs)
    results: list[SandboxResult | None] = [None] * len(jobs)

    def work(i: int) -> None:
        res = _one(jobs[i])
        if on_result is not None:
            try:
                on_result(i, res)
            except BaseException as exc:  # noqa: BLE001
                res.detail += f"\n[on_result callback failed: {type(exc).__name__}: {exc}]"
        results[i] = res

    with ThreadPoolExecutor(max_workers=max(1, int(max_workers))) as pool:
        for fut in [pool.submit(work, i) for i in range(len(jobs))]:
            fut.result()
    return [r if r is not None else SandboxResult(status="error", detail="job produced no result") for r in results]
