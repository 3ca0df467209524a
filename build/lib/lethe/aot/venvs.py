"""Side virtual environments holding other Triton releases, for compiling one kernel under several compilers.

The project venv pins triton 3.6.0. mamba#904 is a story about how the TMEM allocation of one kernel changes between
Triton releases (the fix, triton#9093, first ships in 3.8.0), so the reproduction has to compile the same source
under 3.7.1 and 3.8.0 as well. Each side venv holds only the ``triton`` wheel (which bundles ptxas, ptxas-blackwell
and cuobjdump); a ``.pth`` file appends the project venv's site-packages *after* the side venv's own, so torch,
numpy and lethe import from the project while ``import triton`` resolves to the side venv's release.

The venvs live under ``cache/venvs/`` (git-ignored) and are rebuilt by ``python -m lethe.aot.venvs 3.7.1 3.8.0``.
"""

from __future__ import annotations

import argparse
import site
import subprocess
import sys
from pathlib import Path

from lethe.provenance import REPO_ROOT

VENV_ROOT = REPO_ROOT / "cache" / "venvs"


def venv_python(version: str) -> Path:
    """Interpreter of the side venv for ``triton==version`` (it may not exist yet)."""
    return VENV_ROOT / f"triton-{version}" / "bin" / "python"


def triton_version_of(python: str | Path) -> str | None:
    """The triton release an interpreter imports, or None when it cannot import triton."""
    out = subprocess.run(
        [str(python), "-c", "import triton; print(triton.__version__)"],
        capture_output=True, text=True, check=False,
    )
    return out.stdout.strip() or None if out.returncode == 0 else None


def ensure(version: str) -> Path:
    """Create (once) the side venv for ``triton==version`` and return its interpreter.

    Idempotent: an existing venv that already imports the requested release is reused untouched.
    """
    py = venv_python(version)
    if py.exists() and triton_version_of(py) == version:
        return py
    ensure_env(f"triton-{version}", [f"triton=={version}"], no_deps=True)
    got = triton_version_of(py)
    if got != version:
        raise RuntimeError(f"side venv {py.parent.parent} imports triton {got!r}, expected {version}")
    return py


def ensure_env(name: str, requirements: list[str], *, no_deps: bool) -> Path:
    """Create ``cache/venvs/<name>`` with pinned ``requirements`` on top of the project's packages.

    The project venv's site-packages is appended after the side venv's own (a ``.pth`` file), so what the side
    venv installs shadows the project's copy and everything else (torch, numpy) is shared.
    """
    root = VENV_ROOT / name
    py = root / "bin" / "python"
    marker = root / "lethe-requirements.txt"
    wanted = "\n".join(requirements) + "\n"
    if py.exists() and marker.exists() and marker.read_text() == wanted:
        return py
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(root)], check=True)
    cmd = [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", *requirements]
    if no_deps:
        cmd.insert(5, "--no-deps")
    subprocess.run(cmd, check=True)
    side_site = Path(
        subprocess.run(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
    )
    project_sites = [p for p in site.getsitepackages() if Path(p).exists()]
    (side_site / "zz_lethe_project.pth").write_text("".join(f"{p}\n" for p in project_sites))
    marker.write_text(wanted)
    return py


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("versions", nargs="+", help="triton releases, e.g. 3.7.1 3.8.0")
    args = parser.parse_args(argv)
    for version in args.versions:
        print(f"triton {version}: {ensure(version)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
