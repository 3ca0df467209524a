"""Minimised, standalone failing cases of recorded gate failures (``lethe repro``); see docs/repro.md."""

from lethe.repro.core import SUPPORTED_GATES, ReproError, make_repro

__all__ = ["SUPPORTED_GATES", "ReproError", "make_repro"]
