"""Audit items of a named corpus: one dict per kernel, {id, op_class, reference, candidate, final_speedup, ...}."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lethe.corpora import extract, sakana
from lethe.corpora.classify import AUDITED

# Where each corpus's file lives relative to the repository root (fetched ones under the corpora cache).
LOCAL_FILES = {
    "fixture": "data/fixture_corpus/drkernel_fixture.parquet",
    "sakana-subset": "data/sakana_subset/subset.jsonl",
}


def load_items(path: str | Path, corpus: str, *, classes: tuple[str, ...] | None = AUDITED) -> list[dict[str, Any]]:
    """Items of the corpus file at ``path``, restricted to ``classes`` (None keeps every class), sorted by id.

    Dr. Kernel-schema parquet (``fixture``, ``drkernel``) goes through :mod:`lethe.corpora.extract`; the Sakana
    archive (``sakana``, ``sakana-subset``) through :mod:`lethe.corpora.sakana`, level 1, Correct == True.
    """
    path = Path(path)
    if corpus.startswith("sakana"):
        rows = sakana.load_rows(path) if path.suffix == ".jsonl" else _parquet_records(path)
        items = [sakana.to_item(r) for r in sakana.select(rows, level=1)]
    else:
        import pyarrow.parquet as pq

        items = extract.items_from_table(pq.read_table(path))
    if classes is not None:
        items = [i for i in items if i["op_class"] in classes]
    return sorted(items, key=lambda i: (0, int(i["id"])) if i["id"].isdigit() else (1, i["id"]))


def _parquet_records(path: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


def shard(items: list[dict[str, Any]], index: int, count: int) -> list[dict[str, Any]]:
    """Round-robin slice ``index`` of ``count``: deterministic, balanced across classes since items are id-sorted."""
    if not 0 <= index < count:
        raise ValueError(f"shard index {index} outside 0..{count - 1}")
    return items[index::count]
