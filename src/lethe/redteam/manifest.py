"""Kernel folders and their manifests: loading and validation.

Each kernel is a folder ``data/<suite>/<name>/`` with ``ref.py`` (KernelBench ``Model``), ``cand.py``
(``ModelNew``) and ``manifest.yaml``. The manifest states intent (which gates a red-team kernel is meant to
fail, its style, its language); it never states measured facts. ``passes_kernelbench_loose`` in a manifest is
only the author's expectation: the measured verdict is written to ``results/`` by :mod:`lethe.redteam.run`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

# The twelve gates of the verifier contract (issue 3), from the module that names them without importing torch.
from lethe.verifier.battery import GATE_IDS

SUITES = ("red_team", "positive_control")
LANGUAGES = ("torch", "triton")
REQUIRED_KEYS = ("name", "description", "style", "language", "targets", "passes_kernelbench_loose", "notes")
#: The issue's minimum sizes: at least 19 broken kernels and 7 trusted ones.
MIN_KERNELS = {"red_team": 19, "positive_control": 7}

REPO_ROOT = Path(__file__).resolve().parents[3]
DATA_ROOT = REPO_ROOT / "data"


@dataclass(frozen=True)
class Kernel:
    """One kernel folder: its manifest and both sources."""

    suite: str
    name: str
    path: Path
    manifest: dict[str, Any] = field(hash=False, compare=False)
    ref_src: str = field(repr=False, hash=False, compare=False)
    cand_src: str = field(repr=False, hash=False, compare=False)

    @property
    def targets(self) -> tuple[str, ...]:
        return tuple(self.manifest["targets"])

    @property
    def language(self) -> str:
        return self.manifest["language"]

    def rel(self, filename: str) -> str:
        """Path of one of the kernel's files relative to the repository root (what rows record)."""
        try:
            return str((self.path / filename).relative_to(REPO_ROOT))
        except ValueError:
            return str(self.path / filename)


def manifest_problems(manifest: Any, suite: str, folder_name: str, cand_src: str | None = None) -> list[str]:
    """Everything wrong with one manifest (empty when it is valid)."""
    if not isinstance(manifest, dict):
        return ["manifest is not a mapping"]
    problems = [f"missing key {k!r}" for k in REQUIRED_KEYS if k not in manifest]
    extra = sorted(set(manifest) - set(REQUIRED_KEYS))
    if extra:
        problems.append(f"unknown keys {extra}")
    if problems:
        return problems
    if manifest["name"] != folder_name:
        problems.append(f"name {manifest['name']!r} differs from folder {folder_name!r}")
    for key in ("description", "style", "notes"):
        if not isinstance(manifest[key], str) or not manifest[key].strip():
            problems.append(f"{key} must be a non-empty string")
    if manifest["language"] not in LANGUAGES:
        problems.append(f"language {manifest['language']!r} not in {LANGUAGES}")
    targets = manifest["targets"]
    if not isinstance(targets, list):
        problems.append("targets must be a list")
        targets = []
    unknown = [t for t in targets if t not in GATE_IDS]
    if unknown:
        problems.append(f"unknown gate ids {unknown}")
    if len(set(targets)) != len(targets):
        problems.append("duplicate targets")
    if suite == "red_team" and not targets:
        problems.append("a red-team kernel must target at least one gate")
    if suite == "positive_control" and targets:
        problems.append("a trusted kernel targets no gate")
    if manifest["passes_kernelbench_loose"] not in (True, False, None):
        problems.append("passes_kernelbench_loose must be true, false or null")
    if cand_src is not None:
        uses_triton = "triton.jit" in cand_src
        if manifest["language"] == "triton" and not uses_triton:
            problems.append("language triton but cand.py has no @triton.jit kernel")
        if manifest["language"] == "torch" and uses_triton:
            problems.append("language torch but cand.py defines a Triton kernel")
    return problems


def load_kernel(folder: str | Path, suite: str) -> Kernel:
    """Load one kernel folder; raises ``ValueError`` listing every problem with it."""
    folder = Path(folder)
    missing = [f for f in ("ref.py", "cand.py", "manifest.yaml") if not (folder / f).is_file()]
    if missing:
        raise ValueError(f"{folder}: missing {missing}")
    manifest = yaml.safe_load((folder / "manifest.yaml").read_text())
    ref_src = (folder / "ref.py").read_text()
    cand_src = (folder / "cand.py").read_text()
    problems = manifest_problems(manifest, suite, folder.name, cand_src)
    if "class Model(" not in ref_src or "def get_inputs(" not in ref_src or "def get_init_inputs(" not in ref_src:
        problems.append("ref.py must define Model, get_inputs and get_init_inputs")
    if "class ModelNew(" not in cand_src:
        problems.append("cand.py must define ModelNew")
    if problems:
        raise ValueError(f"{folder}: " + "; ".join(problems))
    return Kernel(suite=suite, name=folder.name, path=folder, manifest=manifest, ref_src=ref_src,
                  cand_src=cand_src)


def load_suite(suite: str, root: str | Path | None = None) -> list[Kernel]:
    """Every kernel of a suite, sorted by name (the order of rows and tables)."""
    if suite not in SUITES:
        raise ValueError(f"suite {suite!r} not in {SUITES}")
    base = Path(root) if root is not None else DATA_ROOT / suite
    folders = sorted(p for p in base.iterdir() if p.is_dir() and (p / "manifest.yaml").exists())
    return [load_kernel(p, suite) for p in folders]


def coverage(kernels: list[Kernel]) -> dict[str, list[str]]:
    """gate id -> names of the kernels that target it (every gate present, possibly with an empty list)."""
    out: dict[str, list[str]] = {g: [] for g in GATE_IDS}
    for k in kernels:
        for t in k.targets:
            out[t].append(k.name)
    return out


def suite_problems(kernels: list[Kernel], suite: str) -> list[str]:
    """Suite-level requirements: enough kernels, every gate targeted (red team), both languages used."""
    problems = []
    if len(kernels) < MIN_KERNELS[suite]:
        problems.append(f"{suite}: {len(kernels)} kernels, need at least {MIN_KERNELS[suite]}")
    if suite == "red_team":
        untargeted = [g for g, names in coverage(kernels).items() if not names]
        if untargeted:
            problems.append(f"red_team: no kernel targets {untargeted}")
    langs = {k.language for k in kernels}
    if not set(LANGUAGES) <= langs:
        problems.append(f"{suite}: languages used {sorted(langs)}, need both {LANGUAGES}")
    return problems
