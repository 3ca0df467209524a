# GPU: the second-corpus slice through compile (16 processes), the battery under every profile, KernelBench's
# paper-era check, and throughput/scaling. Needs a CUDA GPU with nvcc (`--profile workflow/profiles/gpu`).
# The experiment writes its resumable logs and build cache under cache/ (not committed); lethe.foreign.ingest
# then rebuilds the small committed files of results/foreign/sakana-subset/ from those logs.

FOREIGN_WORK = "cache/foreign/sakana"


rule foreign_sakana:
    conda:
        CONDA_ENV
    input:
        subset="data/sakana_subset/subset.jsonl",
    output:
        rows=f"{FOREIGN_DIR}/rows.parquet",
        kb=f"{FOREIGN_DIR}/kb_rows.parquet",
        compile=f"{FOREIGN_DIR}/compile.parquet",
        timings=f"{FOREIGN_DIR}/timings.parquet",
        throughput=f"{FOREIGN_DIR}/throughput.json",
        provenance=f"{FOREIGN_DIR}/provenance.json",
    params:
        work=FOREIGN_WORK,
        out=lambda w, output: os.path.dirname(output.rows),
    resources:
        gpu=1,
    threads: 16
    log:
        "logs/foreign/sakana.log",
    shell:
        "python experiments/foreign/sakana_h200.py --out {params.work} --workers {threads} > {log} 2>&1"
        " && python -m lethe.foreign.ingest --src {params.work} --dest {params.out} --subset {input.subset}"
        " --log {log} >> {log} 2>&1"
