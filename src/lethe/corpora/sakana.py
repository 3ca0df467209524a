"""Second corpus (SakanaAI AI-CUDA-Engineer archive): turn a native-CUDA row into a ModelNew candidate.

A row holds a ``torch/extension.h`` source whose ``PYBIND11_MODULE`` binds one host function as ``forward``,
and a KernelBench-style reference ``Model``. The candidate made here:

- removes the ``PYBIND11_MODULE`` block and lets ``torch.utils.cpp_extension.load_inline`` bind the host
  function instead (``functions=[name]``, with a C++ declaration parsed from its definition);
- defines ``ModelNew`` as a subclass of a private copy of the reference ``Model``, so it registers the very same
  parameters in the same order and, under the same seed, gets the same initial values;
- calls the host function with the forward inputs followed by the module's parameters in the order ``__init__``
  assigned them, a submodule's parameters at the submodule's place (the archive's functional convention:
  ``forward(x, conv_weight, conv_bias, bias)`` for ``self.conv = Conv2d(...); self.bias = Parameter(...)``, which
  ``Module.parameters()`` would list as bias first), and non-tensor host arguments from same-named attributes.

The CUDA source is compiled lazily, on the first forward, so making and importing the candidate never needs a
GPU or a compiler; the verifier's build step compiles it up front through ``_ext`` (:data:`BUILD_HOOK`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lethe.corpora.classify import classify

_PYBIND = re.compile(r"PYBIND11_MODULE\s*\(\s*TORCH_EXTENSION_NAME\s*,\s*(\w+)\s*\)\s*\{")
_DEF = re.compile(r"\.def\s*\(\s*\"forward\"\s*,\s*&?\s*([\w:]+)")


#: How the verifier's build step (lethe.verifier.worker:build_candidate) recognises a candidate made here and
#: which module-level function of it builds the extension. Changing the template text changes every candidate's
#: hash, and with it the uids of committed records (lethe.foreign.ingest), so the hook is named here instead.
TEMPLATE_MARK = "# ---- candidate built from the archive's CUDA source (lethe.corpora.sakana) ----"
BUILD_HOOK = "_ext"


class ConversionError(ValueError):
    """The row's CUDA source cannot be mapped onto a ModelNew (the reason is the message)."""


def _block_end(src: str, open_brace: int) -> int:
    """Index just past the brace that closes the one at ``open_brace`` (strings and comments are rare here)."""
    depth = 0
    for i in range(open_brace, len(src)):
        if src[i] == "{":
            depth += 1
        elif src[i] == "}":
            depth -= 1
            if depth == 0:
                return i + 1
    raise ConversionError("unbalanced braces in PYBIND11_MODULE block")


def strip_pybind(cuda_src: str) -> tuple[str, str]:
    """The source without its PYBIND11_MODULE block, and the name of the host function bound as forward."""
    m = _PYBIND.search(cuda_src)
    if not m:
        raise ConversionError("no PYBIND11_MODULE block")
    end = _block_end(cuda_src, m.end() - 1)
    block = cuda_src[m.start():end]
    d = _DEF.search(block)
    if not d:
        raise ConversionError("PYBIND11_MODULE does not bind 'forward'")
    return cuda_src[: m.start()] + cuda_src[end:], d.group(1).split("::")[-1]


def host_signature(src: str, name: str) -> tuple[str, list[tuple[str, str]]]:
    """Return type and (type, name) arguments of the host function's definition."""
    m = re.search(r"([\w:<>]+(?:\s*[&*])?)\s+" + re.escape(name) + r"\s*\(([^)]*)\)\s*\{", src)
    if not m:
        raise ConversionError(f"definition of host function {name!r} not found")
    args = []
    for raw in filter(None, (a.strip() for a in m.group(2).split(","))):
        raw = raw.split("=")[0].strip()  # default values do not change the declaration's meaning here
        am = re.match(r"(.*?)(\w+)$", raw)
        if not am:
            raise ConversionError(f"cannot parse argument {raw!r}")
        args.append((am.group(1).strip(), am.group(2)))
    return m.group(1).strip(), args


def _is_tensor(ctype: str) -> bool:
    return bool(re.search(r"\b(?:torch|at)::Tensor\b", ctype))


def _is_optional_tensor(ctype: str) -> bool:
    return "optional" in ctype and _is_tensor(ctype)


def to_candidate(cuda_src: str, reference_src: str, *, ext_name: str | None = None) -> str:
    """The Python source of a ModelNew that runs ``cuda_src`` through load_inline."""
    body, fn = strip_pybind(cuda_src)
    ret, args = host_signature(body, fn)
    decl = f"{ret} {fn}({', '.join(f'{t} {n}' for t, n in args)});"
    kinds = ["tensor" if _is_tensor(t) and not _is_optional_tensor(t) else "opt_tensor" if _is_optional_tensor(t)
             else "scalar" for t, _ in args]
    if not reference_src or "class Model" not in reference_src:
        raise ConversionError("reference has no class Model")
    ext_name = ext_name or "sakana_" + hashlib.sha256(cuda_src.encode()).hexdigest()[:16]
    ref = re.sub(r"\bclass\s+Model\s*\(", "class _SakanaReferenceParams(", reference_src, count=1)
    ref = re.sub(r"super\(\s*Model\s*,\s*self\s*\)", "super()", ref)
    arg_spec = json.dumps([[n, k] for (_, n), k in zip(args, kinds, strict=True)])
    return f'''{ref}

# ---- candidate built from the archive's CUDA source (lethe.corpora.sakana) ----
import torch as _torch
from torch.utils.cpp_extension import load_inline as _load_inline

_CUDA_SRC = {body!r}
_CPP_DECL = {decl!r}
_ARGS = {arg_spec}
_EXT = None


def _prebuilt(name):
    # A build of exactly this source already in the shared extension cache (the name is the source's hash):
    # load the binary instead of asking torch to re-check the build, and say on stderr which path was taken.
    import importlib.machinery
    import importlib.util
    import os
    root = os.environ.get("TORCH_EXTENSIONS_DIR")
    so = os.path.join(root, name, name + ".so") if root else ""
    if not so or not os.path.exists(so):
        return None
    loader = importlib.machinery.ExtensionFileLoader(name, so)
    spec = importlib.util.spec_from_file_location(name, so, loader=loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def _ext():
    global _EXT
    if _EXT is None:
        import sys
        import time
        t0 = time.perf_counter()
        _EXT = _prebuilt({ext_name!r})
        how = "prebuilt"
        if _EXT is None:
            how = "load_inline"
            _EXT = _load_inline(name={ext_name!r}, cpp_sources=_CPP_DECL, cuda_sources=_CUDA_SRC,
                                functions=[{fn!r}], verbose=False)
        print(f"[lethe-ext] {ext_name} via {{how}} in {{time.perf_counter() - t0:.2f}} s", file=sys.stderr)
    return _EXT


class ModelNew(_SakanaReferenceParams):
    """Same parameters as Model (inherited __init__); forward runs the archive's CUDA host function."""

    def __setattr__(self, name, value):
        # Module.parameters() lists a module's own parameters before its submodules', whatever order __init__
        # assigned them in (Conv2d then a bias -> bias, conv.weight, conv.bias); the archive's host functions
        # take them in assignment order (conv_weight, conv_bias, bias), so record that order.
        if isinstance(value, (_torch.nn.Parameter, _torch.nn.Module)):
            order = self.__dict__.setdefault("_lethe_assign_order", [])
            if name not in order:
                order.append(name)
        super().__setattr__(name, value)

    def _params_in_assignment_order(self):
        out, seen = [], set()
        for name in self.__dict__.get("_lethe_assign_order", []):
            obj = getattr(self, name, None)
            items = [obj] if isinstance(obj, _torch.nn.Parameter) else (
                list(obj.parameters()) if isinstance(obj, _torch.nn.Module) else [])
            for prm in items:
                if id(prm) not in seen:
                    seen.add(id(prm))
                    out.append(prm)
        # anything registered another way (register_parameter, containers) keeps Module.parameters() order, last
        out.extend(prm for prm in self.parameters() if id(prm) not in seen)
        return out

    def forward(self, *inputs):
        params = self._params_in_assignment_order()
        call = []
        feed = list(inputs) + params
        for name, kind in _ARGS:
            if kind in ("tensor", "opt_tensor"):
                if feed:
                    call.append(feed.pop(0))
                elif kind == "opt_tensor":
                    call.append(None)
                else:
                    raise TypeError(f"no tensor left for host argument {{name!r}}")
            else:
                if not hasattr(self, name):
                    raise TypeError(f"host argument {{name!r}} has no module attribute to come from")
                call.append(getattr(self, name))
        return getattr(_ext(), {fn!r})(*call)
'''


def load_rows(path: str | Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _truthy(v: Any) -> bool:
    return v is True or str(v).strip().lower() == "true"


def to_item(row: Mapping[str, Any]) -> dict[str, Any]:
    """An audit item from one archive row (the paper's filter is applied by :func:`select`)."""
    ref = row.get("PyTorch_Code_Module") or ""
    try:
        cand, err = to_candidate(row.get("CUDA_Code") or "", ref), None
    except ConversionError as exc:
        cand, err = None, f"ConversionError: {exc}"
    speed = row.get("CUDA_Speedup_Native")
    try:
        speed = float(speed) if speed not in (None, "", "None") else None
    except ValueError:
        speed = None
    rid = f"L{row.get('Level_ID')}-T{row.get('Task_ID')}-{row.get('Kernel_Name')}"
    return {
        "id": rid,
        "op_class": classify(ref),
        "reference": ref,
        "candidate": cand,
        "candidate_turn": None,
        # The archive's acceptance signal is Correct; speedup is carried for information only.
        "final_speedup": speed if _truthy(row.get("Correct")) else 0.0,
        "extract_error": err,
    }


def select(rows: list[Mapping[str, Any]], level: int = 1) -> list[Mapping[str, Any]]:
    """The paper's population: level ``level`` rows with Correct == True."""
    return [r for r in rows if str(r.get("Level_ID")) == str(level) and _truthy(r.get("Correct"))]


def materialise_kb_layout(rows: list[Mapping[str, Any]], out: str | Path) -> list[dict[str, Any]]:
    """Write rows as a KernelBench run (``out/run/level_L_problem_T_sample_S_kernel.py``) against their own
    references (``out/problems/levelL/T_<Op_Name>.py``; the archive's reference of a task), so that ``lethe audit
    --kernelbench out/problems out/run`` and KernelBench's own check judge exactly the same pairs. ``S`` is the
    row's rank among its task's rows sorted by Kernel_Name. Returns the manifest (also ``out/run/manifest.jsonl``):
    one entry per row, with the conversion error of a row that has no candidate (no kernel file is written)."""
    out = Path(out)
    by_task: dict[tuple[int, int], list[Mapping[str, Any]]] = {}
    for r in rows:
        by_task.setdefault((int(r["Level_ID"]), int(r["Task_ID"])), []).append(r)
    manifest = []
    for (level, task), group in sorted(by_task.items()):
        refs = {r.get("PyTorch_Code_Module") or "" for r in group}
        if len(refs) != 1:
            raise ValueError(f"level {level} task {task}: rows disagree on the reference")
        pdir = out / "problems" / f"level{level}"
        pdir.mkdir(parents=True, exist_ok=True)
        op = str(group[0]["Op_Name"])
        (pdir / f"{op if op.startswith(f'{task}_') else f'{task}_{op}'}.py").write_text(refs.pop(), encoding="utf-8")
        run = out / "run"
        run.mkdir(parents=True, exist_ok=True)
        for s, r in enumerate(sorted(group, key=lambda r: str(r["Kernel_Name"]))):
            it = to_item(r)
            kid = f"level_{level}_problem_{task}_sample_{s}"
            if it["candidate"]:
                (run / f"{kid}_kernel.py").write_text(it["candidate"], encoding="utf-8")
            manifest.append({"id": kid, "archive_id": it["id"], "kernel_name": r["Kernel_Name"], "level": level,
                             "task": task, "correct": _truthy(r.get("Correct")), "op_class": it["op_class"],
                             "cuda_sha256": hashlib.sha256((r.get("CUDA_Code") or "").encode()).hexdigest(),
                             "conversion_error": it["extract_error"]})
    (out / "run" / "manifest.jsonl").write_text("".join(json.dumps(m, sort_keys=True) + "\n" for m in manifest))
    return manifest


if __name__ == "__main__":
    import sys

    if len(sys.argv) != 4 or sys.argv[1] != "materialise":
        sys.exit("usage: python -m lethe.corpora.sakana materialise SUBSET.jsonl OUT")
    m = materialise_kb_layout(load_rows(sys.argv[2]), sys.argv[3])
    print(json.dumps({"rows": len(m), "candidates": sum(1 for x in m if not x["conversion_error"])}))
