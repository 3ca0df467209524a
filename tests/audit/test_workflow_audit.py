"""End to end through Snakemake: the fixture corpus, scattered over shards, killed mid-run and resumed.

Runs in a temporary copy of the workflow (only the audit stage loaded, the stand-in verifier), so it never
touches committed results and does not depend on other stages' rule files.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lethe.audit import shard as S

REPO = Path(__file__).resolve().parents[2]
SNAKEMAKE = Path(sys.executable).with_name("snakemake")
SHARDS = 2


@pytest.fixture()
def workdir(tmp_path):
    if not SNAKEMAKE.exists():
        pytest.skip("snakemake not installed next to this interpreter")
    for rel in ("Snakefile", "config", "workflow", "data/fixture_corpus/drkernel_fixture.parquet"):
        src, dst = REPO / rel, tmp_path / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, dst)
    (tmp_path / "test.yaml").write_text(
        "stages: [audit]\nprofiles: [strict, fast-math]\ndevice: cpu\n"
        f"audit:\n  corpus: fixture\n  shards: {SHARDS}\n  timeout_s: 60\n  memory_mb: 2048\n  verifier: fake\n"
    )
    return tmp_path


def _cmd(workdir, *flags):
    return [str(SNAKEMAKE), "--cores", "1", "--configfile", "test.yaml", *flags, "--config", "compute=audit",
            "--", "results/audit/fixture/aggregates.json"]


@pytest.mark.slow
def test_snakemake_audit_fixture_kill_and_resume(workdir):
    env = dict(os.environ, OMP_NUM_THREADS="1", LETHE_FAKE_VERIFY_SLEEP="0.2",
               LETHE_FAKE_VERIFY_LOG=str(workdir / "calls.log"))
    ck0 = workdir / "cache/audit/fixture/checkpoints" / f"0-of-{SHARDS}.jsonl"
    proc = subprocess.Popen(_cmd(workdir), cwd=workdir, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        if ck0.exists() and len(S.read_checkpoint(ck0)) >= 3:
            break
        time.sleep(0.1)
    assert proc.poll() is None, "snakemake finished before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)  # the whole job tree, as a node failure would
    proc.wait()
    done_before = {(r["id"], r["profile"]) for r in S.read_checkpoint(ck0)}
    assert done_before

    # What an operator does after a crash: release the stale lock, rerun; incomplete jobs restart and resume.
    subprocess.run(_cmd(workdir, "--unlock"), cwd=workdir, env=env, check=True, timeout=200,
                   capture_output=True)
    res = subprocess.run(_cmd(workdir, "--rerun-incomplete"), cwd=workdir, check=False, timeout=400,
                         env=dict(env, LETHE_FAKE_VERIFY_SLEEP="0"), capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    out = workdir / "results/audit/fixture"
    rows = S.read_parquet(out / "rows.parquet")
    keys = [(r["id"], r["profile"]) for r in rows]
    assert len(keys) == len(set(keys))
    assert {p for _, p in keys} == {"strict", "fast-math"}
    calls = (workdir / "calls.log").read_text().splitlines()
    redone = [k for k in done_before if calls.count("\t".join(k)) != 1]
    assert not redone  # finished rows were not verified again
    agg = json.loads((out / "aggregates.json").read_text())
    assert agg["verifier"].startswith("FAKE")
    assert agg["funnel"]["rows"] == len(keys) // 2
    assert set(agg["by_profile"]) == {"strict", "fast-math"}
    assert json.loads((out / "provenance.json").read_text())["corpus"] == "fixture"
