"""The trusted corpus: kernels known to be correct, for measuring how often the verifier fails a correct kernel.

Two kinds of member, both paired with a KernelBench problem (its ``Model``, ``get_inputs`` and
``get_init_inputs`` are the reference, at KernelBench's own sizes):

* ``self``: for every problem, the candidate ``ModelNew = Model``, i.e. the reference's own float32 code. It is
  generated here, at build time, from the problem file; no copy of a KernelBench file is committed.
* ``hand``: the kernels of ``data/trusted/kernels/*.py``, written differently from the reference (hand-written
  reductions and scans, two-pass and Welford statistics, max-shifted softmax, fused elementwise chains, blocked
  matmuls, Triton kernels for the CPU interpreter). Each file names its problem in a module-level
  ``PROBLEM = "level1/23_Softmax.py"``.

Budget. The verifier runs the float64 reference about forty times per problem (random, adversarial, gradient,
shape and long-axis probes, finite differences), so a problem whose one float64 forward is already large costs
minutes to hours on a CPU. :func:`census` measures each problem's size without computing anything (inputs,
model and forward on torch's ``meta`` device; matmul and convolution FLOPs from torch's FLOP counter), and
:func:`budget_reason` excludes a problem, with its reason, when one forward moves more elements or does more
FLOPs than the budget allows. Excluded problems stay in the corpus manifest; nothing is dropped silently.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from lethe.provenance import REPO_ROOT

#: Where the paper-era KernelBench checkout sits beside a developer's worktree (read-only third-party code).
DEFAULT_KB_ROOT = REPO_ROOT.parent / "shared" / "third_party" / "kernelbench-48642c5c"
HAND_DIR = REPO_ROOT / "data" / "trusted" / "kernels"
CENSUS_VERSION = "lethe.trusted.census/1"
LEVELS = (1, 2, 3)
_PROBLEM_FILE = re.compile(r"^(\d+)_(.+)\.py$")


@dataclass(frozen=True)
class Budget:
    """What one float64 forward of a reference may cost for the problem to be run at all.

    ``max_numel``: elements of all floating inputs and outputs of one forward together (float64 copies of each
    live in the reference process for every probe). ``max_flops``: matmul/convolution FLOPs of one forward.
    """

    max_numel: int = 1 << 25
    max_flops: float = 2e10


def kb_levels_root(root: str | Path) -> Path:
    """The folder holding ``level1/``..``level3/``: the checkout's ``KernelBench/`` or the folder itself."""
    root = Path(root)
    return root / "KernelBench" if (root / "KernelBench" / "level1").is_dir() else root


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def list_problems(root: str | Path, levels: Iterable[int] = LEVELS) -> list[dict[str, Any]]:
    """Every problem file of the given levels, ordered by (level, problem number): the corpus's fixed order."""
    base = kb_levels_root(root)
    out = []
    for level in levels:
        folder = base / f"level{level}"
        if not folder.is_dir():
            raise FileNotFoundError(f"no KernelBench level folder {folder}")
        for path in folder.iterdir():
            m = _PROBLEM_FILE.match(path.name)
            if not m:
                continue
            src = path.read_text(encoding="utf-8")
            out.append({"problem": f"level{level}/{path.name}", "level": level, "number": int(m.group(1)),
                        "name": m.group(2), "path": str(path), "sha256": _sha(src)})
    out.sort(key=lambda p: (p["level"], p["number"]))
    return out


def problem_id(problem: str) -> str:
    """``level1/23_Softmax.py`` -> ``L1/23_Softmax``."""
    level, name = problem.split("/", 1)
    return f"L{level.removeprefix('level')}/{name.removesuffix('.py')}"


def self_candidate(ref_src: str) -> str:
    """The reference's own float32 code as a candidate: the problem file plus ``ModelNew = Model``."""
    return ref_src.rstrip("\n") + "\n\n\n# Trusted candidate: the reference's own code, run in float32.\nModelNew = Model\n"


def census(ref_src: str, filename: str = "<problem>") -> dict[str, Any]:
    """Sizes of one forward of the problem, measured on torch's meta device (no values are computed).

    Returns input/output/parameter element counts, the FLOPs torch's counter attributes (matmuls,
    convolutions, attention) and ``error`` when the problem cannot be traced on the meta device (a data-dependent
    ``.item()``, a missing package); such a problem is then judged by the wall-clock budget alone.
    """
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    out: dict[str, Any] = {"input_numel": None, "output_numel": None, "param_numel": None, "flops": None,
                           "error": ""}
    ns: dict[str, Any] = {"__name__": "lethe_trusted_problem"}
    try:
        exec(compile(ref_src, filename, "exec"), ns)  # noqa: S102 - KernelBench reference code, trusted
        with torch.device("meta"):
            inputs = ns["get_inputs"]()
            init = ns["get_init_inputs"]()
            out["input_numel"] = sum(int(t.numel()) for t in inputs
                                     if isinstance(t, torch.Tensor) and t.is_floating_point())
            model = ns["Model"](*init)
            out["param_numel"] = sum(int(p.numel()) for p in model.parameters())
            with FlopCounterMode(display=False) as counter:
                res = model(*inputs)
        res = res if isinstance(res, (tuple, list)) else [res]
        out["output_numel"] = sum(int(t.numel()) for t in res if isinstance(t, torch.Tensor))
        out["flops"] = float(counter.get_total_flops())
    except Exception as exc:  # noqa: BLE001 - a problem the meta device cannot trace is recorded, not fatal
        out["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
    return out


def budget_reason(c: Mapping[str, Any], budget: Budget) -> str:
    """Why a problem is excluded under ``budget`` ("" when it is run)."""
    if c.get("input_numel") is None:
        return f"not traceable on the meta device ({c.get('error')}); size unknown"
    numel = int(c["input_numel"]) + int(c.get("output_numel") or 0)
    if numel > budget.max_numel:
        return f"one forward moves {numel:,} elements (> {budget.max_numel:,})"
    if (c.get("flops") or 0) > budget.max_flops:
        return f"one forward costs {c['flops']:.3g} matmul/conv FLOPs (> {budget.max_flops:.3g})"
    return ""


def load_census(problems: list[dict[str, Any]], cache_path: str | Path | None) -> dict[str, dict[str, Any]]:
    """Census per problem, reusing cached entries whose problem file hash matches (the census execs the model
    on the meta device, which for level-3 networks takes seconds each)."""
    cached: dict[str, Any] = {}
    if cache_path and Path(cache_path).exists():
        doc = json.loads(Path(cache_path).read_text())
        if doc.get("census_version") == CENSUS_VERSION:
            cached = {m["problem"]: m for m in doc.get("members", []) if m.get("kind") == "self"}
    out = {}
    for p in problems:
        hit = cached.get(p["problem"])
        if hit and hit.get("problem_sha256") == p["sha256"] and "census" in hit:
            out[p["problem"]] = hit["census"]
        else:
            out[p["problem"]] = census(Path(p["path"]).read_text(encoding="utf-8"), p["path"])
    return out


def hand_kernels(folder: str | Path = HAND_DIR) -> list[dict[str, Any]]:
    """The hand-written trusted kernels, sorted by file name, each with the problem its ``PROBLEM`` names."""
    out = []
    for path in sorted(Path(folder).glob("*.py")):
        src = path.read_text(encoding="utf-8")
        problem = None
        doc = ""
        tree = ast.parse(src)
        doc = (ast.get_docstring(tree) or "").strip().splitlines()
        for node in tree.body:
            if (isinstance(node, ast.Assign) and len(node.targets) == 1
                    and getattr(node.targets[0], "id", None) == "PROBLEM" and isinstance(node.value, ast.Constant)):
                problem = node.value.value
        if not problem:
            raise ValueError(f"{path} names no PROBLEM")
        out.append({"name": path.stem, "path": str(path), "problem": problem, "candidate": src,
                    "summary": doc[0] if doc else "", "triton": "triton" in src})
    return out


def build(root: str | Path = DEFAULT_KB_ROOT, *, levels: Iterable[int] = LEVELS, budget: Budget = Budget(),
          hand_dir: str | Path = HAND_DIR, census_cache: str | Path | None = None) -> dict[str, Any]:
    """The corpus: ``members`` (every candidate with its problem, census and exclusion reason) and ``items``
    (what the runner verifies), in run order: level first, then input size, then problem number, the
    problem's own code before the hand-written kernels of that problem."""
    levels = tuple(levels)
    problems = list_problems(root, levels)
    by_problem = {p["problem"]: p for p in problems}
    sizes = load_census(problems, census_cache)
    hands = [h for h in hand_kernels(hand_dir) if int(h["problem"].split("/")[0].removeprefix("level")) in levels]
    for h in hands:
        if h["problem"] not in by_problem:
            raise ValueError(f"{h['path']}: PROBLEM {h['problem']!r} is not a KernelBench problem here")
    members = []
    for p in problems:
        ref_src = Path(p["path"]).read_text(encoding="utf-8")
        c = sizes[p["problem"]]
        reason = budget_reason(c, budget)
        base = {"problem": p["problem"], "problem_sha256": p["sha256"], "level": p["level"], "number": p["number"],
                "census": c, "excluded": reason}
        members.append({**base, "id": problem_id(p["problem"]), "kind": "self", "summary": "ModelNew = Model",
                        "reference": ref_src, "candidate": self_candidate(ref_src)})
        for h in (h for h in hands if h["problem"] == p["problem"]):
            members.append({**base, "id": f"{problem_id(p['problem'])}:{h['name']}", "kind": "hand",
                            "summary": h["summary"], "reference": ref_src, "candidate": h["candidate"],
                            "kernel_path": str(Path(h["path"]).relative_to(REPO_ROOT))
                            if Path(h["path"]).is_relative_to(REPO_ROOT) else h["path"]})

    def order(m: Mapping[str, Any]) -> tuple:
        n = m["census"].get("input_numel")
        return (m["level"], n if n is not None else float("inf"), m["number"], m["kind"] != "self", m["id"])

    members.sort(key=order)
    items = [{"id": m["id"], "reference": m["reference"], "candidate": m["candidate"], "op_class": m["kind"]}
             for m in members if not m["excluded"]]
    return {"members": members, "items": items, "budget": asdict(budget), "levels": list(levels)}


def manifest(corpus: Mapping[str, Any], kb_commit: str = "") -> dict[str, Any]:
    """The committed description of a corpus: every member without its sources (hashes instead)."""
    rows = []
    for m in corpus["members"]:
        r = {k: v for k, v in m.items() if k not in ("reference", "candidate")}
        r["cand_sha256"] = _sha(m["candidate"])
        r["ref_sha256"] = _sha(m["reference"])
        rows.append(r)
    return {"census_version": CENSUS_VERSION, "kernelbench_commit": kb_commit, "budget": corpus["budget"],
            "levels": corpus["levels"], "members": rows}


def kb_commit(root: str | Path) -> str:
    """The commit recorded beside the checkout (``COMMIT``), or ""."""
    f = Path(root) / "COMMIT"
    return f.read_text().strip() if f.exists() else ""
