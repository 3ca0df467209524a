"""The Triton wrappers' launch tables -- ``FWD_LAUNCH`` (triton_fwd), ``BWD_LAUNCH`` (triton_bwd) and ``SG_LAUNCH``
(scalar_gate; it shares the forward's ``wy_inverse_kernel`` entry and has entries of its own for the general
kernels it launches in their scalar-gate variant, ``SG_VARIANTS``) -- looked up and
temporarily overridden in one place. The wrappers read their entries at call time, so an override inside the
block changes what they launch: the launch sweep times one entry changed, the ahead-of-time report compiles
what-if entries."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from .scalar_gate import SG_LAUNCH, SG_VARIANTS
from .triton_bwd import BWD_LAUNCH
from .triton_fwd import FWD_LAUNCH


def find_table(kernel: str) -> dict | None:
    """The table holding ``kernel``'s entry, or None for a kernel launched with fixed options."""
    for table in (FWD_LAUNCH, BWD_LAUNCH, SG_LAUNCH):
        if kernel in table:
            return table
    return None


def entry_name(kernel: str, kwargs: dict) -> str:
    """The launch-table entry a launch of the kernel named ``kernel`` with keyword arguments ``kwargs`` was
    configured from: the scalar-gate path's entry for a general kernel launched in its scalar-gate variant
    (SCALAR_GATE=True; the same kernel serves both paths, each with its own launch configuration), else the
    kernel's own name. Tools that report or override launches by name go through this, so the two variants of one
    kernel stay apart."""
    if kwargs.get("SCALAR_GATE"):
        for entry, general in SG_VARIANTS.items():
            if general == kernel:
                return entry
        raise KeyError(f"{kernel!r} launched with SCALAR_GATE has no entry in SG_VARIANTS")
    return kernel


def table_for(kernel: str) -> dict:
    table = find_table(kernel)
    if table is None:
        raise KeyError(f"{kernel!r} has no entry in FWD_LAUNCH, BWD_LAUNCH or SG_LAUNCH")
    return table


def parse_overrides(items: list[str]) -> dict[str, dict]:
    """``["kernel:KEY=VAL,KEY=VAL", ...]`` -> {kernel: {KEY: VAL}} (integers parsed, "None" read as None, anything
    else kept as a string, e.g. PREC=tf32rn)."""
    out: dict[str, dict] = {}
    for item in items:
        name, _, rest = item.partition(":")
        if not name or not rest:
            raise ValueError(f"override {item!r}: expected kernel:KEY=VAL[,KEY=VAL]")
        for kv in rest.split(","):
            key, eq, val = kv.partition("=")
            if not key or not eq:
                raise ValueError(f"override {item!r}: expected kernel:KEY=VAL[,KEY=VAL]")
            out.setdefault(name, {})[key] = (int(val) if val.lstrip("-").isdigit() else None if val == "None"
                                             else val)
    return out


def check_overrides(overrides: dict[str, dict]) -> None:
    """Refuse an override of a kernel in neither table or of a key its entry does not have (a misspelt override
    would otherwise change nothing and look like a measurement of the change)."""
    for kernel, override in overrides.items():
        entry = table_for(kernel)[kernel]
        unknown = sorted(set(override) - set(entry))
        if unknown:
            raise KeyError(f"{kernel}: {unknown} are not keys of its launch entry {sorted(entry)}")


def overrides_from_cli(items: list[str], option: str = "--launch") -> dict[str, dict]:
    """A script's repeated ``--launch KERNEL:KEY=VAL`` values parsed and checked; a malformed or misspelt one
    ends the script with a message naming the option, before anything runs."""
    try:
        overrides = parse_overrides(items)
        check_overrides(overrides)
    except (KeyError, ValueError) as exc:
        raise SystemExit(f"{option}: {exc}") from None
    return overrides


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
