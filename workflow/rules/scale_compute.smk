# Compute rules of the scale stage (only with --config compute=scale|all; docs/scale.md).
# scale_ptbxl_fetch: the paper's dataset through its pin (lethe.scale.data.PTBXL). No SHA-256 is recorded, so it
#   fails at once with the message that says how to supply the file by hand and record its hash.
# scale_train: one device call of the scale run (experiments/scale/train.py): the named config through our
#   kernels on the standard library's sources, the reference-path check first (once per run folder), a time
#   budget under the call's limit; a later call on the same run folder resumes from its checkpoint. Driver
#   arguments: config gpu_args.scale_train (e.g. "--config 1b --steps 2000 --time-budget-s 480"); the run's
#   name: config gpu_run. The rule's output is the run's run.json, not its folder, so that Snakemake never
#   deletes the checkpoint: the next call is --forcerun scale_train (the driver resumes; --no-resume in
#   gpu_args starts over). The checkpoint (~13 GB for the 1b config with AdamW's moments) lives in
#   cache/scale_train/<run>/, outside the folders a device call packs; it survives between calls only while the
#   machine is held (a fresh machine starts the run over).
SCALE_GPU_ARGS = config.get("gpu_args", {})
SCALE_GPU_RUN = config.get("gpu_run", "run")
SCALE_CACHE = config.get("corpora", {}).get("cache_dir", "cache/corpora")


rule scale_ptbxl_fetch:
    conda:
        CONDA_ENV
    output:
        f"{SCALE_CACHE}/physionet__ptb-xl/1.0.3/ptbxl_database.csv",
    log:
        "logs/scale/ptbxl_fetch.log",
    shell:
        # the cache folder is three levels above the file (<cache>/<dataset>/<revision>/<file>)
        "python3 -m lethe.scale.data fetch-ptbxl --cache $(dirname $(dirname $(dirname {output}))) > {log} 2>&1"


rule scale_train:
    conda:
        CONDA_ENV
    input:
        driver="experiments/scale/train.py",
    output:
        run=f".build/runs/scale_train/{SCALE_GPU_RUN}/run.json",
    params:
        ckpt=f"cache/scale_train/{SCALE_GPU_RUN}",
        extra=SCALE_GPU_ARGS.get("scale_train", "--config 1b --check-steps 3 --time-budget-s 480"),
    resources:
        gpu=1,
    log:
        "logs/scale/train.log",
    shell:
        "python3 {input.driver} --out $(dirname {output.run}) --ckpt-dir {params.ckpt} {params.extra} > {log} 2>&1"
