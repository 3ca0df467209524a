"""Compute rule script: verify every calibration fixture (sandboxed) and write the verdict rows + provenance."""

from lethe import provenance
from lethe.verifier import api, records
from lethe.verifier import fixtures as F

snakemake = globals()["snakemake"]  # injected by Snakemake's script: directive

seed = int(snakemake.params.seed)
device = str(snakemake.params.device)
profiles = list(snakemake.params.profiles)

pairs = [(ref, "conforming") for ref in F.CONFORMING_REFS]
pairs += sorted({(ref, cand) for _g, ref, cand, _p, _e, _kb in F.CALIBRATION} - set(pairs))
rows = []
for ref, cand in pairs:
    cand_src = F.as_candidate(getattr(F, ref)) if cand == "conforming" else getattr(F, cand)
    rows += api.verify_profiles(getattr(F, ref), cand_src, profiles=profiles, device=device, seed=seed,
                                kernel_id=f"{ref}:{cand}", corpus="verifier-fixtures")
records.write_rows(rows, snakemake.output.rows)
provenance.write(snakemake.output.provenance, seed=seed, device=device, profiles=profiles, n_rows=len(rows))
