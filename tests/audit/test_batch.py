"""`lethe audit`: one command over a KernelBench run layout (and the pairs layout), parallel workers, and a
resume after SIGKILL that loses and duplicates nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest

from lethe.audit import batch

REF = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a):
        return torch.relu(a) {op} 1.0


def get_inputs():
    return [torch.randn(16, 24)]


def get_init_inputs():
    return []
'''
CAND = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a):
        return {expr}
'''


@pytest.fixture
def kb_run(tmp_path):
    kb = tmp_path / "KernelBench" / "level1"
    kb.mkdir(parents=True)
    (kb / "1_ReluPlus.py").write_text(REF.format(op="+"))
    (kb / "2_ReluMinus.py").write_text(REF.format(op="-"))
    run = tmp_path / "runs" / "demo"
    run.mkdir(parents=True)
    kernels = {(1, 0): "torch.relu(a) + 1.0", (1, 1): "torch.relu(a) + 1.0001",
               (2, 0): "torch.clamp(a, min=0) - 1.0", (2, 1): "torch.relu(a) - 1.0", (7, 0): "a"}
    for (p, s), expr in kernels.items():
        (run / f"level_1_problem_{p}_sample_{s}_kernel.py").write_text(CAND.format(expr=expr))
    (run / "notes.txt").write_text("not a kernel")
    return tmp_path, run


def test_discover_kernelbench_layout(kb_run):
    root, run = kb_run
    items = batch.discover(run, kernelbench=str(root))  # the checkout root (holds KernelBench/level1)
    assert [it["id"] for it in items] == ["level_1_problem_1_sample_0", "level_1_problem_1_sample_1",
                                          "level_1_problem_2_sample_0", "level_1_problem_2_sample_1",
                                          "level_1_problem_7_sample_0"]
    assert items[0]["ref_path"].endswith("1_ReluPlus.py") and "extract_error" in items[-1]
    zero = batch.discover(run, kernelbench=str(root / "KernelBench"), problem_base=0)
    assert zero[0]["ref_path"].endswith("2_ReluMinus.py")  # problem 1 counted from 0 is the second file
    with pytest.raises(batch.LayoutError):
        batch.discover(run)  # no pairs there


def _audit(run, root, out, *extra):
    return subprocess.Popen([sys.executable, "-m", "lethe.cli", "audit", str(run), "--kernelbench", str(root),
                             "--out", str(out), "--device", "cpu", "--workers", "2", "--quiet", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


@pytest.mark.slow
def test_audit_kernelbench_run_resumes_after_sigkill(kb_run, tmp_path):
    root, run = kb_run
    out = tmp_path / "out"
    p = _audit(run, root, out)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and p.poll() is None:
        if sum(batch._count_rows(f) for f in (out / "work").glob("shard-*.jsonl")) >= 1:
            break
        time.sleep(0.2)
    assert p.poll() is None, p.communicate()
    os.kill(p.pid, signal.SIGKILL)  # the command itself; its workers die with it (PR_SET_PDEATHSIG)
    p.wait()
    q = _audit(run, root, out)
    stdout, stderr = q.communicate(timeout=600)
    assert q.returncode == 1, stderr  # some kernels fail a gate
    rows = pq.read_table(out / "rows.parquet").to_pylist()
    ids = [r["id"] for r in rows]
    assert sorted(ids) == sorted(set(ids)) and len(ids) == 5  # nothing lost, nothing twice
    by_id = {r["id"]: r for r in rows}
    assert by_id["level_1_problem_7_sample_0"]["status"] == "no_candidate"
    summary = {s["id"]: s for s in map(json.loads, (out / "summary.jsonl").read_text().splitlines())}
    good = summary["level_1_problem_1_sample_0"]
    assert good["compiled"] and good["correctness"] and good["lethe_verdict"] == {"strict": "pass"}
    # +1.0001 is within KernelBench-style allclose but not within Lethe's contract.
    off = summary["level_1_problem_1_sample_1"]
    assert off["compiled"] and off["lethe_verdict"]["strict"] == "fail" and "CMP-01" in off["failed_gates"]["strict"]
    assert summary["level_1_problem_2_sample_0"]["lethe_verdict"] == {"strict": "pass"}
    assert "5 kernels" in stdout


def test_each_worker_sees_one_device_round_robin():
    envs = [batch.worker_env(i, ["0", "1"], {"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "0,1"}) for i in range(4)]
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["0", "1", "0", "1"]
    assert all(e["PATH"] == "/bin" for e in envs)
    assert batch.worker_env(0, None, {"CUDA_VISIBLE_DEVICES": "3"})["CUDA_VISIBLE_DEVICES"] == "3"


@pytest.mark.slow
def test_rows_do_not_depend_on_how_the_run_is_spread_over_devices(kb_run, tmp_path):
    """Two workers on two (fake, CPU) devices give the same rows, bit for bit apart from wall-clock fields, as
    one worker: the multi-GPU audit (issue 31) only spreads the work."""
    from lethe.verifier.records import deterministic_view

    root, run = kb_run
    views = []
    for extra in (["--workers", "1"], ["--workers", "2", "--gpus", "0,1"]):
        out = tmp_path / f"out{len(views)}"
        p = subprocess.run([sys.executable, "-m", "lethe.cli", "audit", str(run), "--kernelbench", str(root),
                            "--out", str(out), "--device", "cpu", "--quiet", *extra], capture_output=True, text=True,
                           timeout=900)
        assert p.returncode == 1, p.stderr[-2000:]
        rows = sorted(pq.read_table(out / "rows.parquet").to_pylist(), key=lambda r: (r["id"], r["profile"]))
        views.append([{k: v for k, v in deterministic_view(r).items() if k != "shard"} for r in rows])
    assert views[0] == views[1]
