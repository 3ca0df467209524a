# Compute rule of the calibration stage: the threshold sweep over every thresholded gate on trusted operators.
# CPU only (float64 references, emulated fp16 defects), about ten seconds.


rule calibration_sweep:
    conda:
        CONDA_ENV
    input:
        tolerance="src/lethe/verifier/tolerance.py",
        sweep_code="src/lethe/calibration/sweep.py",
    output:
        sweep="results/calibration/sweep.json",
        provenance="results/calibration/provenance.json",
    params:
        seed=config["seed"],
    log:
        "logs/calibration/sweep.log",
    script:
        "../scripts/calibration_sweep.py"
