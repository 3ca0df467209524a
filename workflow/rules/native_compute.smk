# Compute rules of the native stage (only with --config compute=native|all). The H200 benchmark itself runs on
# the lent GPU (experiments/native/bench.py, see docs/native.md); its output is committed, not recomputed here.


rule native_aot:
    conda:
        CONDA_ENV
    output:
        result="results/native/aot.json",
        provenance="results/native/aot_provenance.json",
    log:
        "logs/native/aot.log",
    script:
        "../scripts/native_aot.py"


# GPU experiments of the stage (H200), one rule per driver; extra arguments from config gpu_args.<experiment>,
# the run folded into a current result named by config gpu_run; fla through with_fla.sh (its one install place).
NATIVE_GPU_ARGS = config.get("gpu_args", {})
NATIVE_GPU_RUN = config.get("gpu_run", "run")


rule native_bench:
    conda:
        CONDA_ENV
    input:
        script="experiments/native/bench.py",
    output:
        result="results/native/bench.json",
    params:
        out=lambda w, output: os.path.dirname(output.result),
        args=NATIVE_GPU_ARGS.get("native_bench", "--stages k2_correctness,k2_timing,backward_timing"),
    log:
        "logs/native/bench.log",
    resources:
        gpu=1,
    shell:
        # --merge keeps the keys of stages this run does not repeat
        "python3 {input.script} --out {params.out} --merge {output.result} {params.args} > {log} 2>&1"


rule native_profile_run:
    conda:
        CONDA_ENV
    input:
        script="experiments/native/kernel_profile.py",
    output:
        directory(".build/runs/native_profile/{run}"),
    params:
        args=NATIVE_GPU_ARGS.get("native_profile", ""),
    log:
        "logs/native/profile_{run}.log",
    resources:
        gpu=1,
    shell:
        "bash workflow/scripts/with_fla.sh python3 {input.script} --out {output} {params.args} > {log} 2>&1"


rule native_profile_fold:
    conda:
        CONDA_ENV
    input:
        run=f".build/runs/native_profile/{NATIVE_GPU_RUN}",
    output:
        result="results/native/profile/profile.json",
        provenance="results/native/profile/provenance.json",
        history="results/native/profile/history.jsonl",
    params:
        experiment="native-profile",
        run=NATIVE_GPU_RUN,
    log:
        "logs/native/profile_fold.log",
    script:
        "../scripts/results_fold.py"


rule native_gpu_tests:
    conda:
        CONDA_ENV
    input:
        tests="tests/kernels/gdn_native/test_native_gpu.py",
    output:
        log="results/native/gpu_tests.log",
    log:
        "logs/native/gpu_tests.log",
    resources:
        gpu=1,
    shell:
        "python3 -m pytest -q -rA -m gpu -p no:cacheprovider {input.tests} > {output.log} 2> {log}"


rule gpu_smoke:
    conda:
        CONDA_ENV
    input:
        script="experiments/smoke/gpu_smoke.py",
    output:
        ".build/runs/smoke/smoke.json",
    params:
        out=lambda w, output: os.path.dirname(output[0]),
    log:
        "logs/native/gpu_smoke.log",
    resources:
        gpu=1,
    shell:
        "python3 {input.script} --out {params.out} > {log} 2>&1"


# CPU studies of the native stage: where K1's and K2's bf16 error comes from (float64 replays, no GPU).
rule native_error_sources:
    conda:
        CONDA_ENV
    input:
        script="experiments/native/{kernel}_error_sources.py",
    output:
        result="results/native/{kernel}_error_sources.json",
    wildcard_constraints:
        kernel="k1|k2",
    log:
        "logs/native/{kernel}_error_sources.log",
    shell:
        "python3 {input.script} --out {output.result} > {log} 2>&1"
