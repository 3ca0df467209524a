# Compute rules of the mamba stage (only with --config compute=mamba|all).
# mamba_ssm_build: the official competitor, mamba-ssm's pinned sdist (lethe.perf.mamba_ssm: SHA-256 checked, a
#   hand-supplied file named in config mamba_ssm.sdist when offline) with its CUDA selective scan built for the
#   node's GPU into cache/mamba_ssm (the build folder is the cache).
# mamba_bench: the H200 benchmark of C1-C6 against mamba-ssm and the torch paths, correctness first
#   (experiments/mamba/bench.py) with the built extension and the package on PYTHONPATH; its run folder is folded
#   into results/mamba/bench/ by lethe.results (docs/mamba.md).
# mamba_positive_control_gpu: C1-C7 through the battery under every profile, sandboxed, on the GPU.
# mamba_launch_search_run / _fold: C1's launch-configuration search (experiments/mamba/launch_search.py), a run
#   folder per device run folded into results/mamba/launch_search/launch_search.json.
# Extra driver arguments: config gpu_args.<rule> (e.g. "--max-s 300"); the run's name: config gpu_run.
MAMBA_GPU_ARGS = config.get("gpu_args", {})
MAMBA_GPU_RUN = config.get("gpu_run", "run")
MAMBA_SSM_SDIST = config.get("mamba_ssm", {}).get("sdist", "cache/mamba_ssm-2.3.2.post1.tar.gz")


rule mamba_ssm_build:
    conda:
        CONDA_ENV
    input:
        sdist=MAMBA_SSM_SDIST,
    output:
        record="cache/mamba_ssm/build.json",
    resources:
        gpu=1,
    log:
        "logs/mamba/mamba_ssm_build.log",
    shell:
        "python3 -m lethe.perf.mamba_ssm build --sdist {input.sdist} --out $(dirname {output.record}) > {log} 2>&1"


rule mamba_bench:
    conda:
        CONDA_ENV
    input:
        driver="experiments/mamba/bench.py",
        official="cache/mamba_ssm/build.json",
    output:
        json=f".build/runs/mamba_bench/{MAMBA_GPU_RUN}/bench.json",
    params:
        extra=MAMBA_GPU_ARGS.get("mamba_bench", ""),
    resources:
        gpu=1,
    log:
        "logs/mamba/bench.log",
    shell:
        "PYTHONPATH=$(python3 -c 'import sys; from lethe.perf.mamba_ssm import env_paths; "
        "print(\":\".join(env_paths(\"cache/mamba_ssm\")))'):${{PYTHONPATH:-}} "
        "python3 {input.driver} --out $(dirname {output.json}) {params.extra} > {log} 2>&1"


rule mamba_bench_fold:
    conda:
        CONDA_ENV
    input:
        run=f".build/runs/mamba_bench/{MAMBA_GPU_RUN}",
    output:
        result="results/mamba/bench/bench.json",
        provenance="results/mamba/bench/provenance.json",
        history="results/mamba/bench/history.jsonl",
    params:
        experiment="mamba.bench",
        run=MAMBA_GPU_RUN,
    log:
        "logs/mamba/bench_fold.log",
    script:
        "../scripts/results_fold.py"


rule mamba_positive_control_gpu:
    conda:
        CONDA_ENV
    input:
        driver="experiments/mamba/positive_control.py",
    output:
        json="results/mamba/positive_control/cuda.json",
    resources:
        gpu=1,
    log:
        "logs/mamba/positive_control_gpu.log",
    shell:
        "python3 {input.driver} --device cuda --json {output.json} > {log} 2>&1"


rule mamba_launch_search_run:
    conda:
        CONDA_ENV
    input:
        driver="experiments/mamba/launch_search.py",
    output:
        directory(f".build/runs/mamba_launch_search/{{run}}"),
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
