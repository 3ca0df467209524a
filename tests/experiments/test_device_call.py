"""experiments/h200/device_call.sh: a device call runs Snakemake's compute targets and packs what they wrote; a
second call in the same device session keeps the first archive."""

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("tar") is None, reason="needs bash and tar")
@pytest.mark.slow
def test_second_call_does_not_replace_the_first_archive(tmp_path):
    """Two calls (a dry run each: nothing computed) leave results.tar.gz and results_2.tar.gz, each with the
    Snakemake log and the GPU query, and no unpacked folder."""
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "OUT": str(out), "PYTHON": sys.executable}
    for _ in range(2):
        subprocess.run(["bash", str(ROOT / "experiments/h200/device_call.sh"), "none", "-n", "--cores", "1"],
                       cwd=ROOT, env=env, check=True, capture_output=True, timeout=300)
    archives = sorted(p.name for p in out.iterdir())
    assert archives == ["results.tar.gz", "results_2.tar.gz"]
    for name in archives:
        with tarfile.open(out / name) as tar:
            names = tar.getnames()
            assert {"r/gpu.txt", "r/snakemake.log"} <= set(names) and "r/.start" not in names
            log = tar.extractfile("r/snakemake.log").read().decode()
            assert "snakemake rc=0" in log
    assert not (out / "r").exists()
