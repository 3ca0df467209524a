# Render rules of the hand-audit stage: the summary of each committed label file in data/hand_audit/.
RENDER_TARGETS.extend(
    [
        "paper/tables/hand_audit_published.md",
        "paper/tables/hand_audit_published.tex",
    ]
)


rule hand_audit_published_summary:
    conda:
        CONDA_ENV
    input:
        labels="data/hand_audit/published_sample.csv",
        buckets="data/hand_audit/published_sample.buckets.json",
    output:
        md="paper/tables/hand_audit_published.md",
        tex="paper/tables/hand_audit_published.tex",
    log:
        "logs/hand_audit/published_summary.log",
    script:
        "../scripts/hand_audit_render.py"


# The GPU corpora's disputed cells: select (every kernel while a cell is small, a stratified sample of
# hand_audit.gpu_target once it grows) and merge the selection into the label file; the auditor copies
# results/hand_audit/gpu_disputed/sample.csv over data/hand_audit/gpu_disputed.csv and labels the new rows.
_HA_GPU = config.get("hand_audit", {}).get("gpu_corpora", [])
RENDER_TARGETS.extend(
    [
        "results/hand_audit/gpu_disputed/selection.json",
        "paper/tables/hand_audit_gpu.md",
        "paper/tables/hand_audit_gpu.tex",
    ]
)


rule hand_audit_gpu_select:
    conda:
        CONDA_ENV
    input:
        cells=expand("results/differential/{c}/real_vs_battery.json", c=_HA_GPU),
        rows=expand("results/audit/{c}/rows.parquet", c=_HA_GPU),
        manifest="results/audit/leaderboard/manifest.jsonl",
        labels="data/hand_audit/gpu_disputed.csv",
    output:
        selection="results/hand_audit/gpu_disputed/selection.json",
        labels="results/hand_audit/gpu_disputed/sample.csv",
    params:
        corpora=_HA_GPU,
        profile=config["profile"],
        seed=config["seed"],
        target=config.get("hand_audit", {}).get("gpu_target", 40),
        kb_root=config["trusted"]["kb_root"],
    log:
        "logs/hand_audit/gpu_select.log",
    script:
        "../scripts/hand_audit_gpu_select.py"


rule hand_audit_gpu_summary:
    conda:
        CONDA_ENV
    input:
        labels="data/hand_audit/gpu_disputed.csv",
        selection="results/hand_audit/gpu_disputed/selection.json",
    output:
        md="paper/tables/hand_audit_gpu.md",
        tex="paper/tables/hand_audit_gpu.tex",
    log:
        "logs/hand_audit/gpu_summary.log",
    script:
        "../scripts/hand_audit_gpu_render.py"
