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


# KernelBench's own check, unmodified from the pinned copy (kernelbench_real.checkout), and our replicas, on the
# kernels of one KernelBench run folder (kernelbench_real.run_dir: level_<L>_problem_<P>_sample_<S>_kernel.py),
# through lethe.kernelbench.real's worker pool. The checkpoint and per-sample build folders live in cache/ and make
# the rule resumable; the committed rows carry ids, hashes and verdicts. GPU: KernelBench asserts CUDA.
KB_REAL = config["kernelbench_real"]


rule kernelbench_real:
    conda:
        CONDA_ENV
    input:
        checkout=KB_REAL["checkout"],
        problems=KB_REAL["problems"] or KB_REAL["checkout"],
        run_dir=KB_REAL["run_dir"] or "kernelbench_real.run_dir is not set in the config",
        runner="src/lethe/kernelbench/real.py",
    output:
        rows="results/differential/{corpus}/kb_real/{impl}/rows.jsonl",
        timing="results/differential/{corpus}/kb_real/{impl}/timing.jsonl",
        summary="results/differential/{corpus}/kb_real/{impl}/summary.json",
        provenance="results/differential/{corpus}/kb_real/{impl}/provenance.json",
    wildcard_constraints:
        corpus=KB_REAL["corpus"],
        impl="real|replica-paper|replica-hardened",
    params:
        work=lambda wc: f"cache/kb_real/{wc.corpus}/{wc.impl}",
        # one build directory per kernel shared by the three implementations: each extension is built once
        build_root=lambda wc: f"cache/kb_real/{wc.corpus}/build",
        device="cpu" if config["device"] == "cpu" else "cuda",
        problem_base=KB_REAL["problem_base"],
        workers=KB_REAL["workers"],
        timeout_s=KB_REAL["timeout_s"],
        kernels_per_worker=KB_REAL["kernels_per_worker"],
        build_dir_map=KB_REAL["build_dir_map"],
        extra_paths=KB_REAL["extra_paths"],
        ids=KB_REAL["ids"],
    resources:
        gpu=1,
    log:
        "logs/differential/{corpus}_kb_real_{impl}.log",
    script:
        "../scripts/kernelbench_real.py"


rule kernelbench_real_agreement:
    conda:
        CONDA_ENV
    input:
        theirs="results/differential/{corpus}/kb_real/real/rows.jsonl",
        ours="results/differential/{corpus}/kb_real/{replica}/rows.jsonl",
    output:
        agreement="results/differential/{corpus}/kb_real_agreement_{replica}.json",
    wildcard_constraints:
        corpus=KB_REAL["corpus"],
        replica="replica-paper|replica-hardened",
    log:
        "logs/differential/{corpus}_kb_real_agreement_{replica}.log",
    script:
        "../scripts/kernelbench_real.py"
