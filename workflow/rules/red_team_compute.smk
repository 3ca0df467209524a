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
