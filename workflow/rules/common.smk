# Shared helpers for every stage: config validation, the render-target registry, compute switches.
import glob
import os
import sys

from snakemake.utils import validate

validate(config, schema="../schemas/config.schema.yaml")

# Thin scripts import the tested package from src/ even when it is not pip-installed.
sys.path.insert(0, os.path.join(workflow.basedir, "src"))

# Stages in data-flow order; each has workflow/rules/<stage>.smk and may have <stage>_compute.smk.
STAGES = [
    stage
    for stage in config["stages"]
    if os.path.exists(os.path.join(workflow.basedir, "workflow", "rules", f"{stage}.smk"))
]

# The one software environment every rule runs in (`--sdm conda`; otherwise the active virtualenv). Paths in
# a rule's conda directive are relative to its .smk file.
CONDA_ENV = "../envs/lethe.yaml"

# Every render rule appends its outputs here; `rule all` asks for exactly these.
RENDER_TARGETS = []


def compute_enabled(stage):
    """True when `--config compute=...` names this stage (or `all`) and the stage has compute rules."""
    wanted = config["compute"]
    if isinstance(wanted, str):
        wanted = [w.strip() for w in wanted.split(",") if w.strip()]
    on = "all" in wanted or stage in wanted
    path = os.path.join(workflow.basedir, "workflow", "rules", f"{stage}_compute.smk")
    return on and os.path.exists(path)


def python_cmd():
    """The interpreter the workflow itself runs under, so scripts see the same environment."""
    return sys.executable


# Source files of one kernel suite (data/<suite>/<member>/*.py and manifest.yaml): the red_team compute rules'
# inputs, so that editing a kernel re-runs its suite.
def _suite_files(suite):
    return sorted(
        glob.glob(os.path.join(workflow.basedir, "data", suite, "*", "*.py"))
        + glob.glob(os.path.join(workflow.basedir, "data", suite, "*", "manifest.yaml"))
    )
