# Compute rules of the differential stage (only with --config compute=differential|all). CPU for the fixture
# corpus; device follows config["device"].
#
# Input contract: results/audit/<corpus>/kernels.parquet -- one row per kernel with columns id, ref_src,
# cand_src (KernelBench-style sources, as extracted by the corpora stage) -- and the audit's verdict rows
# results/audit/<corpus>/rows.parquet (lethe.verifier.records schema).


rule differential_kb_check:
    conda:
        CONDA_ENV
    input:
        kernels="results/audit/{corpus}/kernels.parquet",
    output:
        kb_rows="results/differential/{corpus}/kb_rows.parquet",
        provenance="results/differential/{corpus}/kb_rows_provenance.json",
    params:
        device=config["device"],
        timeout_s=180,
    log:
        "logs/differential/{corpus}_kb_check.log",
    script:
        "../scripts/differential_kb_check.py"


rule differential_join:
    conda:
        CONDA_ENV
    input:
        rows="results/audit/{corpus}/rows.parquet",
        kb_rows="results/differential/{corpus}/kb_rows.parquet",
    output:
        differential="results/differential/{corpus}/differential.json",
        provenance="results/differential/{corpus}/provenance.json",
    params:
        profile=config["profile"],
    log:
        "logs/differential/{corpus}_join.log",
    script:
        "../scripts/differential_join.py"


# Not part of any default target: needs a GPU and a local KernelBench checkout (config kernelbench.checkout);
# without the checkout the script stops with a message saying how to provide one.
rule differential_agreement:
    conda:
        CONDA_ENV
    input:
        kernels="results/audit/{corpus}/kernels.parquet",
        ours="results/differential/{corpus}/kb_rows.parquet",
    output:
        agreement="results/differential/{corpus}/agreement.json",
    params:
        checkout=config["kernelbench"]["checkout"],
    resources:
        gpu=1,
    log:
        "logs/differential/{corpus}_agreement.log",
    script:
        "../scripts/differential_agreement.py"
