"""The house itself: pins agree, config validates, the DAG is lint-clean and render-only by default."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]


def _pins_from_constraints() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            pins[_norm(name)] = version
    return pins


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared() -> set[str]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    deps = data["dependencies"] + [d for extra in ("dev", "workflow") for d in data["optional-dependencies"][extra]]
    return {_norm(re.split(r"[<>=!;\[ ]", d, maxsplit=1)[0]) for d in deps}


def _pins_from_environment() -> dict[str, str]:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_block = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    return {_norm(p.split("==")[0]): p.split("==")[1] for p in pip_block if "==" in p}


def test_environment_yml_mirrors_the_constraints():
    cons = _pins_from_constraints()
    env = _pins_from_environment()
    assert env and all(cons.get(n) == v for n, v in env.items()), {n: (v, cons.get(n)) for n, v in env.items()}


def test_every_declared_dependency_is_pinned_in_the_constraints():
    cons = _pins_from_constraints()
    assert _declared() <= set(cons), _declared() - set(cons)
    for name, version in cons.items():
        assert re.fullmatch(r"[0-9][0-9A-Za-z.+]*", version), (name, version)


def test_config_schema_fills_defaults():
    from snakemake.utils import validate

    config = {"compute": "none", "stages": ["paper"]}
    validate(config, str(ROOT / "workflow/schemas/config.schema.yaml"))
    assert config["audit"]["shards"] >= 1
    assert config["profile"] == "strict"


def test_config_schema_rejects_bad_values():
    from snakemake.exceptions import WorkflowError
    from snakemake.utils import validate

    with pytest.raises(WorkflowError):
        validate({"compute": "none", "stages": [], "profile": "lenient"}, str(ROOT / "workflow/schemas/config.schema.yaml"))


def _rules_in(paths) -> set[str]:
    names = set()
    for path in paths:
        names |= set(re.findall(r"^rule\s+(\w+)\s*:", path.read_text(), flags=re.M))
    return names


def compute_rule_names() -> set[str]:
    return _rules_in(sorted((ROOT / "workflow/rules").glob("*_compute.smk")))


@pytest.mark.parametrize("extra", [[], ["--config", "compute=all"]], ids=["render", "compute-all"])
def test_lint_is_clean(extra):
    out = subprocess.run(SNAKEMAKE + ["--lint", *extra], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Lints for" not in out.stdout + out.stderr, out.stdout


def test_compute_mode_dry_run_lists_compute_rules():
    compute = compute_rule_names()
    if not compute:
        pytest.skip("no compute rules defined yet")
    out = subprocess.run(
        SNAKEMAKE + ["-n", "--cores", "1", "--forceall", "--config", "compute=all", "--rulegraph"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    shown = set(re.findall(r'label = "(\w+)"', out.stdout))
    assert shown & compute, f"compute rules {sorted(compute)} missing from the compute-mode DAG {sorted(shown)}"


@pytest.mark.slow
def test_fresh_clone_default_target_renders_without_compute(tmp_path):
    """git checkout makes committed results look older than scripts; the default target must still run no
    compute rule, finish quickly, and leave the clone byte-identical to the commit."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip("not a git checkout")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=300)
    env = {**__import__("os").environ, "PYTHONPATH": str(clone / "src")}
    out = subprocess.run(
        SNAKEMAKE + ["--cores", "2"], cwd=clone, capture_output=True, text=True, timeout=600, env=env,
    )
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-4000:]
    ran = set(re.findall(r"^(?:local)?rule (\w+):", log, flags=re.M))
    assert not (ran & compute_rule_names()), f"compute rules ran on a fresh clone: {ran & compute_rule_names()}"
    status = subprocess.run(["git", "status", "--porcelain"], cwd=clone, capture_output=True, text=True)
    assert status.stdout == "", f"default target changed the tree:\n{status.stdout}"


def test_every_rule_names_the_project_environment():
    from tools.add_rule_envs import add_envs  # the repository root is on pytest's path (pyproject pythonpath)

    for path in sorted((ROOT / "workflow/rules").glob("*.smk")):
        text = path.read_text()
        assert add_envs(text) == text, f"{path.name}: a rule lacks `conda: CONDA_ENV` (run tools/add_rule_envs.py)"


def test_test_file_basenames_are_unique():
    """pytest's default import mode needs unique basenames across test folders (conftest.py excepted)."""
    names = [p.name for p in (ROOT / "tests").rglob("test_*.py")]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
