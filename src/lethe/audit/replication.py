"""The rigor gap measured by this repository on a corpus it can reach (issue: replication).

A corpus audited on the GPU (results/audit/<corpus>/rows.parquet, three profiles from one candidate run) and
judged by KernelBench's own check, unmodified (results/differential/<corpus>/kb_real/real/rows.jsonl), gives the
paper's figures for that corpus: the headline population is what KernelBench accepts (the paper's "accepted"), so
the floor and the any-violation rate there say how much of what KernelBench passes the battery rejects. The
aggregation is :func:`lethe.audit.aggregate.aggregate` unchanged (funnel, floor, channels, per gate, per class,
per profile); only the acceptance predicate comes from KernelBench's real check instead of a speedup column.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable, Mapping

from lethe.audit import aggregate as agg

ACCEPTANCE = "KernelBench 48642c5c's own eval_kernel_against_ref, unmodified, 5 trials (kb_real/real/rows.jsonl)"


def corpus_aggregates(rows: Iterable[Mapping[str, Any]], kb_rows: Iterable[Mapping[str, Any]], corpus: str,
                      op_class: Mapping[str, str] | None = None) -> dict[str, Any]:
    """aggregate() over the kernels KernelBench's real check accepted (top level, as every corpus's
    aggregates.json), the same over every audited kernel (``all_audited``), and how the two populations were
    formed (``population``: audited, judged by KernelBench, accepted, rejected, audited but not judged).
    ``op_class`` (id -> class, the corpus manifest's classifier output) fills rows that carry no class: a
    KernelBench run folder has no corpus metadata for the shard runner to attach."""
    rows = [agg.normalize_row(r) for r in rows]
    for r in rows:
        if not r.get("op_class") and op_class and r["id"] in op_class:
            r["op_class"] = op_class[r["id"]]
    verdict = {str(r["id"]): r.get("correct") for r in kb_rows}
    audited = sorted({r["id"] for r in rows})
    accepted = {i for i in audited if verdict.get(i) is True}
    out = agg.aggregate([r for r in rows if r["id"] in accepted], require_accepted=False)
    out["all_audited"] = agg.aggregate(rows, require_accepted=False)
    # The funnel starts at every audited kernel: KernelBench's rejections are its "not accepted" drop.
    out["funnel"]["rows"] = len(audited)
    out["funnel"]["dropped"]["not_accepted"] = len(audited) - len(accepted)
    out["funnel"]["dropped_ids"]["not_accepted"] = [i for i in audited if i not in accepted]
    out["acceptance_label"] = "Accepted by KernelBench's own check (48642c5c, unmodified)"
    out["corpus"] = corpus
    out["acceptance"] = ACCEPTANCE
    out["verifier"] = "lethe.verifier.api.verify"
    out["population"] = {
        "audited": len(audited), "kernelbench_judged": sum(1 for i in audited if i in verdict),
        "kernelbench_accepted": len(accepted),
        "kernelbench_rejected": sum(1 for i in audited if verdict.get(i) is False),
        "not_judged_by_kernelbench": sum(1 for i in audited if i not in verdict),
        "op_class": dict(sorted(Counter(str(r.get("op_class")) for r in rows if r["profile"] == "strict").items())),
    }
    return out
