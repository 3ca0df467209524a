# Compute rules of the mamba stage (only with --config compute=mamba|all). mamba_bench: the H200 benchmark of
# C1-C6 against mamba-ssm and the torch paths, correctness first (experiments/mamba/bench.py); mamba-ssm's built
# selective_scan_cuda and the package must be on PYTHONPATH (experiments/mamba/build_official.py), else the rows
# say it was not importable. The run folder is folded into results/mamba/bench/ by lethe.results (docs/mamba.md).
# mamba_positive_control_gpu: C1-C7 through the battery under every profile, sandboxed, on the GPU.


rule mamba_bench:
    conda:
        CONDA_ENV
    input:
        driver="experiments/mamba/bench.py",
    output:
        json=f".build/runs/mamba_bench/{config.get('gpu_run', 'run')}/bench.json",
    params:
        extra=config.get("gpu_args", {}).get("mamba_bench", ""),
    resources:
        gpu=1,
    log:
        "logs/mamba/bench.log",
    shell:
        "python {input.driver} --out $(dirname {output.json}) {params.extra} > {log} 2>&1"


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
        "python {input.driver} --device cuda --json {output.json} > {log} 2>&1"
