# Compute rule of the fla640 stage: one device run of experiments/fla640/run.py (fla-core 0.6.0 on a Hopper GPU
# with Triton < 3.7.1, through with_fla.sh) into .build/runs/fla640/<gpu_run>/. Which runs are results is a
# judgement made when collecting them: `python -m lethe.foreign.fla640_results` (docs/fla640.md) folds a run into
# results/foreign/fla640/ (its files in runs/<what it ran>/; the current result fla640.json, config results.fla640,
# is what the render rule reads). Extra arguments: config gpu_args.fla640.


rule fla640_run:
    conda:
        CONDA_ENV
    input:
        script="experiments/fla640/run.py",
    output:
        directory(".build/runs/fla640/{run}"),
    params:
        args=config.get("gpu_args", {}).get("fla640", ""),
    log:
        "logs/fla640/run_{run}.log",
    resources:
        gpu=1,
    shell:
        "bash workflow/scripts/with_fla.sh python3 {input.script} --out {output} {params.args} > {log} 2>&1"
