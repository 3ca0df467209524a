"""Ahead-of-time compilation of the native kernels on a machine without a GPU, and a report on the result.

``python -m lethe.kernels.gdn.native.aot --kernel k1_hopper --arch sm_90a --json out.json`` (or ``k1_blackwell``,
``k2_hopper``) compiles one kernel with
fake tensors (``cute.runtime.make_fake_compact_tensor``) for the named architecture, keeps the PTX and cubin
(``CUTE_DSL_KEEP=ptx,cubin``), and reports what the generated code says about it:

* from the PTX: the matrix instruction kinds (``mma.sync``, ``wgmma.mma_async``, ``tcgen05.mma``), TMEM
  management (``tcgen05.alloc`` / ``dealloc`` / ``relinquish_alloc_permit``) and local-memory traffic;
* from the cubin, through the ``cuobjdump`` that Triton's wheel bundles: registers, stack frame, local memory
  (spills show up as STACK/LOCAL and as ``LDL``/``STL`` in the SASS) and the SASS opcode histogram.

The architecture has to be fixed before the DSL is imported, so each compile runs in its own process
(:func:`compile_report`); the parent never imports the DSL.
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
from collections import Counter
from pathlib import Path

PTX_PATTERNS = {
    "mma_sync": r"\bmma\.sync\.",
    "wgmma": r"\bwgmma\.mma_async",
    "tcgen05_mma": r"\btcgen05\.mma(?:\.ws)?\.cta_group",
    "tcgen05_alloc": r"\btcgen05\.alloc\.",
    "tcgen05_dealloc": r"\btcgen05\.dealloc\.",
    "tcgen05_relinquish": r"\btcgen05\.relinquish_alloc_permit",
    "tcgen05_ld": r"\btcgen05\.ld\.",
    "tcgen05_st": r"\btcgen05\.st\.",
    "ld_local": r"\bld\.local\.",
    "st_local": r"\bst\.local\.",
    "fma_f32": r"\bfma\.rn\.f32\b",
}


def cuobjdump_path() -> str | None:
    """The cuobjdump bundled with the Triton wheel (reads the CUDA 13 cubins the DSL emits); None if absent."""
    try:
        import triton

        p = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
        return str(p) if p.exists() else None
    except Exception:  # pragma: no cover - environment dependent
        return None


def ptx_counts(ptx: str) -> dict[str, int]:
    """Occurrences of each instruction kind of :data:`PTX_PATTERNS` in the PTX text."""
    return {name: len(re.findall(pat, ptx)) for name, pat in PTX_PATTERNS.items()}


def tmem_columns_from_ptx(ptx: str) -> list[int]:
    """Column counts passed to ``tcgen05.alloc``: immediates in the instruction, or the constant moved into the
    register it reads (the DSL materializes the count with a ``mov.b32``/``mov.u32`` just before)."""
    cols: list[int] = []
    lines = ptx.splitlines()
    for i, line in enumerate(lines):
        if "tcgen05.alloc." not in line:
            continue
        args = line.split(";")[0].split(",")
        last = args[-1].strip() if args else ""
        if last.isdigit():
            cols.append(int(last))
            continue
        for back in range(i - 1, max(i - 40, -1), -1):
            m = re.search(rf"mov\.[bu]32\s+{re.escape(last)},\s*(\d+)", lines[back])
            if m:
                cols.append(int(m.group(1)))
                break
    return cols


def cubin_report(cubin: str) -> dict:
    """REG / STACK / LOCAL / SHARED from ``cuobjdump -res-usage`` and the SASS opcode histogram."""
    tool = cuobjdump_path()
    if tool is None:
        return {"error": "cuobjdump not found (install triton)"}
    res = subprocess.run([tool, "-res-usage", cubin], capture_output=True, text=True, check=True).stdout
    out: dict = {}
    m = re.search(r"REG:(\d+)\s+STACK:(\d+)\s+SHARED:(\d+)\s+LOCAL:(\d+)", res)
    if m:
        out.update(reg=int(m.group(1)), stack=int(m.group(2)), shared_static=int(m.group(3)),
                   local=int(m.group(4)))
    sass = subprocess.run([tool, "-sass", cubin], capture_output=True, text=True, check=True).stdout
    ops = Counter(m.group(1) for m in re.finditer(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", sass))
    out["sass_ops"] = dict(sorted(ops.items()))
    out["sass_spill_ops"] = sum(v for k, v in ops.items() if k.startswith(("LDL", "STL")))
    return out


def _compile_in_this_process(kernel: str, cfg: dict) -> dict:
    import time

    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

    F = cutlass.Float32

    def fake(*shape, dtype=F):
        return make_fake_compact_tensor(dtype, shape, assumed_align=16)

    t0 = time.perf_counter()
    if kernel == "k1_hopper":
        from .k1_hopper import K1ReverseScan

        BH, N, C, K, V = cfg["BH"], cfg["N"], cfg["C"], cfg["K"], cfg["V"]
        k1 = K1ReverseScan(K=K, V=V, C=C, BV=cfg["BV"], split=cfg["split"], has_erase=cfg["has_erase"],
                           has_dsf=cfg["has_dsf"])
        fn = cute.compile(k1, fake(BH, N, C, C), fake(BH, N, C, K), fake(BH, N, C, K), fake(BH, N, C, K),
                          fake(BH, N, K), fake(BH, N, C, V), fake(BH, K, V), fake(BH, N, K, V), fake(BH, N, C, V),
                          fake(BH, K, V), make_fake_stream())
        extra = {"smem_dynamic_bytes": k1.smem_bytes(), "threads": k1.NT}
    elif kernel == "k1_blackwell":
        from .k1_blackwell import compile_fake

        fn, extra = compile_fake(cfg)
    elif kernel == "k2_hopper":
        from .k2_hopper import compile_fake

        fn, extra = compile_fake(cfg)
    else:
        raise ValueError(kernel)
    return {"compile_s": round(time.perf_counter() - t0, 2), "ptx": fn.artifacts.PTX, **extra}


def compile_report(kernel: str, arch: str, cfg: dict, dump_dir: str | None = None, timeout: int = 900) -> dict:
    """Compile ``kernel`` for ``arch`` in a fresh process with fake tensors and return the report dict."""
    own = dump_dir is None
    dump = dump_dir or tempfile.mkdtemp(prefix="cute_aot_")
    env = dict(os.environ, CUTE_DSL_ARCH=arch, CUTE_DSL_KEEP="ptx,cubin", CUTE_DSL_DUMP_DIR=dump,
               OMP_NUM_THREADS="1")
    with tempfile.NamedTemporaryFile("r", suffix=".json", delete=False) as fh:
        out_json = fh.name
    cmd = [sys.executable, "-m", "lethe.kernels.gdn.native.aot", "--kernel", kernel, "--arch", arch,
           "--cfg", json.dumps(cfg), "--json", out_json, "--inner"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"AOT compile of {kernel} for {arch} failed:\n{proc.stderr[-4000:]}")
    rep = json.loads(Path(out_json).read_text())
    os.unlink(out_json)
    ptx_files = sorted(glob.glob(os.path.join(dump, "*.ptx")), key=os.path.getmtime)
    cubins = sorted(glob.glob(os.path.join(dump, "*.cubin")), key=os.path.getmtime)
    ptx = rep.pop("ptx") or (Path(ptx_files[-1]).read_text() if ptx_files else "")
    rep.update(kernel=kernel, arch=arch, cfg=cfg, ptx_target=_ptx_target(ptx), ptx_counts=ptx_counts(ptx),
               tmem_alloc_columns=tmem_columns_from_ptx(ptx))
    rep["cubin"] = cubin_report(cubins[-1]) if cubins else {"error": "no cubin dumped"}
    if own:
        for f in ptx_files + cubins:
            os.unlink(f)
    return rep


def write_k2_hopper_results(out_dir: str) -> Path:
    """Compile the Hopper K2 (:mod:`.k2_hopper`) for d_v 64 and 128 (C 64, d_k 128) and write the report
    ``k2_hopper_aot.json`` (rows in the schema of ``aot.json``, so :func:`.render.aot_table` renders it) and
    its provenance ``k2_hopper_aot_provenance.json`` into ``out_dir``."""
    from lethe import provenance

    rows = []
    for V in (64, 128):
        r = compile_report("k2_hopper", "sm_90a", dict(L=6, K=128, V=V, C=64))
        r["status"] = "compiled, executed on H200"  # results/native/bench.json (K2 stages, 2026-11-29)
        rows.append(r)
    out = Path(out_dir) / "k2_hopper_aot.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rows": rows}, indent=1, sort_keys=True) + "\n")
    provenance.write(out.parent / "k2_hopper_aot_provenance.json",
                     command="python -m lethe.kernels.gdn.native.aot --k2-hopper-results " + str(out_dir),
                     experiment="native-k2-hopper-aot")
    return out


def _ptx_target(ptx: str) -> str | None:
    m = re.search(r"^\.target\s+(\S+)", ptx, re.M)
    return m.group(1) if m else None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernel", choices=["k1_hopper", "k1_blackwell", "k2_hopper"])
    ap.add_argument("--arch")
    ap.add_argument("--cfg", default="{}")
    ap.add_argument("--json")
    ap.add_argument("--inner", action="store_true", help="compile here (the env is already set)")
    ap.add_argument("--k2-hopper-results", metavar="DIR",
                    help="write k2_hopper_aot.json + provenance (d_v 64 and 128) into DIR")
    a = ap.parse_args(argv)
    if a.k2_hopper_results:
        write_k2_hopper_results(a.k2_hopper_results)
        return 0
    if not (a.kernel and a.arch and a.json):
        ap.error("--kernel, --arch and --json are required")
    cfg = json.loads(a.cfg)
    if a.inner:
        rep = _compile_in_this_process(a.kernel, cfg)
    else:
        rep = compile_report(a.kernel, a.arch, cfg)
    Path(a.json).write_text(json.dumps(rep, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
