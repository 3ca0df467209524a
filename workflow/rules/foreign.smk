# Foreign kernels on the H200: the second-corpus slice (gates per profile, three-way agreement, throughput).
# Render rules only read committed results/foreign/ (written by lethe.foreign.ingest from the device run's
# logs); the GPU run is experiments/foreign/sakana_h200.py (compute rule foreign_sakana in foreign_compute.smk).
import os

FOREIGN_DIR = "results/foreign/sakana-subset"
FOREIGN_INPUTS = ["rows.parquet", "kb_rows.parquet", "compile.parquet", "timings.parquet", "throughput.json",
                  "provenance.json"]
FOREIGN_TABLES = [
    f"paper/tables/{t}.{ext}"
    for t in ("second_corpus_gates", "second_corpus_agreement", "audit_throughput")
    for ext in ("md", "tex")
]
if all(os.path.exists(os.path.join(workflow.basedir, FOREIGN_DIR, f)) for f in FOREIGN_INPUTS):
    RENDER_TARGETS.extend(FOREIGN_TABLES + ["figures/audit_throughput.png", "figures/audit_throughput.pdf"])


rule foreign_render:
    conda:
        CONDA_ENV
    input:
        rows=f"{FOREIGN_DIR}/rows.parquet",
        kb=f"{FOREIGN_DIR}/kb_rows.parquet",
        compile=f"{FOREIGN_DIR}/compile.parquet",
        timings=f"{FOREIGN_DIR}/timings.parquet",
        throughput=f"{FOREIGN_DIR}/throughput.json",
        provenance=f"{FOREIGN_DIR}/provenance.json",
        published_sakana="data/published/audit_sakana.json",
    output:
        gates_md="paper/tables/second_corpus_gates.md",
        gates_tex="paper/tables/second_corpus_gates.tex",
        agree_md="paper/tables/second_corpus_agreement.md",
        agree_tex="paper/tables/second_corpus_agreement.tex",
        tp_md="paper/tables/audit_throughput.md",
        tp_tex="paper/tables/audit_throughput.tex",
        png=report(
            "figures/audit_throughput.png",
            caption="../report/audit_throughput.rst",
            category="Figures",
            subcategory="second corpus (H200)",
        ),
        pdf="figures/audit_throughput.pdf",
    log:
        "logs/foreign/render.log",
    script:
        "../scripts/foreign_render.py"
