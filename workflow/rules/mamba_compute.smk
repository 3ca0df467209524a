# Compute rules of the mamba stage (only with --config compute=mamba|all): the H200 benchmark of the Mamba ops
# against mamba-ssm's CUDA selective scan and the torch path, correctness first (experiments/mamba/bench.py).
# mamba-ssm is not on the GPU image: carry its wheel (docs/mamba.md); without it the driver says so and stops.


rule mamba_bench:
    conda:
        CONDA_ENV
    input:
        driver="experiments/mamba/bench.py",
    output:
        json="results/mamba/bench/h200.json",
    resources:
        gpu=1,
    log:
        "logs/mamba/bench.log",
    shell:
        "python {input.driver} --json {output.json} > {log} 2>&1"


# C1's launch-configuration search (experiments/mamba/launch_search.py): a run folder per device run, folded into
# the current result results/mamba/launch_search/launch_search.json (lethe.results) that the render rule reads.
# Extra arguments: config gpu_args.mamba_launch_search (e.g. "--max-s 300"); the run's name: config gpu_run.
MAMBA_GPU_ARGS = config.get("gpu_args", {})
MAMBA_GPU_RUN = config.get("gpu_run", "run")


rule mamba_launch_search_run:
    conda:
        CONDA_ENV
    input:
        driver="experiments/mamba/launch_search.py",
    output:
        directory(".build/runs/mamba_launch_search/{run}"),
    params:
        args=MAMBA_GPU_ARGS.get("mamba_launch_search", ""),
    log:
        "logs/mamba/launch_search_{run}.log",
    resources:
        gpu=1,
    shell:
        "python3 {input.driver} --out {output} {params.args} > {log} 2>&1"


rule mamba_launch_search_fold:
    conda:
        CONDA_ENV
    input:
        run=f".build/runs/mamba_launch_search/{MAMBA_GPU_RUN}",
    output:
        result="results/mamba/launch_search/launch_search.json",
        provenance="results/mamba/launch_search/provenance.json",
        history="results/mamba/launch_search/history.jsonl",
    params:
        experiment="mamba-launch-search",
        run=MAMBA_GPU_RUN,
    log:
        "logs/mamba/launch_search_fold.log",
    script:
        "../scripts/results_fold.py"
