"""Contract profiles: which floating-point behaviours a kernel is held to.

Exact NaN/Inf propagation, gradual underflow and bitwise run-to-run determinism are a normative contract, not a
mathematical fact: production CUDA builds flush fp32 subnormals in some paths, and fast-math compilers assume no
NaN. The verifier therefore grades against an explicit, named contract, and every verdict row records which one,
so a corpus's pass rate can be recomputed per contract.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Profile:
    """One contract. Fields are the knobs the gates read; the docstring of each subclass says why."""

    name: str
    # EXC-02 / subnormal CMP-01 probes: may the kernel flush subnormal inputs/outputs to zero?
    allow_ftz: bool
    # EXC-01: may a NaN in the input fail to reach the output positions the reference's NaN reaches?
    allow_nan_nonpropagation: bool
    # ORD-02: must five repeats be byte-identical (True) or only within the ORD-01 bound of each other?
    bitwise_determinism: bool
    # RES-02: the most local-memory spill (bytes per thread) a compiled kernel may have; None = reported only.
    max_spill_bytes: int | None = None


@dataclass(frozen=True)
class Strict(Profile):
    """The paper's semantics: IEEE-754 non-finite propagation, no flush-to-zero, bitwise determinism."""

    name: str = "strict"
    allow_ftz: bool = False
    allow_nan_nonpropagation: bool = False
    bitwise_determinism: bool = True
    # The contract lists local-memory spill among the hardware limits: under strict a kernel must not spill.
    max_spill_bytes: int | None = 0


@dataclass(frozen=True)
class CudaDefault(Profile):
    """What default CUDA builds may do: fp32 flush-to-zero allowed (EXC-02 accepts a flush-to-zero reference),
    everything else strict."""

    name: str = "cuda-default"
    allow_ftz: bool = True
    allow_nan_nonpropagation: bool = False
    bitwise_determinism: bool = True


@dataclass(frozen=True)
class FastMath(Profile):
    """What -ffast-math / --use_fast_math permits: flush-to-zero, NaN non-propagation (positions where the
    reference is NaN are not graded), and determinism only up to the ORD-01 reordering bound."""

    name: str = "fast-math"
    allow_ftz: bool = True
    allow_nan_nonpropagation: bool = True
    bitwise_determinism: bool = False


PROFILES: dict[str, Profile] = {p.name: p for p in (Strict(), CudaDefault(), FastMath())}


def get(name: str | Profile) -> Profile:
    if isinstance(name, Profile):
        return name
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown profile {name!r}; choose one of {sorted(PROFILES)}") from None


def as_dict(p: Profile) -> dict:
    return asdict(p)
