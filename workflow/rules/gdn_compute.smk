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
        out=lambda w, output: os.path.dirname(output.result),
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
        out=lambda w, output: os.path.dirname(output.result),
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
        out=lambda w, output: os.path.dirname(output.result),
    log:
        "logs/gdn/train_family.log",
    resources:
        gpu=1,
    shell:
        "python3 {input.script} --out {params.out} --repeat > {log} 2>&1"


# Seed study of the GDN curve check (docs/gdn.md §5): the current forward against the A/W/U/state products at
# 3xTF32, and against float32 recurrence inputs (the control).
rule gdn_train_seeds:
    conda:
        CONDA_ENV
    input:
        script="experiments/gdn/train_seeds.py",
    output:
        result="results/gdn/train_seeds.json",
        provenance="results/gdn/train_seeds.provenance.json",
    params:
        out=lambda w, output: os.path.dirname(output.result),
        variant="fwd3x=wy_a_kernel:PREC=tf32x3,wy_apply_kernel:PREC=tf32x3,state_fwd_kernel:PREC=tf32x3",
    log:
        "logs/gdn/train_seeds.log",
    resources:
        gpu=1,
    shell:
        "python3 {input.script} --out {params.out} --variant {params.variant} > {log} 2>&1"


rule gdn_train_seeds_fp32control:
    conda:
        CONDA_ENV
    input:
        script="experiments/gdn/train_seeds.py",
    output:
        result="results/gdn/train_seeds_fp32control.json",
        provenance="results/gdn/train_seeds_fp32control.provenance.json",
    params:
        out=lambda w, output: os.path.dirname(output.result),
    log:
        "logs/gdn/train_seeds_fp32control.log",
    resources:
        gpu=1,
    shell:
        "python3 {input.script} --out {params.out} --fp32-control --name train_seeds_fp32control.json > {log} 2>&1"
