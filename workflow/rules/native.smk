# Render rules of the native stage: the H200 K1 benchmark and the Blackwell AOT table (compiled, not executed).
# Registered only once the committed results exist, so the DAG stays valid before the first compute run.
if os.path.exists(os.path.join(workflow.basedir, "results/native/bench.json")):
    RENDER_TARGETS.extend(["paper/tables/native_bench.md", "paper/tables/native_bench.tex"])
if os.path.exists(os.path.join(workflow.basedir, "results/native/aot.json")):
    RENDER_TARGETS.extend(["paper/tables/native_blackwell_aot.md", "paper/tables/native_blackwell_aot.tex"])
# Ahead-of-time reports of the native kernels (aot.json first: K1 Hopper and the Blackwell K1 product).
NATIVE_AOT_REPORTS = [
    f"results/native/{n}.json"
    for n in ("aot", "k1_blackwell_scan_aot", "k1_hopper_wgmma_aot", "k2_blackwell_aot", "k2_hopper_aot",
              "k2_hopper_wgmma_aot")
    if os.path.exists(os.path.join(workflow.basedir, "results/native", f"{n}.json"))]
# Kernel profiles of the backward (experiments/native/kernel_profile.py): the current result named in config.
NATIVE_PROFILE = config.get("results", {}).get("native_profile", "results/native/profile/profile.json")
if os.path.exists(os.path.join(workflow.basedir, NATIVE_PROFILE)):
    RENDER_TARGETS.extend(["paper/tables/native_profile.md", "paper/tables/native_profile.tex",
                           "paper/tables/native_vs_fla.md", "paper/tables/native_vs_fla.tex",
                           "figures/native_vs_fla.png", "figures/native_vs_fla.pdf"])

rule native_bench_table:
    conda:
        CONDA_ENV
    input:
        result="results/native/bench.json",
    output:
        md="paper/tables/native_bench.md",
        tex="paper/tables/native_bench.tex",
    params:
        kind="bench",
    log:
        "logs/native/bench_table.log",
    script:
        "../scripts/native_render.py"


rule native_blackwell_aot_table:
    conda:
        CONDA_ENV
    input:
        results=NATIVE_AOT_REPORTS,
    output:
        md="paper/tables/native_blackwell_aot.md",
        tex="paper/tables/native_blackwell_aot.tex",
    params:
        kind="aot",
    log:
        "logs/native/aot_table.log",
    script:
        "../scripts/native_render.py"


rule native_profile_table:
    conda:
        CONDA_ENV
    input:
        profile=NATIVE_PROFILE,
    output:
        md="paper/tables/native_profile.md",
        tex="paper/tables/native_profile.tex",
    log:
        "logs/native/profile_table.log",
    script:
        "../scripts/native_profile_render.py"


rule native_vs_fla:
    conda:
        CONDA_ENV
    input:
        profile=NATIVE_PROFILE,
    output:
        md="paper/tables/native_vs_fla.md",
        tex="paper/tables/native_vs_fla.tex",
        png="figures/native_vs_fla.png",
        pdf="figures/native_vs_fla.pdf",
    log:
        "logs/native/vs_fla.log",
    script:
        "../scripts/native_vs_fla_render.py"
