"""The Triton wrappers' launch tables -- ``FWD_LAUNCH`` (triton_fwd) and ``BWD_LAUNCH`` (triton_bwd) -- looked up and
temporarily overridden in one place. The wrappers read their entries at call time, so an override inside the
block changes what they launch: the launch sweep times one entry changed, the ahead-of-time report compiles
what-if entries."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from .triton_bwd import BWD_LAUNCH
from .triton_fwd import FWD_LAUNCH


def find_table(kernel: str) -> dict | None:
    """The table holding ``kernel``'s entry, or None for a kernel launched with fixed options."""
    for table in (FWD_LAUNCH, BWD_LAUNCH):
        if kernel in table:
            return table
    return None


def table_for(kernel: str) -> dict:
    table = find_table(kernel)
    if table is None:
        raise KeyError(f"{kernel!r} has no entry in FWD_LAUNCH or BWD_LAUNCH")
    return table


@contextmanager
def overridden(overrides: dict[str, dict]) -> Iterator[dict[str, dict]]:
    """Inside the block, each kernel's entry with its override merged in (yielded as {kernel: entry}); every
    entry restored after, also when the block raises. Kernels in neither table are left out."""
    saved = []
    try:
        for kernel, override in overrides.items():
            table = find_table(kernel)
            if table is not None:
                saved.append((table, kernel, table[kernel]))
                table[kernel] = {**table[kernel], **override}
        yield {kernel: table[kernel] for table, kernel, _ in saved}
    finally:
        for table, kernel, entry in reversed(saved):
            table[kernel] = entry
