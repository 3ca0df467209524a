# Compute rules of the gdn stage: the verification ladder and the family training. They need a CUDA GPU
# (H200 for the committed results; the device tool ran experiments/gdn/run_h200.sh). Each script also has a
# --cpu-smoke mode that CI exercises through tests/kernels/gdn/test_gdn_experiments.py.


rule gdn_ladder:
    conda:
        CONDA_ENV
    input:
        script="experiments/gdn/ladder.py",
    output:
        result="results/gdn/ladder.json",
        provenance="results/gdn/ladder.provenance.json",
    params:
        out="results/gdn",
    log:
        "logs/gdn/ladder.log",
    resources:
        gpu=1,
    shell:
        "python3 {input.script} --out {params.out} > {log} 2>&1"


rule gdn_ladder_fla:
    conda:
        CONDA_ENV
    input:
        script="experiments/gdn/ladder.py",
    output:
        result="results/gdn/ladder_fla.json",
    params:
        out="results/gdn",
    log:
        "logs/gdn/ladder_fla.log",
    resources:
        gpu=1,
    shell:
        "FLA_DISABLE_BACKEND_DISPATCH=1 python3 {input.script} --fla only --out {params.out} > {log} 2>&1"


rule gdn_train_family:
    conda:
        CONDA_ENV
    input:
        script="experiments/gdn/train_family.py",
    output:
        result="results/gdn/train_family.json",
        provenance="results/gdn/train_family.provenance.json",
    params:
        out="results/gdn",
    log:
        "logs/gdn/train_family.log",
    resources:
        gpu=1,
    shell:
        "python3 {input.script} --out {params.out} > {log} 2>&1"
