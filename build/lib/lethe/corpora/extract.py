"""Turn a Dr. Kernel cold-start row into an audit item: id, reference source, candidate source, class.

The rules are the paper's: the candidate is the last ```python block that mentions ``ModelNew``, searching the
assistant turns from the last one backwards (the final answer wins; an earlier turn is used only when the
later ones carry no ModelNew code); the reference is ``original_python_code``; the id is ``str(uuid)``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from lethe.corpora.classify import classify

# An opening fence ```python (not ```python3-style variants the corpus does not use), lazily up to the next fence.
_PY_BLOCK = re.compile(r"```python[ \t]*\r?\n(.*?)```", re.DOTALL)


def python_blocks(text: str) -> list[str]:
    """Every fenced python block of a message, in order."""
    return _PY_BLOCK.findall(text or "")


def extract_candidate(messages: Iterable[Mapping[str, Any]]) -> tuple[str | None, int | None]:
    """The candidate source and the index of the message it came from, or (None, None).

    Within one turn the last qualifying block wins, since the model's final code comes after its sketches.
    """
    msgs = list(messages)
    for idx in range(len(msgs) - 1, -1, -1):
        m = msgs[idx]
        if m.get("role") != "assistant":
            continue
        blocks = [b for b in python_blocks(m.get("content") or "") if "ModelNew" in b]
        if blocks:
            return blocks[-1], idx
    return None, None


def to_item(row: Mapping[str, Any]) -> dict[str, Any]:
    """One audit item from one corpus row; a row without a candidate keeps ``candidate=None`` and a reason."""
    cand, turn = extract_candidate(row.get("messages") or [])
    ref = row.get("original_python_code") or ""
    fs = row.get("final_speedup")
    if fs is not None and isinstance(fs, float) and math.isnan(fs):
        fs = None
    return {
        "id": str(int(row["uuid"])),
        "op_class": classify(ref),
        "reference": ref,
        "candidate": cand,
        "candidate_turn": turn,
        "final_speedup": None if fs is None else float(fs),
        "extract_error": None if cand is not None else "no ```python block containing ModelNew in any assistant turn",
    }


def items_from_table(table: Any) -> list[dict[str, Any]]:
    """Items from a pyarrow Table or a pandas DataFrame in the upstream schema."""
    records = table.to_pylist() if hasattr(table, "to_pylist") else table.to_dict("records")
    return [to_item(r) for r in records]
