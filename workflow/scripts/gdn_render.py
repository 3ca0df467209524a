"""Render rule script: the GDN ladder, family-training and fla-comparison tables, the fla timing table and
figure, and the model-shape table with its data file, from results/gdn/."""

import json
from pathlib import Path

from lethe.kernels.gdn import fla_bench, tables

snakemake = globals()["snakemake"]  # injected by Snakemake's script: directive

out = snakemake.output
if snakemake.params.table == "ladder":
    ladder = json.loads(Path(snakemake.input.ladder).read_text())
    fla = json.loads(Path(snakemake.input.fla[0]).read_text()) if snakemake.input.fla else None
    tables.render_ladder(ladder, fla, out.md, out.tex)
elif snakemake.params.table == "fla_compare":
    rows = [json.loads(line) for line in Path(snakemake.input.rows).read_text().splitlines() if line.strip()]
    tables.render_fla_compare(json.loads(Path(snakemake.input.summary).read_text()),
                              json.loads(Path(snakemake.input.provenance).read_text()), rows, out.md, out.tex)
elif snakemake.params.table == "fla_bench":
    summary, provenance, rows = fla_bench.load_run(Path(snakemake.input.summary).parent)
    fla_bench.render_fla_bench(summary, provenance, rows, out.md, out.tex)
    fla_bench.render_fla_bench_figure(summary, rows, Path(out.png).parent, Path(out.png).stem)
elif snakemake.params.table == "model_shapes":
    from lethe.kernels.gdn import model_shapes

    model_shapes.render_model_shapes(json.loads(Path(snakemake.input.summary).read_text()),
                                     json.loads(Path(snakemake.input.provenance).read_text()),
                                     fla_bench.read_rows(snakemake.input.rows), out.md, out.tex, out.json)
elif snakemake.params.table == "intra_precision":
    rows = [json.loads(line) for line in Path(snakemake.input.rows).read_text().splitlines() if line.strip()]
    tables.render_intra_precision(json.loads(Path(snakemake.input.summary).read_text()),
                                  json.loads(Path(snakemake.input.provenance).read_text()), rows, out.md, out.tex)
elif snakemake.params.table == "scalar_gate":
    # the fla benchmark's FLOP and byte counts and floors, so the floors are counted once
    from lethe.kernels.gdn.bench import chunk_counts

    from lethe.perf.roofline import roofline_ms
    from lethe.results import load_runs

    runs = [{**doc, "provenance": prov} for _, doc, prov in load_runs(snakemake.input.bench)]
    # the ceilings the newest kernel-profile run measured
    ceilings = load_runs(snakemake.input.ceilings)[-1][1]["ceilings"]
    floors = {}
    for r in (r for doc in runs for r in doc["timing"] if "fwd_bwd_ms" in r):
        c = chunk_counts("sgdn", r["B"], r["H"], r["T"], r["K"], r["V"])
        tf, bw = ceilings["bf16_matmul_tflops"], ceilings["copy_tbps"]
        floors[(r["V"], r["T"])] = (roofline_ms(c["bwd_flops"], c["bwd_bytes"], tf, bw),
                                    roofline_ms(c["fwd_flops"] + c["bwd_flops"], c["fwd_bytes"] + c["bwd_bytes"],
                                                tf, bw))
    tables.render_scalar_gate(runs, floors, ceilings, (out.time_md, out.check_md), (out.time_tex, out.check_tex))
    tables.render_scalar_gate_figure(runs, Path(out.png).parent, Path(out.png).stem)
elif snakemake.params.table == "training_seeds":
    tables.render_training_seeds([json.loads(Path(f).read_text()) for f in snakemake.input.studies], out.md,
                                 out.tex)
else:
    tables.render_training(json.loads(Path(snakemake.input.train).read_text()), out.md, out.tex)
