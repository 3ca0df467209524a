"""Compute rule script: AOT-compile the native kernels on the CPU (sm_90a K1, sm_100a tcgen05) and record the facts."""

import json
from pathlib import Path

from lethe.kernels.gdn.native.aot import compile_report

from lethe import provenance

snakemake = globals()["snakemake"]  # injected by Snakemake's script: directive

rows = []
for V in (64, 128):
    rows.append(compile_report("k1_hopper", "sm_90a",
                               dict(BH=4, N=3, C=64, K=128, V=V, BV=32, split=2, has_erase=True, has_dsf=True)))
    rows.append(compile_report("k1_blackwell", "sm_100a", dict(BH=2, T=256, V=V)))
for r in rows:
    r["status"] = "compiled, executed on H200" if r["arch"] == "sm_90a" else "compiled, not executed (no B200)"
out = Path(snakemake.output.result)
out.parent.mkdir(parents=True, exist_ok=True)
out.write_text(json.dumps({"rows": rows}, indent=1, sort_keys=True) + "\n")
provenance.write(Path(snakemake.output.provenance), command="snakemake native_aot", experiment="native-aot")
