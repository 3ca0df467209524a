"""Load an experiment script (experiments/ has no package) as a module for its CPU tests."""

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load_experiment(relpath: str, name: str):
    """experiments/<relpath> as module ``name``, registered in sys.modules while it executes (dataclasses look
    their module up while the class is built)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "experiments" / relpath)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod
