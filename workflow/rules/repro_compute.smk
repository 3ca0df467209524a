# Compute rule of the repro stage (CPU): one standalone repro per recorded red-team and mixed-corpus failure,
# each run by the interpreter named in config (gpu_args is not involved: nothing here needs a GPU).


rule repro_measure:
    conda:
        CONDA_ENV
    input:
        red_team="results/red_team/rows.parquet",
        mixed="results/audit/mixed/rows.parquet",
    output:
        summary=REPRO_SUMMARY,
        provenance="results/repro/provenance.json",
    params:
        python=config.get("repro_python", "python"),
    log:
        "logs/repro/measure.log",
    shell:
        "python -m lethe.repro.measure --out results/repro --python {params.python} > {log} 2>&1"
