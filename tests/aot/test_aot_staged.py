"""lethe.aot.staged: shared memory and TMEM are judged from TTGIR + the allocation passes before the (possibly very
slow) full compile, and a full compile that runs out of its budget still reports what is known.

Compiled, not executed: no kernel runs here.
"""

import os
import time

import aot_kernels
import pytest

from lethe.aot import record_launches, res02_reports
from lethe.aot.limits import check
from lethe.aot.staged import (
    EARLY_STAGE,
    CompileBudget,
    _budget_text,
    budget_note,
    early_figures,
    early_note,
    run_forked,
    unknown_error,
)

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")

GATE_RESOURCE_WORDS = ("out of resource", "shared memory", "tensor memory", "tmem")  # see gates.res_02


def _record_matmul(bm, bn, bk, num_warps, num_stages, m=512, n=512, k=512):
    a = torch.zeros(m, k, dtype=torch.bfloat16)
    b = torch.zeros(k, n, dtype=torch.bfloat16)
    c = torch.zeros(m, n, dtype=torch.bfloat16)
    with record_launches(execute=False) as launches:
        aot_kernels.launch_matmul(a, b, c, bm, bn, bk, num_warps, num_stages)
    return launches


def test_shared_memory_over_the_limit_is_judged_at_the_ttgir_stage_without_the_full_compile():
    launches = _record_matmul(256, 256, 128, num_warps=8, num_stages=4)
    log = []
    t0 = time.monotonic()
    reports = res02_reports([aot_kernels.matmul], launches, budget=CompileBudget(early_s=120), log=log)
    seconds = time.monotonic() - t0
    assert [e["step"] for e in log] == [EARLY_STAGE, EARLY_STAGE]  # no full compile was started
    assert seconds < 60
    assert [r.target for r in reports] == ["sm_90a", "sm_100a"]
    for rep in reports:
        assert rep.stage == EARLY_STAGE and rep.error is None
        assert rep.registers is None and rep.spill_bytes is None  # unknown, not judged
        # four stages of 256x128 + 128x256 bf16 tiles: 512 KiB, over the 227 KiB opt-in maximum
        assert rep.shared_bytes >= 4 * 2 * 256 * 128 * 2
        assert rep.num_warps == 8 and rep.num_stages == 4
        assert rep.notes == [early_note()] and "full compile not needed" in rep.notes[0]
        problems = check(rep.to_dict())  # the extra "stage" field does not disturb check()
        assert len(problems) == 1 and problems[0].startswith(f"shared memory {rep.shared_bytes} B > 232448 B")
        assert rep.violations() == problems


def test_tmem_over_the_limit_is_judged_at_the_ttgir_stage():
    a = torch.zeros(128, 64, dtype=torch.bfloat16)
    b = torch.zeros(3, 64, 256, dtype=torch.bfloat16)
    c = torch.zeros(128, 256, dtype=torch.bfloat16)
    with record_launches(execute=False) as launches:
        aot_kernels.launch_three_accumulators(a, b, c, 64)
    log = []
    (rep,) = res02_reports([aot_kernels.three_accumulators], launches, targets=["sm_100a"], log=log)
    assert [e["step"] for e in log] == [EARLY_STAGE]
    assert rep.stage == EARLY_STAGE and rep.tmem_columns >= 3 * 256 and rep.registers is None
    assert check(rep) == [f"tensor memory {rep.tmem_columns} columns > 512 on sm_100a"]


@pytest.mark.parametrize("target", ["sm_90a", "sm_100a"])
def test_early_figures_equal_the_full_compile(target):
    launches = _record_matmul(64, 64, 32, num_warps=4, num_stages=2)
    log = []
    (rep,) = res02_reports([aot_kernels.matmul], launches, targets=[target], log=log)
    assert [e["step"] for e in log] == [EARLY_STAGE, "cubin"]
    assert rep.stage == "cubin" and rep.error is None and rep.notes == []  # no consistency note
    assert 16 <= rep.registers <= 255 and rep.spill_bytes == 0
    from lethe.aot.launches import specialize

    spec = specialize(launches[0].jit, target, launches[0].args, launches[0].kwargs)
    res = run_forked(lambda: early_figures(launches[0].jit, 90 if target == "sm_90a" else 100, spec), 120)
    assert res.status == "ok", res.detail
    early = res.value
    assert (early["shared_bytes"], early["tmem_columns"], early["num_warps"]) == (
        rep.shared_bytes, rep.tmem_columns, rep.num_warps)
    assert early["tmem_columns"] == (64 if target == "sm_100a" else 0)


def test_full_compile_out_of_budget_reports_the_known_figures():
    launches = _record_matmul(64, 64, 32, num_warps=4, num_stages=2)
    log = []
    (rep,) = res02_reports([aot_kernels.matmul], launches, targets=["sm_90a"], log=log,
                           budget=CompileBudget(early_s=120, full_s=0.0))
    assert [(e["step"], e["status"]) for e in log] == [(EARLY_STAGE, "ok"), ("cubin", "timeout")]
    assert rep.stage == EARLY_STAGE and rep.error is None
    assert rep.registers is None and rep.spill_bytes is None
    assert 16384 <= rep.shared_bytes < 32768 and rep.tmem_columns == 0
    assert rep.notes and rep.notes[0].startswith("registers and spills unknown")
    assert "0 s budget" in rep.notes[0]
    assert check(rep) == []  # shared memory fits: known and judged; registers unknown: not judged
    assert rep.config["BM"] == 64


def test_no_budget_at_all_gives_an_error_that_is_not_a_resource_finding():
    launches = _record_matmul(64, 64, 32, num_warps=4, num_stages=2)
    log = []
    (rep,) = res02_reports([aot_kernels.matmul], launches, targets=["sm_90a"], log=log,
                           budget=CompileBudget(total_s=0.0))
    assert [e["status"] for e in log] == ["timeout", "timeout"]
    assert rep.error and rep.shared_bytes is None and rep.registers is None
    assert "budget ran out" in rep.error
    assert not any(w in rep.error.lower() for w in GATE_RESOURCE_WORDS)
    for text in (budget_note("did not finish within its 1 s budget"), unknown_error("x"),
                 _budget_text("out of resources: shared memory, TMEM, tensor memory")):
        assert not any(w in text.lower() for w in GATE_RESOURCE_WORDS)


def test_run_forked_kills_the_step_and_its_children_on_timeout(tmp_path):
    pidfile = tmp_path / "pid"

    def slow():
        import subprocess

        proc = subprocess.Popen(["sleep", "60"])
        pidfile.write_text(str(proc.pid))
        proc.wait()

    t0 = time.monotonic()
    res = run_forked(slow, 1.0)
    assert res.status == "timeout" and time.monotonic() - t0 < 10
    pid = int(pidfile.read_text())
    for _ in range(50):  # the grandchild was in the step's process group: killed with it
        try:
            with open(f"/proc/{pid}/stat") as fh:
                state = fh.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            break
        if state in ("Z", "X"):
            break
        time.sleep(0.1)
    else:
        os.kill(pid, 9)
        pytest.fail("the step's child survived the timeout")


def test_run_forked_reports_results_and_errors():
    assert run_forked(lambda: {"x": [1, 2]}, 30).value == {"x": [1, 2]}

    def boom():
        raise ValueError("ptxas fatal: C7600 something")

    res = run_forked(boom, 30)
    assert res.status == "error" and "C7600" in res.detail
    res = run_forked(lambda: os._exit(3), 30)
    assert res.status == "crash" and "exit 3" in res.detail


def test_budget_from_mapping():
    assert CompileBudget.from_mapping(None) == CompileBudget()
    b = CompileBudget.from_mapping({"full_s": 5, "total_s": None})
    assert (b.early_s, b.full_s, b.total_s) == (CompileBudget().early_s, 5.0, None)


def test_run_forked_all_keeps_order_runs_in_parallel_and_budgets_at_start():
    from lethe.aot.staged import run_forked_all

    t0 = time.monotonic()
    res = run_forked_all([(lambda: time.sleep(1.0) or "a", lambda: 30.0),
                          (lambda: time.sleep(1.0) or "b", lambda: 30.0),
                          (lambda: "never", lambda: 0.0)], parallel=2)
    assert [r.value for r in res[:2]] == ["a", "b"] and all(r.status == "ok" for r in res[:2])
    assert res[2].status == "timeout" and res[2].detail == "no budget left"
    assert time.monotonic() - t0 < 1.9  # the two sleeps overlapped


CANDIDATE = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _mm(a_ptr, b_ptr, c_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * BN + rn[None, :])
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], acc.to(tl.bfloat16))


class ModelNew(torch.nn.Module):
    def forward(self, a, b):
        a, b = a.bfloat16().contiguous(), b.bfloat16().contiguous()
        c = torch.empty(a.shape[0], b.shape[1], dtype=torch.bfloat16)
        _mm[(a.shape[0] // TILE,)](a, b, c, a.shape[1], BM=TILE, BN=b.shape[1], BK=TILE // 2,
                                   num_warps=8, num_stages=STAGES)
        return c.float()
'''


def _run_aot(tmp_path, tile, stages, budget):
    import numpy as np

    from lethe.verifier.worker import run_aot

    src = CANDIDATE.replace("TILE", str(tile)).replace("STAGES", str(stages))
    payload = {"cand_src": src, "seed": 0, "init": [], "targets": ["sm_90a"], "budget": budget,
               "inputs": [{"t": "tensor", "key": "a", "dtype": "float32"},
                          {"t": "tensor", "key": "b", "dtype": "float32"}]}
    arrays = {"a": np.zeros((512, 512), np.float32), "b": np.zeros((512, 256), np.float32)}
    result, _ = run_aot(payload, arrays, tmp_path)
    return result


def _gate(resources):
    from lethe.verifier import gates
    from lethe.verifier.profiles import get

    return gates.res_02(gates.Bundle(ref={}, ref_arrays={}, cand={"resources": resources}, cand_arrays={},
                                     profile=get("strict"), seed=0))


def test_worker_fails_res02_from_the_early_stage(tmp_path):
    result = _run_aot(tmp_path, 256, 4, {"full_s": 0.0})  # the full compile would not even get a second
    (rep,) = result["resources"]
    assert rep["stage"] == EARLY_STAGE and rep["error"] is None and rep["registers"] is None
    assert rep["source"] == "aot: judged from the ttgir stage; full compile not needed"
    assert [e["step"] for e in result["aot_log"]] == [EARLY_STAGE]
    gate = _gate(result["resources"])
    assert gate.status == "fail" and f"shared memory {rep['shared_bytes']} B > 232448 B" in gate.reason


def test_worker_does_not_pass_registers_nobody_measured(tmp_path):
    result = _run_aot(tmp_path, 64, 2, {"full_s": 0.0})
    (rep,) = result["resources"]
    assert rep["stage"] == EARLY_STAGE and rep["registers"] is None and rep["shared_bytes"] < 232448
    assert rep["error"].startswith("registers and spills unknown") and rep["source"].endswith(rep["error"])
    gate = _gate(result["resources"])
    assert gate.status == "na" and "registers and spills unknown" in gate.reason
