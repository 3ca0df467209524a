# fla #640 on the H200: the direct check of fla's guarded gated backward and the verifier on the generated pairs.
# The render rule reads the current result named in config results.fla640 (results/foreign/fla640/fla640.json:
# the device calls of experiments/fla640/run.py, collected by `python -m lethe.foreign.fla640_results`; see
# docs/fla640.md), never a folder found on disk. The compute rule (fla640_compute.smk) makes one device run; which
# runs are results is decided when collecting them.
import json as _fla640_json
import os as _fla640_os

FLA640_RESULT = config.get("results", {}).get("fla640", "results/foreign/fla640/fla640.json")
_FLA640_DIR = _fla640_os.path.dirname(FLA640_RESULT)
# the current result first (the script reads it), then every file of a results call it lists, so a re-collected
# call re-renders
FLA640_INPUTS = []
if _fla640_os.path.exists(_fla640_os.path.join(workflow.basedir, FLA640_RESULT)):
    with open(_fla640_os.path.join(workflow.basedir, FLA640_RESULT)) as _fh:
        _fla640_calls = _fla640_json.load(_fh)["calls"]
    FLA640_INPUTS = [FLA640_RESULT] + [
        f"{_FLA640_DIR}/{rel}" for c in _fla640_calls if c["role"] == "results" for rel in sorted(c["files"])]
    RENDER_TARGETS.extend(["paper/tables/fla640.md", "paper/tables/fla640.tex"])


rule fla640_render:
    conda:
        CONDA_ENV
    input:
        FLA640_INPUTS,
    output:
        md="paper/tables/fla640.md",
        tex="paper/tables/fla640.tex",
    log:
        "logs/fla640/render.log",
    script:
        "../scripts/fla640_render.py"
