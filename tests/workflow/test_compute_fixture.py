"""The small test configuration (.test/config.yaml) end to end: Snakemake in compute mode audits the fixture
corpus with the real verifier on the CPU and builds the KernelBench differential from the same kernels, in a
temporary copy of the workflow (committed results untouched)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_fixture_audit_end_to_end_with_the_real_verifier(tmp_path):
    for rel in ("Snakefile", "config", "workflow", ".test", "data/fixture_corpus"):
        src, dst = REPO / rel, tmp_path / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, dst)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "2", "--configfile", ".test/config.yaml", "--",
         "results/audit/fixture/aggregates.json", "results/differential/fixture/differential.json"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=3000,
    )
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    from lethe.verifier.records import read_rows

    agg = json.loads((tmp_path / "results/audit/fixture/aggregates.json").read_text())
    rows = read_rows(tmp_path / "results/audit/fixture/rows.parquet")
    fixture = __import__("pandas").read_parquet(tmp_path / "data/fixture_corpus/drkernel_fixture.parquet")
    ids = {r["id"] for r in rows}
    assert ids <= {str(u) for u in fixture["uuid"]}, "verdict rows must come from the corpus"
    assert len(ids) == len(rows), "one verdict row per kernel and profile"
    # The funnel starts from every audited-class row and each drop keeps its reason and ids.
    assert agg["funnel"]["rows"] == len(ids)
    for reason, dropped in agg["funnel"]["dropped_ids"].items():
        assert set(dropped) <= ids, reason
    assert agg["funnel"]["not_toolchain_artifact"] == agg["floor"]["denominator"]
    gated = [r for r in rows if r["status"] == "gated"]
    assert gated and all(len(r["gates"]) == 12 for r in gated)
    assert (tmp_path / "results/audit/fixture/provenance.json").exists()
    diff = json.loads((tmp_path / "results/differential/fixture/differential.json").read_text())
    text = json.dumps(diff)
    assert "paper" in text and "hardened" in text, "both KernelBench variants must be tabulated"
