# Lethe: every table and figure of arXiv 2608.12700, rendered from committed intermediates.
#
#   snakemake --cores all                         render only (no GPU, no compute rule joins the DAG)
#   snakemake --cores all --config compute=all    also (re)compute every experiment whose inputs changed
#   snakemake --cores all --config compute=audit --forcerun audit_gather   re-run one experiment
#
# Rules live in workflow/rules/<stage>.smk (render rules) and <stage>_compute.smk (compute rules, included
# only when `compute` names their stage). docs/ARCHITECTURE.md maps every paper number to its rule.

from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"


include: "workflow/rules/common.smk"


# load rules: one file per stage
for _stage in STAGES:
    include: f"workflow/rules/{_stage}.smk"
    if compute_enabled(_stage):
        include: f"workflow/rules/{_stage}_compute.smk"


report: "workflow/report/workflow.rst"


# target rules
rule all:
    default_target: True
    input:
        RENDER_TARGETS,


# Render rules (every rule outside a <stage>_compute.smk) run on the submitting host under a cluster executor:
# seconds of CPU each, where a SLURM job would cost minutes of queueing.
workflow.localrules(*(r.name for r in workflow.rules if not str(r.snakefile).endswith("_compute.smk")))
