# Compute rule of the verifier stage: every calibration fixture (lethe.verifier.fixtures: conforming
# references and one violator per gate property) through the real sandboxed verifier, graded under every
# profile from one reference run and one candidate run. CPU (or the configured device); about 15-40 s per
# kernel on a loaded 2-core machine, most of it sandbox start-up.


rule verifier_calibration:
    conda:
        CONDA_ENV
    input:
        fixtures="src/lethe/verifier/fixtures.py",
        gates="src/lethe/verifier/gates.py",
        tolerance="src/lethe/verifier/tolerance.py",
    output:
        rows="results/verifier/calibration.parquet",
        provenance="results/verifier/provenance.json",
    params:
        seed=config["seed"],
        device=config["device"],
        profiles=config["profiles"],
    log:
        "logs/verifier/calibration.log",
    script:
        "../scripts/verifier_calibration.py"
