# Compute rule of the published stage: re-aggregate the paper's own per-row records (data/published/) with
# lethe.audit.aggregate and check every figure against the published JSON. CPU only, about a second.


rule published_aggregate:
    conda:
        CONDA_ENV
    input:
        rows="data/published/audit_rows.jsonl.gz",
        ablation="data/published/audit_floor_ablation.json",
        drkernel="data/published/audit_drkernel.json",
        tolerance_free="data/published/audit_tolerance_free.json",
    output:
        aggregates="results/published/aggregates.json",
        provenance="results/published/provenance.json",
    log:
        "logs/published/aggregate.log",
    script:
        "../scripts/published_aggregate.py"
