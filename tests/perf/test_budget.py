"""lethe.perf.budget on the CPU: the budgeted task loop (order, skips, a failing task, the kill) and the signals
that end it."""

import os
import signal
import traceback

import pytest

from lethe.perf.budget import BudgetKill, kill_on_signals, run_tasks


def _loop(tasks, left=lambda: 100.0, estimate=lambda t: 1.0, run=lambda t: None):
    seen = []
    run_tasks(tasks, left=left, estimate=estimate, run=run,
              skipped=lambda t, est: seen.append(("skip", t, est)),
              failed=lambda t, exc: seen.append(("failed", t, str(exc), traceback.format_exc().strip().splitlines()[-1])),
              done=lambda t, s: seen.append(("done", t, s >= 0)), log=lambda line: seen.append(("log", line)))
    return seen


def test_tasks_run_in_order_and_an_estimate_over_the_time_left_skips():
    seen = _loop(["a", "b", "c"], estimate=lambda t: 200.0 if t == "b" else 1.0)
    assert [e[:2] for e in seen if e[0] != "log"] == [("done", "a"), ("skip", "b"), ("done", "c")]
    assert ("skip", "b", 200.0) in seen
    assert ("log", "skip b: 100 s left < estimate 200 s") in seen and ("log", "start a (100 s left, estimate 1 s)") in seen


def test_a_failing_task_is_reported_inside_its_handler_and_the_loop_goes_on():
    def run(t):
        if t == "a":
            raise ValueError("planted")

    seen = [e for e in _loop(["a", "b"], run=run) if e[0] != "log"]
    assert seen[0] == ("failed", "a", "planted", "ValueError: planted")  # format_exc() sees the exception
    assert [e[:2] for e in seen[1:]] == [("done", "a"), ("done", "b")]


def test_budget_kill_ends_the_loop():
    def run(t):
        if t == "b":
            raise BudgetKill("signal 15")

    with pytest.raises(BudgetKill):
        _loop(["a", "b", "c"], run=run)


def test_sigterm_raises_budget_kill_and_the_handlers_come_back():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(BudgetKill, match="signal"):
        with kill_on_signals(100.0):
            os.kill(os.getpid(), signal.SIGTERM)
    assert signal.getsignal(signal.SIGTERM) is before
    if hasattr(signal, "SIGALRM"):
        assert signal.alarm(0) == 0  # the alarm was cancelled on exit


@pytest.mark.skipif(not hasattr(signal, "SIGALRM"), reason="no SIGALRM")
def test_the_alarm_fires_past_the_budget():
    with pytest.raises(BudgetKill, match=str(int(signal.SIGALRM))):
        with kill_on_signals(0.0, grace_s=1.0):
            signal.pause()
