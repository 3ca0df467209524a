# Render rules of the mamba stage. The ahead-of-time tables of the six kernels are written by
# experiments/mamba/triton_aot.py next to their results (results/mamba/aot/*/triton_aot.md, compiled on the CPU,
# never executed). The benchmark table shows the authors' B200 records and, once committed, the H200 result named
# in config (results.mamba_bench); the positive-control table every result named in config
# (results.mamba_positive_control: label -> file) that exists, beside the authors' record. C1's launch search
# (lethe.render.mamba_launch) renders once its current result, named in config results.mamba_launch_search, is
# committed; the authors' published records of the same study render always, marked as theirs.
import os as _mamba_os

_MAMBA_LS = config.get("results", {}).get("mamba_launch_search", "results/mamba/launch_search/launch_search.json")
_MAMBA_LS_ON = _mamba_os.path.exists(_mamba_os.path.join(workflow.basedir, _MAMBA_LS))
MAMBA_BENCH = config.get("results", {}).get("mamba_bench", "results/mamba/bench/bench.json")
MAMBA_PC = {k: v for k, v in config.get("results", {}).get("mamba_positive_control", {}).items()
            if _mamba_os.path.exists(_mamba_os.path.join(workflow.basedir, v))}

RENDER_TARGETS.extend(
    [f"paper/tables/mamba_{t}.{ext}" for t in ("scan_mode_published", "launch_published", "rl_published",
                                                "bench", "positive_control")
     for ext in ("md", "tex")]
    + ([f"paper/tables/mamba_launch_search.{ext}" for ext in ("md", "tex")] if _MAMBA_LS_ON else [])
)


rule mamba_launch_search_table:
    conda:
        CONDA_ENV
    input:
        result=_MAMBA_LS,
    output:
        md="paper/tables/mamba_launch_search.md",
        tex="paper/tables/mamba_launch_search.tex",
    params:
        table="launch_search",
    log:
        "logs/mamba/launch_search_table.log",
    script:
        "../scripts/mamba_render.py"


rule mamba_bench_table:
    conda:
        CONDA_ENV
    input:
        **({"result": MAMBA_BENCH} if _mamba_os.path.exists(_mamba_os.path.join(workflow.basedir, MAMBA_BENCH)) else {}),
        published_c1="data/published/c1_bench_b200.json",
        published_c2="data/published/c2_bench_b200.json",
        published_c5="data/published/c5_bench_b200.json",
        published_c6="data/published/c6_bench_b200.json",
    output:
        md="paper/tables/mamba_bench.md",
        tex="paper/tables/mamba_bench.tex",
    params:
        kind="bench",
    log:
        "logs/mamba/bench_table.log",
    script:
        "../scripts/mamba_bench_render.py"


rule mamba_scan_mode_published_table:
    conda:
        CONDA_ENV
    input:
        boundary="data/published/scan_mode_boundary.json",
    output:
        md="paper/tables/mamba_scan_mode_published.md",
        tex="paper/tables/mamba_scan_mode_published.tex",
    params:
        table="scan_mode_published",
    log:
        "logs/mamba/scan_mode_published_table.log",
    script:
        "../scripts/mamba_render.py"


rule mamba_launch_published_table:
    conda:
        CONDA_ENV
    input:
        cost_model="data/published/e2_cost_model.json",
    output:
        md="paper/tables/mamba_launch_published.md",
        tex="paper/tables/mamba_launch_published.tex",
    params:
        table="launch_published",
    log:
        "logs/mamba/launch_published_table.log",
    script:
        "../scripts/mamba_render.py"


rule mamba_rl_published_table:
    conda:
        CONDA_ENV
    input:
        config_rl="data/published/scan_mode_config_rl.json",
        serial_seed="data/published/e2_serial_seed.json",
        edit_rl="data/published/edit_rl_negative.json",
    output:
        md="paper/tables/mamba_rl_published.md",
        tex="paper/tables/mamba_rl_published.tex",
    params:
        table="rl_published",
    log:
        "logs/mamba/rl_published_table.log",
    script:
        "../scripts/mamba_render.py"


rule mamba_positive_control_table:
    conda:
        CONDA_ENV
    input:
        results=list(MAMBA_PC.values()),
        published="data/published/positive_control.json",
    output:
        md="paper/tables/mamba_positive_control.md",
        tex="paper/tables/mamba_positive_control.tex",
    params:
        kind="positive_control",
        labels=list(MAMBA_PC),
    log:
        "logs/mamba/positive_control_table.log",
    script:
        "../scripts/mamba_bench_render.py"
