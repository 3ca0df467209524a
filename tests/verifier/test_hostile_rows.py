"""Hostile candidates through the whole verifier (real sandbox): each costs its own row only, with a precise
status, never "pass"; a correct kernel verified after all of them still passes (the verifier's state is intact).

The kernels are data/hostile/* (the sandbox suite's, tests/sandbox/test_hostile.py), except write_outside: it
returns a correct result (so "pass" is the right verdict) and leaves files outside the sandbox that only the
sandbox suite knows how to clean up. The monkeypatching one
patches torch.allclose, numpy.allclose and every lethe `verify`/`compare`/`check` it can reach in its own
process; grading happens in the parent on returned arrays, so it still fails CMP-01.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lethe.verifier import api

HOSTILE = Path(__file__).resolve().parents[2] / "data" / "hostile"

# name -> row statuses that are a correct, precise classification of what the kernel does
EXPECTED = {
    "hang": {"timeout"},
    "sleep_past_timeout": {"timeout"},
    "segfault": {"crash"},
    "os_exit": {"crash"},
    "sys_exit": {"crash"},
    "abort": {"crash"},
    "sigkill_self": {"crash"},
    "memory_hog": {"crash", "gated"},  # MemoryError may be caught per probe (then every gate fails)
    "torch_alloc_oom": {"crash", "gated"},
    "stdout_flood": {"crash"},
    "raise_at_import": {"compile_fail"},
    "infinite_recursion": {"gated", "crash"},
    "non_tensor": {"gated"},
    "monkeypatch": {"gated"},
    "forge_channel": {"gated", "crash"},
    "close_std_fds": {"gated", "crash"},
    "fork_bomb": {"gated", "crash", "timeout"},  # 150 forked copies of a torch process: slow on 2 cores
}


@pytest.mark.slow
def test_hostile_candidates_cost_their_own_row_only():
    ref = (HOSTILE / "ref.py").read_text()
    rows = {}
    for name in sorted(EXPECTED):
        cand = HOSTILE / name / "cand.py"
        if not cand.exists():
            continue
        rows[name] = api.verify(ref, cand.read_text(), device="cpu", seed=1, timeout_s=30, memory_mb=1024,
                                kernel_id=name, only_gates=["CMP-01", "EXC-01"])
    assert len(rows) >= 12
    wrong = {name: (row["status"], row["error"][:200]) for name, row in rows.items()
             if row["status"] not in EXPECTED[name] or api.verdict(row) == "pass"}
    assert not wrong, wrong
    assert rows["monkeypatch"]["gates"]["CMP-01"]["status"] == "fail"
    good = api.verify(ref, (HOSTILE / "good" / "cand.py").read_text(), device="cpu", seed=1,
                      only_gates=["CMP-01", "EXC-01"])
    assert api.verdict(good) == "pass", good["gates"]
