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
