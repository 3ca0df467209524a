"""The contract verifier: twelve gates graded against a sandboxed float64 reference.

Entry points: :func:`lethe.verifier.api.verify` (one row), :func:`lethe.verifier.api.verdict`, the ``lethe``
CLI (``lethe verify``, ``lethe replay``). See docs/verifier.md.
"""

# From the torch-free module: importing any lethe.verifier submodule runs this file first.
from lethe.verifier.battery import GATE_IDS

__all__ = ["GATE_IDS"]
