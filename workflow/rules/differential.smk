# Render rules of the differential stage: KernelBench's check vs the battery (paper-era and hardened 2x2 tables,
# the disputed cell by gate) and the agreement between KernelBench's own check and our re-implementation.
# The published tables read the authors' release (data/published/); the per-corpus tables read this project's
# committed results/differential/<corpus>/differential.json (written by differential_compute.smk).
import glob
import os

RENDER_TARGETS.extend(
    [
        "paper/tables/differential_published.md",
        "paper/tables/differential_published.tex",
        "paper/tables/differential_published_by_gate.md",
        "paper/tables/differential_published_by_gate.tex",
        "paper/tables/kernelbench_agreement_published.md",
        "paper/tables/kernelbench_agreement_published.tex",
    ]
)

# A corpus's table joins the default target once its differential is committed; before that there is nothing
# to render from, and the default target must never need a compute rule.
DIFFERENTIAL_CORPORA = [
    c
    for c in ("fixture", "sakana-subset", "drkernel")
    if os.path.exists(os.path.join(workflow.basedir, "results", "differential", c, "differential.json"))
]
for _c in DIFFERENTIAL_CORPORA:
    RENDER_TARGETS.extend(
        [f"paper/tables/differential_{_c}{s}" for s in (".md", ".tex", "_by_gate.md", "_by_gate.tex")]
    )


rule differential_published_tables:
    conda:
        CONDA_ENV
    input:
        crossval="data/published/crossval_kernelbench.json",
        agreement="data/published/kernelbench_actual_agreement.json",
    output:
        md="paper/tables/differential_published.md",
        tex="paper/tables/differential_published.tex",
        gate_md="paper/tables/differential_published_by_gate.md",
        gate_tex="paper/tables/differential_published_by_gate.tex",
        agree_md="paper/tables/kernelbench_agreement_published.md",
        agree_tex="paper/tables/kernelbench_agreement_published.tex",
    log:
        "logs/differential/published_tables.log",
    script:
        "../scripts/differential_render.py"


rule differential_corpus_tables:
    conda:
        CONDA_ENV
    input:
        differential="results/differential/{corpus}/differential.json",
    output:
        md="paper/tables/differential_{corpus}.md",
        tex="paper/tables/differential_{corpus}.tex",
        gate_md="paper/tables/differential_{corpus}_by_gate.md",
        gate_tex="paper/tables/differential_{corpus}_by_gate.tex",
    wildcard_constraints:
        corpus="fixture|sakana-subset|drkernel",
    log:
        "logs/differential/{corpus}_tables.log",
    script:
        "../scripts/differential_render.py"


# KernelBench's own check vs our replica on a corpus (lethe.kernelbench.real): rendered once the agreement JSON
# of that corpus and replica is committed (written by differential_compute.smk's kernelbench_real_agreement).
# The corpus is named in config (kernelbench_real.corpus), never found by globbing results/.
_KB_REAL_CORPUS = config["kernelbench_real"]["corpus"]
for _replica in ("replica-paper", "replica-hardened"):
    _p = os.path.join(workflow.basedir, "results", "differential", _KB_REAL_CORPUS,
                      f"kb_real_agreement_{_replica}.json")
    if not os.path.exists(_p):
        continue
    _corpus = _KB_REAL_CORPUS
    RENDER_TARGETS.extend(
        [
            f"paper/tables/kernelbench_real_{_corpus}_{_replica}{s}"
            for s in (".md", ".tex", "_classes.md", "_classes.tex")
        ]
    )


rule kernelbench_real_tables:
    conda:
        CONDA_ENV
    input:
        agreement="results/differential/{corpus}/kb_real_agreement_{replica}.json",
    output:
        md="paper/tables/kernelbench_real_{corpus}_{replica}.md",
        tex="paper/tables/kernelbench_real_{corpus}_{replica}.tex",
        classes_md="paper/tables/kernelbench_real_{corpus}_{replica}_classes.md",
        classes_tex="paper/tables/kernelbench_real_{corpus}_{replica}_classes.tex",
    wildcard_constraints:
        corpus="[A-Za-z0-9_.-]+",
        replica="replica-paper|replica-hardened",
    log:
        "logs/differential/{corpus}_kb_real_tables_{replica}.log",
    script:
        "../scripts/kernelbench_real_render.py"


# KernelBench's own check (run unmodified on the GPU) vs the battery's strict rows on the same kernels: one table
# per corpus listed in config (kernelbench_real.vs_battery), once experiments/audit/ingest_h200.py has committed
# results/differential/<corpus>/real_vs_battery.json.
for _c in config["kernelbench_real"].get("vs_battery", []):
    if os.path.exists(os.path.join(workflow.basedir, "results", "differential", _c, "real_vs_battery.json")):
        RENDER_TARGETS.extend(
            [f"paper/tables/kernelbench_real_vs_battery_{_c}{s}" for s in (".md", ".tex", "_by_gate.md", "_by_gate.tex")]
        )


rule kernelbench_real_vs_battery_tables:
    conda:
        CONDA_ENV
    input:
        differential="results/differential/{corpus}/real_vs_battery.json",
    output:
        md="paper/tables/kernelbench_real_vs_battery_{corpus}.md",
        tex="paper/tables/kernelbench_real_vs_battery_{corpus}.tex",
        gate_md="paper/tables/kernelbench_real_vs_battery_{corpus}_by_gate.md",
        gate_tex="paper/tables/kernelbench_real_vs_battery_{corpus}_by_gate.tex",
    wildcard_constraints:
        corpus="[A-Za-z0-9_.-]+",
    log:
        "logs/differential/{corpus}_real_vs_battery_tables.log",
    script:
        "../scripts/kernelbench_real_vs_battery_render.py"
