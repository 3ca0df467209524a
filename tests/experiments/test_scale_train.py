"""experiments/scale/train.py on the CPU: the dry run end to end, its resume, the parameter count."""

import json
from pathlib import Path

import pytest

from experiments.scale import train as driver


def test_print_params(capsys, tmp_path):
    assert driver.main(["--print-params", "--out", str(tmp_path)]) == 0
    assert "1,111,775,232 parameters" in capsys.readouterr().out
    assert not any(tmp_path.iterdir())


@pytest.mark.slow  # two dry runs: a few seconds each, more under the Triton interpreter
def test_dry_run_writes_the_run_folder_and_resumes(tmp_path, capsys):
    out = tmp_path / "run"
    assert driver.main(["--dry-run", "--out", str(out)]) == 0
    for name in ("log.jsonl", "checkpoint.pt", "dispatch_proof.json", "run.json", "corpus_manifest.json",
                 "reference_check.json", "provenance.json"):
        assert (out / name).is_file(), name
    assert json.loads((out / "reference_check.json").read_text())["agree"] is True
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "done" and run["step"] == 3 and run["n_parameters"] == 31_840
    proof = json.loads((out / "dispatch_proof.json").read_text())
    assert proof["all_dispatched"] is True and proof["steps"] == 3
    before = (out / "log.jsonl").read_text()
    assert driver.main(["--dry-run", "--out", str(out), "--steps", "3"]) == 0  # nothing left to do
    assert (out / "log.jsonl").read_text() == before
    assert "status done at step 3/3" in capsys.readouterr().out


@pytest.mark.slow  # two processes start torch
def test_torchrun_gloo_dry_run(tmp_path):
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(root / "src"), str(root), os.environ.get("PYTHONPATH", "")])}
    out = tmp_path / "ddp"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", str(root / "experiments/scale/train.py"),
           "--dry-run", "--path", "torch", "--out", str(out)]
    done = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    run = json.loads((out / "run.json").read_text())
    assert run["world_size"] == 2 and run["status"] == "done" and run["step"] == 3
    assert json.loads((out / "provenance.json").read_text())["world_size"] == 2
