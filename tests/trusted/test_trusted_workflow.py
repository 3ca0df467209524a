"""The trusted stage's rules: lint-clean, render-only by default, the compute rule only with compute=trusted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}


def _smk(*args):
    return subprocess.run(SNAKEMAKE + list(args), cwd=ROOT, capture_output=True, text=True, timeout=300, env=ENV)


@pytest.mark.slow
def test_lint_is_clean():
    out = _smk("--lint")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]


@pytest.mark.slow
def test_compute_rule_joins_only_with_compute_trusted_and_writes_the_device_folder():
    target = "results/trusted/gpu/rows.parquet"
    on = _smk("-n", "--cores", "1", "--config", "compute=trusted", "device=cuda", "--", target)
    assert on.returncode == 0, on.stderr[-3000:]
    assert "rule trusted:" in on.stdout and "logs/trusted/run_cuda.log" in on.stdout
    off = _smk("-n", "--cores", "1", "--", target)
    assert off.returncode != 0 and "MissingRuleException" in (off.stdout + off.stderr)


def test_default_target_renders_the_trusted_tables_once_results_exist():
    out = _smk("-n", "--cores", "1", "--forcerun", "trusted_table", "--", "paper/tables/trusted_false_fail.md")
    if not (ROOT / "results" / "trusted" / "rows.parquet").exists():
        assert out.returncode != 0
        return
    assert out.returncode == 0, out.stderr[-3000:]
    assert "rule trusted_table:" in out.stdout and "rule trusted:" not in out.stdout
