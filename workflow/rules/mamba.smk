# Render rules of the mamba stage. The ahead-of-time tables of the six kernels are written by
# experiments/mamba/triton_aot.py next to their results (results/mamba/aot/*/triton_aot.md, compiled on the CPU,
# never executed). The benchmark table shows the authors' B200 records and, once committed, the H200 result named
# in config (results.mamba_bench); the positive-control table every result named in config
# (results.mamba_positive_control: label -> file) that exists, beside the authors' record.
MAMBA_BENCH = config.get("results", {}).get("mamba_bench", "results/mamba/bench/bench.json")
MAMBA_PC = {k: v for k, v in config.get("results", {}).get("mamba_positive_control", {}).items()
            if os.path.exists(os.path.join(workflow.basedir, v))}
RENDER_TARGETS.extend(["paper/tables/mamba_bench.md", "paper/tables/mamba_bench.tex",
                       "paper/tables/mamba_positive_control.md", "paper/tables/mamba_positive_control.tex"])


rule mamba_bench_table:
    conda:
        CONDA_ENV
    input:
        **({"result": MAMBA_BENCH} if os.path.exists(os.path.join(workflow.basedir, MAMBA_BENCH)) else {}),
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
        "../scripts/mamba_render.py"
