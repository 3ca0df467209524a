"""Lethe: a contract-grade correctness verifier for GPU kernels.

The stable Python API::

    import lethe
    v = lethe.verify(ref_src, cand_src, device="cuda")        # -> lethe.Verdict
    v.passed, v.failed_gates, v.gates["CMP-01"].margin, v.by_probe(), v.reward(), v.to_json()
    v = lethe.verify_files("ref.py", "cand.py")

Keyword arguments are those of ``lethe.verifier.api.verify`` (profile, device, seed, timeout_s, memory_mb,
ref_timeout_s, ref_memory_mb, only_gates, kernel_id, ...). The raw storage row is ``v.row``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__version__ = "0.1.0"

if TYPE_CHECKING:  # pragma: no cover
    from lethe.verifier.verdict import Verdict

__all__ = ["__version__", "verify", "verify_files", "Verdict"]


def verify(ref_src: str, cand_src: str, **kw) -> Verdict:
    """Verify one candidate source against one reference source; see ``lethe.verifier.api.verify``."""
    from lethe.verifier import api
    from lethe.verifier.verdict import Verdict

    return Verdict.from_row(api.verify(ref_src, cand_src, **kw))


def verify_files(ref_path, cand_path, **kw) -> Verdict:
    """``verify`` on two files, decoded as Python decodes them."""
    from lethe.verifier import api
    from lethe.verifier.verdict import Verdict

    return Verdict.from_row(api.verify_files(ref_path, cand_path, **kw))


def __getattr__(name: str):
    if name == "Verdict":
        from lethe.verifier.verdict import Verdict

        return Verdict
    raise AttributeError(name)
