# GPU: the second-corpus slice through compile (16 processes), the battery under every profile, KernelBench's
# paper-era check, and throughput/scaling. Needs a CUDA GPU with nvcc (`--profile workflow/profiles/gpu`).


rule foreign_sakana:
    conda:
        CONDA_ENV
    input:
        subset="data/sakana_subset/subset.jsonl",
    output:
        rows=f"{FOREIGN_DIR}/rows.parquet",
        kb=f"{FOREIGN_DIR}/kb_rows.parquet",
        compile=f"{FOREIGN_DIR}/compile.parquet",
        throughput=f"{FOREIGN_DIR}/throughput.json",
        provenance=f"{FOREIGN_DIR}/provenance.json",
    params:
        out=FOREIGN_DIR,
    resources:
        gpu=1,
    threads: 16
    log:
        "logs/foreign/sakana.log",
    shell:
        "python experiments/foreign/sakana_h200.py --out {params.out} --workers {threads} > {log} 2>&1"
