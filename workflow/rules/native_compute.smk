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
