"""`lethe repro` on the command line: exit codes, and a written case whose pytest fails without lethe."""

from __future__ import annotations

import pytest

from lethe.cli import main
from lethe.repro.measure import CONTRACT_TEST, run_pytest
from lethe.verifier import api, records
from lethe.verifier import fixtures as F
from lethe.verifier.testing import inprocess_runner


@pytest.fixture
def rows(files, tmp_path):
    rp, cp = files("ref.py", F.SOFTMAX_REF), files("cand.py", F.SOFTMAX_NAN_TO_NUM)
    row = api.verify_files(rp, cp, device="cpu", seed=3, kernel_id="nan2num", runner=inprocess_runner)
    path = tmp_path / "rows.parquet"
    records.write_rows([row], path)
    return str(path)


def test_usage_errors_exit_2(rows, tmp_path, capsys):
    out = str(tmp_path / "r")
    assert main(["repro", str(tmp_path / "missing.parquet"), "nan2num", "EXC-01", "--out", out]) == 2
    assert main(["repro", rows, "nope", "EXC-01", "--out", out]) == 2
    assert main(["repro", rows, "nan2num", "RES-02", "--out", out]) == 2
    assert main(["repro", rows, "nan2num", "CMP-01", "--out", out]) == 2  # passed in this row
    assert "did not fail" in capsys.readouterr().err


@pytest.mark.slow
def test_cli_writes_a_case_that_fails_standalone(rows, tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["repro", rows, "nan2num", "EXC-01", "--out", str(out), "--budget-s", "60"]) == 0
    assert "wrote" in capsys.readouterr().out
    assert run_pytest(out)[CONTRACT_TEST] == "failed"
