"""The package as the field installs it: every package folder listed, nothing but `lethe` at the top of the
installed namespace, sources valid on the oldest admitted Python, and a wheel that works in a fresh venv from
another directory (`lethe --version`, `lethe verify`, `lethe audit`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = ROOT / "data" / "hostile"


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_package_folder_is_listed():
    cfg = _pyproject()["tool"]["setuptools"]
    found = {".".join(p.relative_to(ROOT / "src").parent.parts) for p in (ROOT / "src" / "lethe").rglob("__init__.py")}
    found |= {".".join(("lethe",) + p.relative_to(ROOT).parent.parts) for p in (ROOT / "kernels").rglob("__init__.py")}
    assert set(cfg["packages"]) == found
    assert cfg["package-dir"] == {"": "src", "lethe.kernels": "kernels"}


def test_library_dependencies_are_lower_bounds_and_pins_live_in_constraints():
    proj = _pyproject()["project"]
    assert proj["name"] != "lethe"  # taken on PyPI by another project
    assert all("==" not in d.split(";")[0] for d in proj["dependencies"]), proj["dependencies"]
    names = {d.split(">")[0].split("=")[0].split(";")[0].strip().lower() for d in proj["dependencies"]}
    assert not names & {"snakemake", "matplotlib", "datasets", "huggingface-hub", "pygments", "jsonschema"}
    pins = [ln for ln in (ROOT / "constraints.txt").read_text().splitlines() if ln and not ln.startswith("#")]
    assert pins and all("==" in ln for ln in pins)
    assert "constraints.txt" in (ROOT / "Makefile").read_text()
    assert (ROOT / "LICENSE").is_file()


@pytest.mark.slow
def test_sources_need_nothing_newer_than_the_oldest_admitted_python():
    oldest = _pyproject()["project"]["requires-python"].split(",")[0].lstrip(">=").strip()
    vermin = Path(sys.executable).with_name("vermin")
    if not vermin.exists():
        pytest.skip("vermin not installed (the [dev] extra has it)")
    res = subprocess.run([str(vermin), f"--target={oldest}-", "--violations", "--no-tips", "-q", "src", "kernels"],
                         cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.slow
def test_wheel_installs_and_runs_in_a_fresh_venv(tmp_path):
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", str(ROOT),
                    "-w", str(dist)], check=True, capture_output=True)
    (whl,) = dist.glob("lethe_verifier-*.whl")
    tops = {n.split("/")[0] for n in zipfile.ZipFile(whl).namelist()}
    assert {t for t in tops if not t.endswith((".dist-info", ".data"))} == {"lethe"}, tops
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    # Only the wheel and its declared dependencies; the constraints file picks their versions (the local CPU
    # torch wheel), it installs nothing itself.
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-compile", "-c", str(ROOT / "constraints.txt"),
                    str(whl)], check=True, capture_output=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    lethe = str(venv / "bin" / "lethe")

    def run(*args):
        return subprocess.run([lethe, *args], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=900)

    res = run("--version")
    assert res.returncode == 0 and res.stdout.startswith("lethe "), res.stderr
    probe = subprocess.run([str(py), "-c", "import lethe, lethe.kernels.gdn; import importlib.util as u; "
                            "print(lethe.__file__, u.find_spec('kernels'))"], cwd=elsewhere, env=env,
                           capture_output=True, text=True)
    assert str(venv) in probe.stdout and probe.stdout.strip().endswith("None"), probe.stdout + probe.stderr
    res = run("verify", str(HOSTILE / "ref.py"), str(HOSTILE / "good" / "cand.py"), "--device", "cpu", "--json",
              "--gates", "CMP-01,EXC-01")
    assert res.returncode == 0, res.stdout + res.stderr
    assert json.loads(res.stdout)["verdict"] == "pass"
    pairs = tmp_path / "pairs"
    for name in ("good", "sys_exit"):
        (pairs / name).mkdir(parents=True)
        (pairs / name / "ref.py").write_text((HOSTILE / "ref.py").read_text())
        (pairs / name / "cand.py").write_text((HOSTILE / name / "cand.py").read_text())
    res = run("audit", str(pairs), "--out", str(tmp_path / "audit"), "--device", "cpu", "--quiet")
    assert res.returncode == 1, res.stdout + res.stderr  # sys_exit crashes its row
    assert "2 kernels" in res.stdout and (tmp_path / "audit" / "rows.parquet").is_file()
