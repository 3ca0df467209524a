"""experiments/h200/session.sh packs what a device call made; a second run in the same call keeps the first archive."""

import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("tar") is None, reason="needs bash and tar")
def test_second_run_in_one_call_does_not_replace_the_first_archive(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "OUT": str(out)}
    for _ in range(2):
        # a step with no time left is skipped: only the packing runs
        subprocess.run(["bash", str(ROOT / "experiments/h200/session.sh"), "gputests", "0"], cwd=tmp_path, env=env,
                       check=True, capture_output=True, timeout=60)
    archives = sorted(p.name for p in out.iterdir())
    assert archives == ["results.tar.gz", "results_2.tar.gz"]
    for name in archives:
        with tarfile.open(out / name) as tar:
            assert "r/gpu.txt" in tar.getnames()
    assert not (out / "r").exists()
