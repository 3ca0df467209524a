"""Compile-only checks of CuTe DSL kernels for Blackwell (sm_100a) on a CPU host.

The native GDN backward is meant to have Blackwell (tcgen05 / TMEM) versions that we cannot run here. We can
compile them, though: the CuTe DSL traces with fake tensors (no device), lowers to PTX for
``CUTE_DSL_ARCH=sm_100a`` and assembles a cubin with its embedded toolchain. This module reads the generated code
and reports what the hardware would be asked for:

* TMEM columns: the operand of every ``tcgen05.alloc`` in the PTX. The number of allocations is reported too, so
  the "one allocation" rule can be checked;
* static counts of ``tcgen05.mma``, ``tcgen05.alloc`` / ``dealloc`` / ``relinquish_alloc_permit``, and of TMEM
  loads and stores;
* registers and spills: ``cuobjdump -res-usage`` on the cubin. The cuobjdump comes from a Triton wheel (the newest
  one available under cache/venvs, because the DSL's cubin is built with CUDA 13).

Compiled, not executed: no sm_100 GPU exists here, so nothing says these kernels are correct or fast.

Run the probe (a small tcgen05 GEMM, :mod:`lethe.aot.cute_probe`) with
``python -m lethe.aot.cute_dsl --out results/aot/cute_probe.json``; the work happens in the side venv that holds
``nvidia-cutlass-dsl==4.8.1`` (created on first use).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from lethe.provenance import REPO_ROOT

CUTLASS_DSL = "nvidia-cutlass-dsl==4.8.1"
VENV_NAME = "cutlass-dsl-4.8.1"

_PRED = r"^\s*(?:@!?%\w+\s+)?"
_ALLOC_RE = re.compile(_PRED + r"tcgen05\.alloc\.[\w:.]+\s+\[[^\]]+\],\s*(\d+|%\w+)\s*;", re.M)
_COUNTS = {
    "tcgen05_mma": re.compile(_PRED + r"tcgen05\.mma\b", re.M),
    "tcgen05_alloc": re.compile(_PRED + r"tcgen05\.alloc\b", re.M),
    "tcgen05_dealloc": re.compile(_PRED + r"tcgen05\.dealloc\b", re.M),
    "tcgen05_relinquish": re.compile(_PRED + r"tcgen05\.relinquish_alloc_permit\b", re.M),
    "tcgen05_ld": re.compile(_PRED + r"tcgen05\.ld\b", re.M),
    "tcgen05_st": re.compile(_PRED + r"tcgen05\.st\b", re.M),
    "wgmma": re.compile(_PRED + r"wgmma\.mma_async\b", re.M),
}


def ptx_tmem_report(ptx: str) -> dict[str, Any]:
    """TMEM allocations and tcgen05 instruction counts of a PTX module (static counts, loops not unrolled).

    ``tmem_columns`` is the sum of the constant operands of ``tcgen05.alloc``; an allocation whose size is not
    a literal makes it None (unknown, not zero).
    """
    counts = {k: len(rx.findall(ptx)) for k, rx in _COUNTS.items()}
    sizes = []
    for operand in _ALLOC_RE.findall(ptx):
        if operand.isdigit():
            sizes.append(int(operand))
            continue
        # a register operand: accept it only when a single move of an immediate defines it
        defs = re.findall(rf"^\s*mov\.[bus]32\s+{re.escape(operand)},\s*(\d+)\s*;", ptx, re.M)
        if len(defs) == 1:
            sizes.append(int(defs[0]))
    known = len(sizes) == counts["tcgen05_alloc"]
    target = re.search(r"^\s*\.target\s+(\S+)", ptx, re.M)
    return {
        "ptx_target": target.group(1) if target else None,
        "tmem_alloc_columns": sizes,
        "tmem_columns": sum(sizes) if known else None,
        "counts": counts,
    }


def find_cuobjdump() -> str | None:
    """A cuobjdump that reads CUDA 13 cubins: the newest Triton wheel's, among the project's and the side venvs'."""
    candidates = sorted(glob.glob(str(REPO_ROOT / "cache" / "venvs" / "triton-*" / "lib" / "python*" /
                                      "site-packages" / "triton" / "backends" / "nvidia" / "bin" / "cuobjdump")),
                        key=lambda p: [int(x) for x in re.search(r"triton-([\d.]+)", p).group(1).split(".")],
                        reverse=True)
    try:
        import triton

        candidates.append(os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump"))
    except ImportError:
        pass
    for path in candidates:
        if os.access(path, os.X_OK):
            return path
    return None


def cubin_usage(cubin_path: str) -> dict[str, Any] | None:
    """REG / STACK / SHARED / LOCAL per kernel function of a cubin (None when no cuobjdump can read it)."""
    tool = find_cuobjdump()
    if tool is None:
        return None
    out = subprocess.run([tool, "-res-usage", cubin_path], capture_output=True, text=True, check=False)
    funcs = {}
    name = None
    for line in out.stdout.splitlines():
        m = re.match(r"\s*Function\s+(\S+):", line)
        if m:
            name = m.group(1)
            continue
        m = re.search(r"REG:(\d+)\s+STACK:(\d+)\s+SHARED:(\d+)\s+LOCAL:(\d+)", line)
        if m and name:
            funcs[name] = dict(zip(("REG", "STACK", "SHARED", "LOCAL"), map(int, m.groups()), strict=True))
    if not funcs:
        return {"cuobjdump": tool, "error": (out.stderr or out.stdout).strip()[:300]}
    return {"cuobjdump": tool, "functions": funcs}


def compile_probe(tile_n: int, stages: int, dump_dir: str) -> dict[str, Any]:
    """Trace and compile the probe kernel for sm_100a with fake tensors (runs inside the CuTe DSL venv)."""
    os.environ["CUTE_DSL_ARCH"] = "sm_100a"
    os.environ["CUTE_DSL_KEEP"] = "ptx,cubin"
    os.environ["CUTE_DSL_DUMP_DIR"] = dump_dir
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_compact_tensor

    from lethe.aot.cute_probe import make_probe

    m, n, k = 1024, 1024, 512
    host, cols_planned = make_probe(tile_n=tile_n, stages=stages)
    # K-major A (m, k) and B (n, k), row-major C (m, n): the innermost mode is the stride-1 one.
    a = make_fake_compact_tensor(cutlass.BFloat16, (m, k), stride_order=(1, 0), assumed_align=16)
    b = make_fake_compact_tensor(cutlass.BFloat16, (n, k), stride_order=(1, 0), assumed_align=16)
    c = make_fake_compact_tensor(cutlass.BFloat16, (m, n), stride_order=(1, 0), assumed_align=16)
    # The DSL reads its environment once per process, so every probe dumps into the same folder: tell this
    # compile's files apart by what appeared during it.
    # (Names repeat across tile shapes, so "appeared" means written since this compile started.)
    start = time.time() - 1.0
    compiled = cute.compile(host, a, b, c)
    ptx = None
    artifacts = getattr(compiled, "artifacts", None)
    if artifacts is not None:
        ptx = getattr(artifacts, "PTX", None)
    new = sorted(p for p in glob.glob(os.path.join(dump_dir, "**", "*"), recursive=True)
                 if os.path.isfile(p) and os.path.getmtime(p) >= start)
    if not ptx:
        ptx_files = [p for p in new if p.endswith(".ptx")]
        ptx = Path(ptx_files[-1]).read_text() if ptx_files else ""
    cubins = [p for p in new if p.endswith(".cubin")]
    report = {
        "kernel": "lethe.aot.cute_probe (tcgen05 GEMM tile)",
        "target": "sm_100a",
        "tile": [128, tile_n, 64],
        "stages": stages,
        "tmem_columns_planned": cols_planned,
        **ptx_tmem_report(ptx),
        "cubin": cubin_usage(cubins[-1]) if cubins else None,
        "cutlass_dsl": CUTLASS_DSL,
    }
    return report


def judge(report: dict[str, Any]) -> list[str]:
    """The TMEM discipline and limit checks for a probe report; empty when everything holds."""
    problems = []
    cols = report["tmem_columns"]
    if cols is None:
        problems.append("TMEM allocation size not a literal in the PTX")
    elif cols > 512:
        problems.append(f"tensor memory {cols} columns > 512 on sm_100a")
    counts = report["counts"]
    for key in ("tcgen05_alloc", "tcgen05_dealloc", "tcgen05_relinquish"):
        if counts[key] != 1:
            problems.append(f"expected exactly one {key}, found {counts[key]}")
    if counts["tcgen05_mma"] == 0:
        problems.append("no tcgen05.mma in the PTX")
    cubin = report.get("cubin") or {}
    for name, use in (cubin.get("functions") or {}).items():
        if use["REG"] > 255:
            problems.append(f"{name}: {use['REG']} registers > 255")
    return problems


def _child(args: argparse.Namespace) -> int:
    rows = []
    with tempfile.TemporaryDirectory(prefix="lethe_cute_") as dump:
        for tile_n, stages in ((128, 3), (256, 4)):
            try:
                rep = compile_probe(tile_n, stages, dump)
                rep["violations"] = judge(rep)
            except Exception as exc:  # noqa: BLE001 - report, do not hide, a failed trace or compile
                rep = {"tile": [128, tile_n, 64], "stages": stages, "error": f"{type(exc).__name__}: {exc}"[:800]}
            if rep.get("cubin") and rep["cubin"].get("cuobjdump"):
                rep["cubin"]["cuobjdump"] = os.path.relpath(rep["cubin"]["cuobjdump"], REPO_ROOT)
            rows.append(rep)
            print(json.dumps(rep, sort_keys=True), flush=True)
            if os.environ.get("LETHE_CUTE_KEEP"):
                for f in glob.glob(os.path.join(dump, "**", "*.ptx"), recursive=True):
                    Path(os.environ["LETHE_CUTE_KEEP"]).mkdir(parents=True, exist_ok=True)
                    Path(os.environ["LETHE_CUTE_KEEP"], os.path.basename(f)).write_text(Path(f).read_text())
    Path(args.out).write_text(json.dumps({"compiled_not_executed": True, "probes": rows}, indent=1,
                                         sort_keys=True) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="CuTe DSL sm_100a compile check (no GPU)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--provenance")
    parser.add_argument("--in-venv", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.in_venv:
        return _child(args)
    from lethe.aot.venvs import ensure_env

    py = ensure_env(VENV_NAME, [CUTLASS_DSL], no_deps=False)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO_ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    rc = subprocess.run([str(py), "-m", "lethe.aot.cute_dsl", "--out", args.out, "--in-venv"],
                        env=env, check=False).returncode
    if rc == 0 and args.provenance:
        from lethe.provenance import write

        write(args.provenance, command=" ".join(sys.argv), cutlass_dsl=CUTLASS_DSL, target="sm_100a",
              executed=False)
    return rc


if __name__ == "__main__":
    sys.exit(main())
