"""Minimised, standalone failing cases of recorded gate failures (``lethe repro``); see docs/repro.md."""

from lethe.repro.scope import SUPPORTED_GATES

__all__ = ["SUPPORTED_GATES", "ReproError", "make_repro"]


def __getattr__(name: str):
    # The rest of the API imports torch: only on first use, so that ``lethe --help`` (which registers the
    # ``repro`` subcommand from lethe.repro.cli) does not.
    if name in ("ReproError", "make_repro"):
        from lethe.repro import core

        return getattr(core, name)
    raise AttributeError(name)
