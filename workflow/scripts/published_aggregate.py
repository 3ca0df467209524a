"""Re-aggregate the paper's published per-row audit records into results/published/aggregates.json."""

from pathlib import Path

from lethe import provenance
from lethe.audit import published

snakemake = globals()["snakemake"]  # injected by Snakemake's script: directive

directory = Path(snakemake.input.rows).parent
result = published.reproduce(directory)
out = Path(snakemake.output.aggregates)
out.parent.mkdir(parents=True, exist_ok=True)
out.write_text(published.dumps(result))
provenance.write(
    snakemake.output.provenance,
    command="snakemake --config compute=published (rule published_aggregate)",
    inputs=sorted(str(p) for p in snakemake.input),
    checks_passed=result["checks_passed"],
    checks_total=result["checks_total"],
)
