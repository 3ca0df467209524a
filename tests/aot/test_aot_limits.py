"""lethe.aot.limits: the launch-limit table and check() (pure Python, no compilation)."""

import pytest

from lethe.aot.limits import LIMITS, block_registers, check, limits_for


def _report(**over):
    base = dict(target="sm_100a", kernel="k", registers=128, shared_bytes=65536, tmem_columns=256,
                spill_bytes=0, num_warps=4, num_stages=2)
    base.update(over)
    return base


def test_published_limits():
    # The figures the paper and the CUDA guide state: 227 KB opt-in shared memory, 512 TMEM columns, 255 regs.
    for target in ("sm_90a", "sm_100a"):
        lim = LIMITS[target]
        assert lim.max_shared_bytes_per_block == 227 * 1024 == 232448
        assert lim.max_registers_per_thread == 255
        assert lim.registers_per_sm == 65536
    assert LIMITS["sm_100a"].tmem_columns == 512
    assert LIMITS["sm_90a"].tmem_columns == 0
    assert limits_for("sm_100") is LIMITS["sm_100a"] and limits_for(90) is LIMITS["sm_90a"]
    with pytest.raises(KeyError):
        limits_for("sm_80")


def test_within_budget_fits():
    assert check(_report()) == []
    assert check(_report(target="sm_90a", tmem_columns=0)) == []
    # exactly at the limits still fits
    assert check(_report(shared_bytes=232448, tmem_columns=512, registers=255)) == []


def test_shared_and_tmem_over_budget():
    problems = check(_report(shared_bytes=232449))
    assert len(problems) == 1 and "shared memory 232449" in problems[0]
    problems = check(_report(tmem_columns=544))
    assert len(problems) == 1 and "tensor memory 544" in problems[0]
    # Hopper has no tensor memory at all
    problems = check(_report(target="sm_90a", tmem_columns=128))
    assert len(problems) == 1 and "has none" in problems[0]


def test_register_limits():
    assert any("registers per thread" in p for p in check(_report(registers=256)))
    # 255 regs x 8 warps: 255*32 = 8160 rounds to 8192 per warp, x 8 = 65536, exactly the block budget
    assert block_registers(255, 8, 256) == 65536
    assert check(_report(registers=255, num_warps=8)) == []
    # 16 warps at 255 regs need twice the register file
    problems = check(_report(registers=255, num_warps=16))
    assert any("registers per block 131072" in p for p in problems)
    assert any("threads per block" in p for p in check(_report(num_warps=64, registers=16)))


def test_unknown_figures_are_not_judged_and_spill_budget():
    assert check(_report(registers=None, spill_bytes=None, tmem_columns=None)) == []
    assert check(_report(spill_bytes=1136)) == []
    assert check(_report(spill_bytes=1136), max_spill_bytes=1024) == [
        "spills 1136 B/thread > budget 1024 B on sm_100a"
    ]
    assert any("local memory" in p for p in check(_report(spill_bytes=600 * 1024)))


def test_target_argument_overrides_report():
    rep = _report(tmem_columns=256)
    assert check(rep, "sm_100a") == []
    assert check(rep, "sm_90a") != []
