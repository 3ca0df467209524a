# Compute rules of the red_team stage (only with --config compute=red_team|all): run the verifier battery and
# KernelBench's loose check over every kernel of data/red_team/ and data/positive_control/.
# CPU: Triton candidates run under the interpreter (seconds to a minute per kernel on 2 cores).


rule red_team:
    conda:
        CONDA_ENV
    input:
        _suite_files("red_team"),
    output:
        rows="results/red_team/rows.parquet",
        loose="results/red_team/loose.parquet",
        summary="results/red_team/summary.json",
        provenance="results/red_team/provenance.json",
    params:
        suite="red_team",
        profile=config["profile"],
        device=config["device"],
        seed=config["seed"],
    log:
        "logs/red_team/red_team.log",
    script:
        "../scripts/red_team_compute.py"


rule positive_control:
    conda:
        CONDA_ENV
    input:
        _suite_files("positive_control"),
    output:
        rows="results/positive_control/rows.parquet",
        loose="results/positive_control/loose.parquet",
        summary="results/positive_control/summary.json",
        provenance="results/positive_control/provenance.json",
    params:
        suite="positive_control",
        profile=config["profile"],
        device=config["device"],
        seed=config["seed"],
    log:
        "logs/red_team/positive_control.log",
    script:
        "../scripts/red_team_compute.py"


# The same suites on the GPU (results/<suite>/h200/, experiments/h200/suites.py): CUDA candidates compiled and run
# on the device, one rule per suite. Only with device=cuda (the gpu profile), so a CPU compute run of this stage
# never re-runs the committed H200 results.
if config["device"] == "cuda":

    rule suite_h200:
        conda:
            CONDA_ENV
        input:
            script="experiments/h200/suites.py",
            kernels=lambda w: _suite_files(w.suite),
        output:
            rows="results/{suite}/h200/rows.parquet",
            loose="results/{suite}/h200/loose.parquet",
            summary="results/{suite}/h200/summary.json",
            provenance="results/{suite}/h200/provenance.json",
        wildcard_constraints:
            suite="red_team|positive_control",
        params:
            seed=config["seed"],
        log:
            "logs/{suite}/h200.log",
        resources:
            gpu=1,
        shell:
            # suites.py writes <out>/<suite>/; the run goes to .build/ and is copied over the committed folder
            "python3 {input.script} --out .build/runs/suites --suites {wildcards.suite} --seed {params.seed} "
            "> {log} 2>&1 && mkdir -p results/{wildcards.suite}/h200 && cp -r .build/runs/suites/{wildcards.suite}/. "
            "results/{wildcards.suite}/h200/"
