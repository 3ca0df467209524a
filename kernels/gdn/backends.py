"""The registry of GDN backends that :func:`lethe.kernels.gdn.autograd.chunk_family` dispatches to by name.

A leaf module: it imports nothing of the family, so the modules that register an implementation
(:mod:`lethe.kernels.gdn.native.backend`) and the module that looks one up (:mod:`lethe.kernels.gdn.autograd`)
both depend on it and not on each other.
"""

from __future__ import annotations

#: Every ``backend=`` chunk_family accepts.
BACKENDS = ("auto", "torch", "triton", "native", "hybrid", "hybrid-tc")

#: chunk_family backend -> its key in :data:`NATIVE_BACKENDS`.
NATIVE_KEYS = {"native": "default", "hybrid": "hybrid", "hybrid-tc": "hybrid-tc"}

#: key -> an object with the ``forward`` / ``backward`` pair ``ChunkGDNFunction`` calls (filled by ``register``).
NATIVE_BACKENDS: dict[str, object] = {}


def register(key: str, impl: object) -> None:
    """Make ``impl`` the implementation behind ``key`` (one of :data:`NATIVE_KEYS`' values)."""
    if key not in NATIVE_KEYS.values():
        raise ValueError(f"unknown native backend key {key!r}; expected one of {sorted(set(NATIVE_KEYS.values()))}")
    NATIVE_BACKENDS[key] = impl
