# Render rules of the audit stage: the funnel / floor / per-class table of every corpus whose audit
# aggregates are committed under results/audit/<corpus>/ (render rules read committed files only).

# Corpora audited on the GPU and judged by KernelBench's own check (config audit.replication); their
# aggregates.json is derived from the committed rows by audit_replication_aggregate below.
REPLICATED = [c for c in config["audit"].get("replication", [])
              if os.path.exists(os.path.join(workflow.basedir, "results", "audit", c, "rows.parquet"))]
AUDITED_CORPORA = sorted(
    {c for c in ("fixture", "sakana-subset", "drkernel", "sakana")
     if os.path.exists(os.path.join(workflow.basedir, "results", "audit", c, "aggregates.json"))} | set(REPLICATED)
)

RENDER_TARGETS.extend(
    [f"paper/tables/audit_{c}_floor.{ext}" for c in AUDITED_CORPORA for ext in ("md", "tex")]
)


rule audit_floor_table:
    conda:
        CONDA_ENV
    input:
        aggregates="results/audit/{corpus}/aggregates.json",
    output:
        md="paper/tables/audit_{corpus}_floor.md",
        tex="paper/tables/audit_{corpus}_floor.tex",
    wildcard_constraints:
        corpus="|".join(AUDITED_CORPORA) or "__none__",
    params:
        title=lambda wc: f"Audit of the {wc.corpus} corpus: funnel and tolerance-free floor",
        note=lambda wc: (
            f"Computed by this project's audit pipeline (results/audit/{wc.corpus}/). "
            "The verifier that produced the rows is named in aggregates.json (key: verifier)."
        ),
        caption=lambda wc: f"Audit of the {wc.corpus} corpus: funnel, floor and per-class sensitivity.",
        label=lambda wc: f"tab:audit-{wc.corpus}",
    log:
        "logs/audit/floor_table_{corpus}.log",
    script:
        "../scripts/published_render.py"


# The one-machine GPU run of a mixed KernelBench folder (audit_compute.smk: audit_gpu_run / audit_gpu_ingest):
# its audit table by candidate origin and the latency table of lethe verify. Registered once committed.
GPU_RUN_CORPUS = config["audit"].get("gpu_run", {}).get("corpus", "mixed")
GPU_RUN_DIR = f"results/audit/{GPU_RUN_CORPUS}"
if os.path.exists(os.path.join(workflow.basedir, GPU_RUN_DIR, "rows.parquet")):
    RENDER_TARGETS.extend([f"paper/tables/audit_{GPU_RUN_CORPUS}_h200.md", f"paper/tables/audit_{GPU_RUN_CORPUS}_h200.tex"])
if os.path.exists(os.path.join(workflow.basedir, "results", "tool", "latency", "latency.json")):
    RENDER_TARGETS.extend(["paper/tables/tool_latency.md", "paper/tables/tool_latency.tex"])


rule audit_gpu_run_table:
    conda:
        CONDA_ENV
    input:
        rows=f"{GPU_RUN_DIR}/rows.parquet",
        origin=f"{GPU_RUN_DIR}/origin.json",
        resume=f"{GPU_RUN_DIR}/resume.json",
        builds=f"{GPU_RUN_DIR}/builds.jsonl",
        prereg=f"{GPU_RUN_DIR}/preregistered.json",
    output:
        md=f"paper/tables/audit_{GPU_RUN_CORPUS}_h200.md",
        tex=f"paper/tables/audit_{GPU_RUN_CORPUS}_h200.tex",
    params:
        corpus=GPU_RUN_CORPUS,
    log:
        "logs/audit/gpu_run_table.log",
    script:
        "../scripts/audit_gpu_run_render.py"


rule tool_latency_table:
    conda:
        CONDA_ENV
    input:
        latency="results/tool/latency/latency.json",
    output:
        md="paper/tables/tool_latency.md",
        tex="paper/tables/tool_latency.tex",
    log:
        "logs/audit/tool_latency_table.log",
    script:
        "../scripts/tool_latency_render.py"


rule audit_replication_aggregate:
    conda:
        CONDA_ENV
    input:
        rows="results/audit/{corpus}/rows.parquet",
        kb="results/differential/{corpus}/kb_real/real/rows.jsonl",
        manifest="results/audit/{corpus}/manifest.jsonl",
    output:
        aggregates="results/audit/{corpus}/aggregates.json",
    wildcard_constraints:
        corpus="|".join(REPLICATED) or "__none__",
    params:
        corpus=lambda wc: wc.corpus,
    log:
        "logs/audit/replication_aggregate_{corpus}.log",
    script:
        "../scripts/audit_replication_aggregate.py"
