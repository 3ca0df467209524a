"""One-off conversion (documented in data/hand_audit/PROVENANCE.md) of the authors' hand-audit sample into the
label file format: ``python workflow/scripts/hand_audit_convert_published.py`` from the repository root."""

import json
from pathlib import Path

from lethe.hand_audit import labels

ROOT = Path(__file__).resolve().parents[2]
pub = json.loads((ROOT / "data/published/failure_sample_selected.json").read_text())
out = ROOT / "data/hand_audit"
out.mkdir(parents=True, exist_ok=True)
(out / "published_sample.csv").write_text(labels.dumps(labels.from_published_sample(pub, "drkernel")))
meta = {"source": "data/published/failure_sample_selected.json", "corpus": "drkernel",
        "money_cell_size": pub["money_cell_size"], "bucket_sizes": pub["bucket_sizes"], "n_selected": pub["n_selected"]}
(out / "published_sample.buckets.json").write_text(json.dumps(meta, indent=1) + "\n")
