# Render rules of the gdn stage: the verification ladder, the family-training table, the fla 0.6.0
# comparison (correctness) and the fla timing benchmark from the committed H200 results under results/gdn/.
# Registered only once those JSON files exist, so the DAG stays valid before the first GPU run (the ladder and
# training compute rules are in gdn_compute.smk; results/gdn/fla_compare/ and results/gdn/fla_bench/ come from
# experiments/gdn/fla_compare.py through the compute rules gdn_fla_compare and gdn_fla_bench).
import os as _gdn_os

_GDN_LADDER = _gdn_os.path.exists(_gdn_os.path.join(workflow.basedir, "results", "gdn", "ladder.json"))
_GDN_LADDER_NATIVE = _gdn_os.path.exists(
    _gdn_os.path.join(workflow.basedir, "results", "gdn", "ladder_native.json")
)
_GDN_LADDER_HYBRID_TC = _gdn_os.path.exists(
    _gdn_os.path.join(workflow.basedir, "results", "gdn", "ladder_hybrid_tc.json")
)
_GDN_TRAIN = _gdn_os.path.exists(_gdn_os.path.join(workflow.basedir, "results", "gdn", "train_family.json"))
# the seed studies the compute rules gdn_train_seeds and gdn_train_seeds_fp32control write, named (a listing of
# results/gdn/ would pick up any stray run file)
_GDN_TRAIN_SEEDS = [
    f
    for f in ("results/gdn/train_seeds.json", "results/gdn/train_seeds_fp32control.json")
    if _gdn_os.path.exists(_gdn_os.path.join(workflow.basedir, f))
]
_GDN_INTRA = _gdn_os.path.exists(
    _gdn_os.path.join(workflow.basedir, "results", "gdn", "intra_precision", "summary.json")
)
# the scalar-gate path's current result (experiments/gdn/scalar_gate_bench.py) and the kernel profile whose newest
# run measured the ceilings its floors use, both named in config
_GDN_SG = config.get("results", {}).get("gdn_scalar_gate", "results/gdn/scalar_gate/scalar_gate_bench.json")
_GDN_CEILINGS = config.get("results", {}).get("native_profile", "results/native/profile/profile.json")
_GDN_SG_ON = _gdn_os.path.exists(_gdn_os.path.join(workflow.basedir, _GDN_SG))
_GDN_FLA = _gdn_os.path.exists(_gdn_os.path.join(workflow.basedir, "results", "gdn", "ladder_fla.json"))
_GDN_FLACMP = _gdn_os.path.exists(
    _gdn_os.path.join(workflow.basedir, "results", "gdn", "fla_compare", "summary.json")
)
_GDN_FLABENCH = _gdn_os.path.exists(
    _gdn_os.path.join(workflow.basedir, "results", "gdn", "fla_bench", "summary.json")
)
# the model-shape grid's current result (rule gdn_model_shapes), named in config; its table is a target only once
# that result is committed, so a fresh clone's default target does not ask for a GPU run
_GDN_MODEL = config.get("results", {}).get("gdn_model_shapes", "results/gdn/model_shapes/summary.json")
_GDN_MODEL_DIR = _gdn_os.path.dirname(_GDN_MODEL)
_GDN_MODEL_ON = _gdn_os.path.exists(_gdn_os.path.join(workflow.basedir, _GDN_MODEL))

RENDER_TARGETS.extend(
    ([f"paper/tables/gdn_ladder.{ext}" for ext in ("md", "tex")] if _GDN_LADDER else [])
    + ([f"paper/tables/gdn_ladder_native.{ext}" for ext in ("md", "tex")] if _GDN_LADDER_NATIVE else [])
    + ([f"paper/tables/gdn_ladder_hybrid_tc.{ext}" for ext in ("md", "tex")] if _GDN_LADDER_HYBRID_TC else [])
    + ([f"paper/tables/gdn_training.{ext}" for ext in ("md", "tex")] if _GDN_TRAIN else [])
    + ([f"paper/tables/gdn_training_seeds.{ext}" for ext in ("md", "tex")] if _GDN_TRAIN_SEEDS else [])
    + ([f"paper/tables/gdn_intra_precision.{ext}" for ext in ("md", "tex")] if _GDN_INTRA else [])
    + ([f"paper/tables/gdn_fla_compare.{ext}" for ext in ("md", "tex")] if _GDN_FLACMP else [])
    + (
        [f"paper/tables/gdn_scalar_gate_{t}.{ext}" for t in ("time", "check") for ext in ("md", "tex")]
        + [f"figures/gdn_scalar_gate.{ext}" for ext in ("png", "pdf")]
        if _GDN_SG_ON
        else []
    )
    + (
        [f"paper/tables/gdn_fla_bench.{ext}" for ext in ("md", "tex")]
        + [f"figures/gdn_fla_bench.{ext}" for ext in ("png", "pdf")]
        if _GDN_FLABENCH
        else []
    )
    + ([f"paper/tables/gdn_model_shapes.{ext}" for ext in ("md", "tex", "json")] if _GDN_MODEL_ON else [])
)


rule gdn_ladder_table:
    conda:
        CONDA_ENV
    input:
        ladder="results/gdn/ladder.json",
        fla=["results/gdn/ladder_fla.json"] if _GDN_FLA else [],
    output:
        md="paper/tables/gdn_ladder.md",
        tex="paper/tables/gdn_ladder.tex",
    params:
        table="ladder",
    log:
        "logs/gdn/ladder_table.log",
    script:
        "../scripts/gdn_render.py"


rule gdn_ladder_native_table:
    conda:
        CONDA_ENV
    input:
        ladder="results/gdn/ladder_native.json",
        fla=[],
    output:
        md="paper/tables/gdn_ladder_native.md",
        tex="paper/tables/gdn_ladder_native.tex",
    params:
        table="ladder",
    log:
        "logs/gdn/ladder_native_table.log",
    script:
        "../scripts/gdn_render.py"


rule gdn_ladder_hybrid_tc_table:
    conda:
        CONDA_ENV
    input:
        ladder="results/gdn/ladder_hybrid_tc.json",
        fla=[],
    output:
        md="paper/tables/gdn_ladder_hybrid_tc.md",
        tex="paper/tables/gdn_ladder_hybrid_tc.tex",
    params:
        table="ladder",
    log:
        "logs/gdn/ladder_hybrid_tc_table.log",
    script:
        "../scripts/gdn_render.py"


rule gdn_training_table:
    conda:
        CONDA_ENV
    input:
        train="results/gdn/train_family.json",
    output:
        md="paper/tables/gdn_training.md",
        tex="paper/tables/gdn_training.tex",
    params:
        table="training",
    log:
        "logs/gdn/training_table.log",
    script:
        "../scripts/gdn_render.py"


rule gdn_training_seeds_table:
    conda:
        CONDA_ENV
    input:
        studies=_GDN_TRAIN_SEEDS,
    output:
        md="paper/tables/gdn_training_seeds.md",
        tex="paper/tables/gdn_training_seeds.tex",
    params:
        table="training_seeds",
    log:
        "logs/gdn/training_seeds_table.log",
    script:
        "../scripts/gdn_render.py"


rule gdn_intra_precision_table:
    conda:
        CONDA_ENV
    input:
        summary="results/gdn/intra_precision/summary.json",
        rows="results/gdn/intra_precision/rows.jsonl",
        provenance="results/gdn/intra_precision/provenance.json",
    output:
        md="paper/tables/gdn_intra_precision.md",
        tex="paper/tables/gdn_intra_precision.tex",
    params:
        table="intra_precision",
    log:
        "logs/gdn/intra_precision_table.log",
    script:
        "../scripts/gdn_render.py"


rule gdn_scalar_gate_tables:
    conda:
        CONDA_ENV
    input:
        bench=_GDN_SG,
        ceilings=_GDN_CEILINGS,
    output:
        time_md="paper/tables/gdn_scalar_gate_time.md",
        time_tex="paper/tables/gdn_scalar_gate_time.tex",
        check_md="paper/tables/gdn_scalar_gate_check.md",
        check_tex="paper/tables/gdn_scalar_gate_check.tex",
        png="figures/gdn_scalar_gate.png",
        pdf="figures/gdn_scalar_gate.pdf",
    params:
        table="scalar_gate",
    log:
        "logs/gdn/scalar_gate_tables.log",
    script:
        "../scripts/gdn_render.py"


rule gdn_fla_compare_table:
    conda:
        CONDA_ENV
    input:
        summary="results/gdn/fla_compare/summary.json",
        rows="results/gdn/fla_compare/rows.jsonl",
        provenance="results/gdn/fla_compare/provenance.json",
    output:
        md="paper/tables/gdn_fla_compare.md",
        tex="paper/tables/gdn_fla_compare.tex",
    params:
        table="fla_compare",
    log:
        "logs/gdn/fla_compare_table.log",
    script:
        "../scripts/gdn_render.py"


rule gdn_fla_bench_render:
    conda:
        CONDA_ENV
    input:
        summary="results/gdn/fla_bench/summary.json",
        rows="results/gdn/fla_bench/rows.jsonl",
        provenance="results/gdn/fla_bench/provenance.json",
    output:
        md="paper/tables/gdn_fla_bench.md",
        tex="paper/tables/gdn_fla_bench.tex",
        png=report(
            "figures/gdn_fla_bench.png",
            caption="../report/gdn_fla_bench.rst",
            category="Figures",
            subcategory="GDN family (H200)",
        ),
        pdf="figures/gdn_fla_bench.pdf",
    params:
        table="fla_bench",
    log:
        "logs/gdn/fla_bench_render.log",
    script:
        "../scripts/gdn_render.py"


# The model-shape table (16/32 heads, 2^18/2^20 head-tokens, T 2k-32k, d_v 64/128) and its data file, which the
# README's model-shape figures read (lethe.render.docvalues).
rule gdn_model_shapes_table:
    conda:
        CONDA_ENV
    input:
        summary=_GDN_MODEL,
        rows=f"{_GDN_MODEL_DIR}/rows.jsonl",
        provenance=f"{_GDN_MODEL_DIR}/provenance.json",
    output:
        md="paper/tables/gdn_model_shapes.md",
        tex="paper/tables/gdn_model_shapes.tex",
        json="paper/tables/gdn_model_shapes.json",
    params:
        table="model_shapes",
    log:
        "logs/gdn/model_shapes_table.log",
    script:
        "../scripts/gdn_render.py"
