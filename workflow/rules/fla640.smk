# fla #640 on the H200: the direct check of fla's guarded gated backward and the verifier on the generated pairs.
# The render rule only reads the committed results/foreign/fla640/ (device calls of experiments/fla640/run.py,
# collected by `python -m lethe.foreign.fla640_results`; see docs/fla640.md). There is no compute rule: the run
# needs fla-core 0.6.0 on a Hopper GPU with Triton < 3.7.1 and is made by hand in short device calls.
import json as _fla640_json
import os as _fla640_os

FLA640_DIR = "results/foreign/fla640"
_FLA640_PROV = _fla640_os.path.join(workflow.basedir, FLA640_DIR, "provenance.json")
# provenance.json first (the script finds the results folder from it), then every file of a results call it
# lists, so a re-collected call re-renders
FLA640_INPUTS = []
if _fla640_os.path.exists(_FLA640_PROV):
    with open(_FLA640_PROV) as _fh:
        _fla640_calls = _fla640_json.load(_fh)["calls"]
    FLA640_INPUTS = [f"{FLA640_DIR}/provenance.json"] + [
        f"{FLA640_DIR}/{rel}" for c in _fla640_calls if c["role"] == "results" for rel in sorted(c["files"])]
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
