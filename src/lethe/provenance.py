"""One provenance record format for every result the workflow writes.

Every committed intermediate under ``results/`` carries the same block, so a reader can tell which code,
machine and library versions produced a number. GPU fields read "cpu" on a machine without CUDA.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

SCHEMA = "lethe.provenance/1"
REPO_ROOT = Path(__file__).resolve().parents[2]


def _git(*args: str) -> str:
    try:
        out = subprocess.run(
            ["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10, check=False
        )
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def git_sha() -> str:
    """The commit the code ran from, with ``-dirty`` when the tree had uncommitted changes."""
    # The device machine receives a copy of the tree without usable history: the caller passes the sha in.
    if os.environ.get("LETHE_GIT_SHA"):
        return os.environ["LETHE_GIT_SHA"]
    sha = _git("rev-parse", "HEAD")
    if not re.fullmatch(r"[0-9a-f]{40}", sha):
        return "unknown"
    # Outputs being regenerated (results/, paper/, figures/, logs/) are not code: a workflow that rewrites its
    # own committed results must not mark them as coming from uncommitted code.
    if _git("status", "--porcelain", "--untracked-files=no", "--", ".", *(f":(exclude){d}" for d in OUTPUT_DIRS)):
        sha += "-dirty"
    return sha


OUTPUT_DIRS = ("results", "paper", "figures", "logs")


def gpu_info(driver: bool = True) -> dict[str, Any]:
    """Name, driver and compute capability of the first CUDA device, or ``{"gpu": "cpu"}``. ``driver=False``
    leaves the driver out (None) and skips the ``nvidia-smi`` process that reads it: a verdict row's environment
    does not record the driver, and every verification on a GPU would otherwise start that process."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a hard dependency
        return {"gpu": "cpu", "driver": None, "capability": None}
    if not torch.cuda.is_available():
        return {"gpu": "cpu", "driver": None, "capability": None}
    driver_version = None
    try:
        if not driver:
            raise OSError("driver not asked for")
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=False,
        )
        driver_version = out.stdout.strip().splitlines()[0] if out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        pass
    major, minor = torch.cuda.get_device_capability(0)
    return {
        "gpu": torch.cuda.get_device_name(0),
        "driver": driver_version,
        "capability": f"sm_{major}{minor}",
        "cuda_runtime": torch.version.cuda,
    }


LIBRARIES = ("torch", "triton", "numpy", "pandas")


def library_version(name: str) -> str | None:
    """One library's version (None when not installed). A library this process has not imported is read from
    its installed distribution's metadata instead of being imported for its ``__version__`` (importing torch,
    pandas or triton only to read a string costs seconds); the two agree for ``LIBRARIES``
    (tests/test_provenance.py checks it on the installed ones)."""
    from importlib import metadata

    module = sys.modules.get(name)
    if module is not None:
        return getattr(module, "__version__", None)
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        # Installed under another distribution name (pytorch-triton, say), or not at all: ask the module.
        try:
            return getattr(__import__(name), "__version__", None)
        except ImportError:
            return None


def library_versions() -> dict[str, str | None]:
    """Python's and each of ``LIBRARIES``' version (:func:`library_version`)."""
    return {"python": platform.python_version(), **{name: library_version(name) for name in LIBRARIES}}


def collect(command: str | None = None, **extra: Any) -> dict[str, Any]:
    """The provenance block: git sha, host, GPU/driver (or cpu), library versions, command, UTC time."""
    record: dict[str, Any] = {
        "schema": SCHEMA,
        "git_sha": git_sha(),
        "host": socket.gethostname(),
        "platform": platform.platform(),
        **gpu_info(),
        **library_versions(),
        "command": command if command is not None else " ".join(sys.argv),
        "utc_time": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
    }
    record.update(extra)
    return record


def write(path: str | os.PathLike[str], command: str | None = None, **extra: Any) -> dict[str, Any]:
    """Write the provenance block as JSON next to a result (conventionally ``provenance.json``)."""
    record = collect(command=command, **extra)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return record


REQUIRED_KEYS = ("schema", "git_sha", "host", "gpu", "python", "torch", "triton", "command", "utc_time")


def validate(record: dict[str, Any]) -> list[str]:
    """Problems with a provenance block (empty list when it is complete)."""
    problems = [f"missing key {k!r}" for k in REQUIRED_KEYS if k not in record]
    if record.get("schema") not in (SCHEMA, None) and "schema" in record:
        problems.append(f"unknown schema {record['schema']!r}")
    return problems
