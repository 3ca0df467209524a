"""Isolated execution of untrusted code (candidate kernels): one fresh, resource-limited process per run
(spawned, or forked from a clean pre-imported zygote).

Public API: :func:`run_isolated`, :func:`run_many`, :class:`SandboxResult`, ``STATUSES``.
See docs/sandbox.md for the guarantees and their limits.
"""

from lethe.sandbox.pool import run_many
from lethe.sandbox.runner import STATUSES, SandboxResult, run_isolated

__all__ = ["STATUSES", "SandboxResult", "run_isolated", "run_many"]
