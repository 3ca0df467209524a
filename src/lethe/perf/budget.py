"""A budgeted task loop for benchmarks whose device call has a hard wall-clock limit.

Tasks run in priority order; one starts only when its estimate fits the time left (else the caller records a
skip), one that raises is recorded and passed over, and SIGTERM, or an alarm a grace period past the budget,
raises :class:`BudgetKill` out of whatever is running so the caller still writes what it has. The caller owns
the rows: this module only decides what runs and calls back.
"""

from __future__ import annotations

import contextlib
import signal
import time
from typing import Any, Callable, Iterable, Iterator


class BudgetKill(BaseException):
    """Raised from SIGTERM / SIGALRM while :func:`kill_on_signals` is active: ends the run, the caller's summary
    is still written. A BaseException, so that a task's own ``except Exception`` cannot swallow it."""


@contextlib.contextmanager
def kill_on_signals(budget_s: float, grace_s: float = 10.0) -> Iterator[None]:
    """While active, SIGTERM and (where the platform has it) an alarm at ``budget_s + grace_s`` seconds raise
    :class:`BudgetKill`; on exit the alarm is cancelled and the earlier handlers are back. The alarm catches a
    task whose estimate was far too low before the device call's own limit kills the process with nothing
    written. Main thread only (Python delivers signals there)."""

    def on_signal(signum, frame):
        raise BudgetKill(f"signal {signum}")

    names = ["SIGTERM"] + (["SIGALRM"] if hasattr(signal, "SIGALRM") else [])
    before = {n: signal.signal(getattr(signal, n), on_signal) for n in names}
    if "SIGALRM" in before:
        signal.alarm(int(budget_s + grace_s))
    try:
        yield
    finally:
        if "SIGALRM" in before:
            signal.alarm(0)
        for n, handler in before.items():
            signal.signal(getattr(signal, n), handler)


def run_tasks(tasks: Iterable[Any], *, left: Callable[[], float], estimate: Callable[[Any], float],
              run: Callable[[Any], None], skipped: Callable[[Any, float], None],
              failed: Callable[[Any, Exception], None], done: Callable[[Any, float], None],
              name: Callable[[Any], str] = str, log: Callable[[str], None] | None = None) -> None:
    """Run ``tasks`` in order under a budget.

    For each task: ``est = estimate(task)``; if ``left()`` (seconds) is below it, ``skipped(task, est)`` and the
    next task; else ``run(task)``, then ``done(task, seconds)``. An ``Exception`` from ``run`` calls
    ``failed(task, exc)`` inside the handler (so ``traceback.format_exc()`` there names it) before ``done``;
    :class:`BudgetKill` and other ``BaseException`` propagate. ``log`` receives one line per start and skip.
    """
    for task in tasks:
        est = estimate(task)
        if left() < est:
            skipped(task, est)
            if log is not None:
                log(f"skip {name(task)}: {left():.0f} s left < estimate {est:.0f} s")
            continue
        if log is not None:
            log(f"start {name(task)} ({left():.0f} s left, estimate {est:.0f} s)")
        t0 = time.perf_counter()
        try:
            run(task)
        except Exception as exc:  # noqa: BLE001 - one broken task does not end the run
            failed(task, exc)
        done(task, time.perf_counter() - t0)
