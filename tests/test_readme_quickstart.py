"""The README's quickstart works as printed: its `lethe verify` and `lethe repro` lines and its Python line run from the checkout
(the `pip install .` line is the editable install this suite runs in; the audit line is
tests/audit/test_batch.py's command on a larger folder)."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _quickstart() -> list[str]:
    lines = ROOT.joinpath("README.md").read_text().splitlines()
    block = []
    for line in lines[1:]:
        if line.startswith("    "):
            block.append(line.strip())
        elif block:
            break
    return [ln.split("  #")[0].strip() for ln in block]


def test_quickstart_is_six_lines_starting_with_the_install():
    q = _quickstart()
    assert len(q) == 6 and q[0] == "pip install ." and q[1].startswith("lethe verify")
    assert q[3].startswith("lethe repro")


@pytest.mark.slow
def test_quickstart_commands_work_as_printed():
    q = _quickstart()
    lethe = str(Path(sys.executable).with_name("lethe"))
    good = subprocess.run([lethe, *shlex.split(q[1])[1:]], cwd=ROOT, capture_output=True, text=True)
    assert good.returncode == 0 and "verdict: pass" in good.stdout, good.stdout + good.stderr
    bad = subprocess.run([lethe, *shlex.split(q[2])[1:]], cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode == 1 and "failures by probe" in bad.stdout and "replay: lethe replay" in bad.stdout, bad.stdout
    py = subprocess.run([sys.executable, *shlex.split(q[5])[1:]], cwd=ROOT, capture_output=True, text=True)
    assert py.returncode == 0 and "'passed': True" in py.stdout, py.stdout + py.stderr


@pytest.mark.slow
def test_quickstart_repro_line_writes_a_failing_standalone_case(tmp_path):
    """The repro line, with its --out moved into the test's directory: exit 0, and the directory's pytest, run
    without lethe importable, fails its contract test."""
    from lethe.repro.measure import CONTRACT_TEST, run_pytest

    args = shlex.split(_quickstart()[3])
    args[args.index("--out") + 1] = str(tmp_path / "repro")
    lethe = str(Path(sys.executable).with_name("lethe"))
    res = subprocess.run([lethe, *args[1:]], cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    assert run_pytest(tmp_path / "repro")[CONTRACT_TEST] == "failed"
