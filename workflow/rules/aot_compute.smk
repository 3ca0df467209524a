# Compute rule of the aot stage: reproduce mamba#904 by compiling mamba3_siso_bwd_kernel_dqkv (mamba-ssm
# 2.3.2.post1 sdist, sha256-pinned, fetched into cache/) for sm_100a and sm_90a under several Triton releases.
# CPU only (no GPU needed, none used); side venvs for the other releases are created under cache/venvs/.
# About 30 minutes on one core.


rule aot_mamba904:
    conda:
        CONDA_ENV
    output:
        result="results/aot/mamba904.json",
        provenance="results/aot/provenance.json",
    params:
        versions=["3.6.0", "3.7.1", "3.8.0"],
        targets=["sm_100a", "sm_90a"],
        context_targets_for=["3.6.0"],
    log:
        "logs/aot/mamba904.log",
    script:
        "../scripts/aot_mamba904.py"


# CuTe DSL compile check on the CPU: a small tcgen05 / TMEM kernel compiled for sm_100a with fake tensors
# (nvidia-cutlass-dsl 4.8.1 in a side venv under cache/venvs/). About a minute.
rule aot_cute_probe:
    conda:
        CONDA_ENV
    output:
        result="results/aot/cute_probe/cute_probe.json",
        provenance="results/aot/cute_probe/provenance.json",
    log:
        "logs/aot/cute_probe.log",
    script:
        "../scripts/aot_cute_probe.py"
