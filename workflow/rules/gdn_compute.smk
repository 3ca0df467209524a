# Compute rules of the gdn stage: the verification ladder and the family training. They need a CUDA GPU
# (H200 for the committed results; experiments/h200/device_call.sh runs them in one device call). Each script also has a
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
        "bash workflow/scripts/with_fla.sh python3 {input.script} --fla only --out {params.out} > {log} 2>&1"


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


# The other GPU experiments of the stage, one rule per experiment driver. Extra arguments of a driver come from
# config gpu_args.<experiment> (e.g. --config gpu_args='{"gdn_scalar_gate": "--cells 128:4096"}'); a run that is
# folded into a current result is named by config gpu_run. Rules that need fla run under with_fla.sh, the one
# place fla's wheel is installed.
GPU_ARGS = config.get("gpu_args", {})
GPU_RUN = config.get("gpu_run", "run")


rule gdn_ladder_backend:
    conda:
        CONDA_ENV
    input:
        script="experiments/gdn/ladder.py",
    output:
        result="results/gdn/ladder_{backend}.json",
        provenance="results/gdn/ladder_{backend}.provenance.json",
    wildcard_constraints:
        backend="native|hybrid_tc|hybrid",
    params:
        out=lambda w, output: os.path.dirname(output.result),
        backend=lambda w: w.backend.replace("_", "-"),
        args=lambda w: GPU_ARGS.get(f"gdn_ladder_{w.backend}", ""),
    log:
        "logs/gdn/ladder_{backend}.log",
    resources:
        gpu=1,
    shell:
        "python3 {input.script} --backend {params.backend} --name ladder_{wildcards.backend}.json --out {params.out} "
        "{params.args} > {log} 2>&1"


rule gdn_fla_compare:
    conda:
        CONDA_ENV
    input:
        script="experiments/gdn/fla_compare.py",
    output:
        summary="results/gdn/fla_compare/summary.json",
        rows="results/gdn/fla_compare/rows.jsonl",
        provenance="results/gdn/fla_compare/provenance.json",
    params:
        out=lambda w, output: os.path.dirname(output.summary),
        args=GPU_ARGS.get("gdn_fla_compare", ""),
    log:
        "logs/gdn/fla_compare.log",
    resources:
        gpu=1,
    shell:
        "bash workflow/scripts/with_fla.sh python3 {input.script} --parts correct --out {params.out} {params.args} > {log} 2>&1"


rule gdn_fla_bench:
    conda:
        CONDA_ENV
    input:
        script="experiments/gdn/fla_compare.py",
    output:
        summary="results/gdn/fla_bench/summary.json",
        rows="results/gdn/fla_bench/rows.jsonl",
        provenance="results/gdn/fla_bench/provenance.json",
    params:
        out=lambda w, output: os.path.dirname(output.summary),
        args=GPU_ARGS.get("gdn_fla_bench", ""),
    log:
        "logs/gdn/fla_bench.log",
    resources:
        gpu=1,
    shell:
        "bash workflow/scripts/with_fla.sh python3 {input.script} --parts bench --out {params.out} {params.args} > {log} 2>&1"


# The GDN-speed issue's grid at the shapes models run (16 and 32 heads; B*H*T of 2^18 and 2^20; T of 2k-32k;
# d_v 64 and 128; bf16): fla 0.6.0 fully autotuned against ours in the same call, correctness first, every cell
# checked against a float64 slice. One process for the whole grid (fla tunes once per member, d_v and H; the
# budget stops it cleanly). The same command with --resume added, run directly (Snakemake clears a rule's outputs
# before running it), times what a first call left into the same folder. Table: rule gdn_model_shapes_table.
rule gdn_model_shapes:
    conda:
        CONDA_ENV
    input:
        script="experiments/gdn/fla_compare.py",
    output:
        summary="results/gdn/model_shapes/summary.json",
        rows="results/gdn/model_shapes/rows.jsonl",
        provenance="results/gdn/model_shapes/provenance.json",
    params:
        out=lambda w, output: os.path.dirname(output.summary),
        args=GPU_ARGS.get("gdn_model_shapes", ""),
    log:
        "logs/gdn/model_shapes.log",
    resources:
        gpu=1,
    shell:
        "bash workflow/scripts/with_fla.sh python3 {input.script} --parts bench --impls ours,fla --no-torch-bench "
        "--bench-members gdn,sgdn --heads 16,32 --head-tokens 1048576,262144 --bench-lengths 2048,4096,8192,32768 "
        "--dvs 128,64 --slice-check-max-t 32768 --est-fla-tune-s 40 --est-fla-retune-s 10 --est-bench-cell-s 6 "
        "--est-ours-compile-s 5 --est-precompile-s 20 --out {params.out} {params.args} > {log} 2>&1"


rule gdn_intra_precision:
    conda:
        CONDA_ENV
    input:
        script="experiments/gdn/intra_precision.py",
    output:
        summary="results/gdn/intra_precision/summary.json",
        rows="results/gdn/intra_precision/rows.jsonl",
        provenance="results/gdn/intra_precision/provenance.json",
    params:
        out=lambda w, output: os.path.dirname(output.summary),
        args=GPU_ARGS.get("gdn_intra_precision", ""),
    log:
        "logs/gdn/intra_precision.log",
    resources:
        gpu=1,
    shell:
        "python3 {input.script} --out {params.out} {params.args} > {log} 2>&1"


rule gdn_launch_sweep:
    conda:
        CONDA_ENV
    input:
        script="experiments/gdn/triton_launch_sweep.py",
    output:
        sweep="results/gdn/launch_sweep/{sweep}/sweep.json",
        provenance="results/gdn/launch_sweep/{sweep}/provenance.json",
    params:
        out=lambda w, output: os.path.dirname(output.sweep),
        args=lambda w: GPU_ARGS.get(f"gdn_launch_sweep_{w.sweep}", GPU_ARGS.get("gdn_launch_sweep", "")),
    log:
        "logs/gdn/launch_sweep_{sweep}.log",
    resources:
        gpu=1,
    shell:
        "python3 {input.script} --out {params.out} {params.args} > {log} 2>&1"


rule gdn_scalar_gate_run:
    conda:
        CONDA_ENV
    input:
        script="experiments/gdn/scalar_gate_bench.py",
    output:
        directory(".build/runs/gdn_scalar_gate/{run}"),
    params:
        args=GPU_ARGS.get("gdn_scalar_gate", ""),
    log:
        "logs/gdn/scalar_gate_{run}.log",
    resources:
        gpu=1,
    shell:
        "bash workflow/scripts/with_fla.sh python3 {input.script} --out {output} {params.args} > {log} 2>&1"


rule gdn_scalar_gate_fold:
    conda:
        CONDA_ENV
    input:
        run=f".build/runs/gdn_scalar_gate/{GPU_RUN}",
    output:
        result="results/gdn/scalar_gate/scalar_gate_bench.json",
        provenance="results/gdn/scalar_gate/provenance.json",
        history="results/gdn/scalar_gate/history.jsonl",
    params:
        experiment="gdn-scalar-gate",
        run=GPU_RUN,
    log:
        "logs/gdn/scalar_gate_fold.log",
    script:
        "../scripts/results_fold.py"


rule gdn_gpu_tests:
    conda:
        CONDA_ENV
    input:
        tests=["tests/kernels/gdn/test_gdn_triton_gpu.py", "tests/kernels/gdn/test_scalar_gate_gpu.py"],
    output:
        log="results/gdn/gpu_tests.log",
    log:
        "logs/gdn/gpu_tests.log",
    resources:
        gpu=1,
    shell:
        "python3 -m pytest -q -rA -m gpu -p no:cacheprovider {input.tests} > {output.log} 2> {log}"


# CPU studies of the gdn stage (float64 replays, ahead-of-time compilation): no GPU, seconds to minutes each.
rule gdn_broadcast_sum_replay:
    conda:
        CONDA_ENV
    input:
        script="experiments/gdn/broadcast_sum_replay.py",
    output:
        result="results/gdn/broadcast_sum_replay.json",
        provenance="results/gdn/broadcast_sum_replay.provenance.json",
    log:
        "logs/gdn/broadcast_sum_replay.log",
    shell:
        "python3 {input.script} --out {output.result} > {log} 2>&1"


rule gdn_fwd_error_sources:
    conda:
        CONDA_ENV
    input:
        script="experiments/gdn/fwd_error_sources.py",
    output:
        result="results/gdn/fwd_error_sources.json",
        provenance="results/gdn/fwd_error_sources.provenance.json",
    log:
        "logs/gdn/fwd_error_sources.log",
    shell:
        "python3 {input.script} --out {output.result} > {log} 2>&1"


# The three committed sm_90a reports: the wrappers' default launches, the row-by-row WY inverse, the scalar gate.
GDN_TRITON_AOT_ARGS = {"": "", "_rows": "--wy-inverse rows",
                       "_scalar": "--variants scalar --dvs 64,128 --dtypes bfloat16,float32"}


rule gdn_triton_aot:
    conda:
        CONDA_ENV
    input:
        script="experiments/gdn/triton_aot.py",
    output:
        result="results/gdn/triton_aot{variant}.json",
        provenance="results/gdn/triton_aot{variant}.provenance.json",
    wildcard_constraints:
        variant="|_rows|_scalar",
    params:
        args=lambda w: GDN_TRITON_AOT_ARGS[w.variant],
    log:
        "logs/gdn/triton_aot{variant}.log",
    shell:
        "python3 {input.script} {params.args} --json {output.result} > {log} 2>&1"
