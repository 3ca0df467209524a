"""Ahead-of-time compile of the Blackwell K2 kernel (:mod:`.k2_blackwell`) on the CPU -- compiled, not executed.

Same route and same inspection as :mod:`.aot` (whose PTX / cubin helpers it reuses): the DSL's architecture is
fixed before import, so the compile runs in a fresh process with ``CUTE_DSL_ARCH=sm_100a`` and fake tensors,
keeping the PTX and cubin. ``python -m kernels.gdn.native.k2_aot --cfg '{"L": 2, "V": 128}' --json out.json``;
``python -m kernels.gdn.native.k2_aot --results results/native`` writes the committed report
(``k2_blackwell_aot.json``, rows for d_v 64 and 128, same row schema as ``aot.json`` so
:func:`kernels.gdn.native.render.aot_table` renders it) and its provenance (``k2_blackwell_aot_provenance.json``).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .aot import _ptx_target, cubin_report, ptx_counts, tmem_columns_from_ptx


def compile_report(cfg: dict, arch: str = "sm_100a", timeout: int = 900) -> dict:
    """Compile the K2 kernel for ``arch`` in a fresh process; the report dict (PTX counts, TMEM columns, cubin)."""
    dump = tempfile.mkdtemp(prefix="cute_k2_aot_")
    env = dict(os.environ, CUTE_DSL_ARCH=arch, CUTE_DSL_KEEP="ptx,cubin", CUTE_DSL_DUMP_DIR=dump,
               OMP_NUM_THREADS="1")
    out_json = os.path.join(dump, "report.json")
    cmd = [sys.executable, "-m", "kernels.gdn.native.k2_aot", "--cfg", json.dumps(cfg), "--json", out_json,
           "--inner"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"AOT compile of k2_blackwell for {arch} failed:\n{proc.stderr[-6000:]}")
    rep = json.loads(Path(out_json).read_text())
    ptx_files = sorted(glob.glob(os.path.join(dump, "*.ptx")), key=os.path.getmtime)
    cubins = sorted(glob.glob(os.path.join(dump, "*.cubin")), key=os.path.getmtime)
    ptx = rep.pop("ptx") or (Path(ptx_files[-1]).read_text() if ptx_files else "")
    rep.update(kernel="k2_blackwell", arch=arch, cfg=cfg, ptx_target=_ptx_target(ptx), ptx_counts=ptx_counts(ptx),
               tmem_alloc_columns=tmem_columns_from_ptx(ptx))
    rep["cubin"] = cubin_report(cubins[-1]) if cubins else {"error": "no cubin dumped"}
    for f in glob.glob(os.path.join(dump, "*")):
        os.unlink(f)
    os.rmdir(dump)
    return rep


def write_results(out_dir: str) -> Path:
    """Compile for d_v 64 and 128 and write the report + provenance (lethe.provenance) into ``out_dir``."""
    from lethe import provenance

    rows = []
    for V in (64, 128):
        r = compile_report(dict(L=2, V=V))
        r["status"] = "compiled, not executed (no B200)"
        rows.append(r)
    out = Path(out_dir) / "k2_blackwell_aot.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rows": rows}, indent=1, sort_keys=True) + "\n")
    provenance.write(out.parent / "k2_blackwell_aot_provenance.json",
                     command="python -m kernels.gdn.native.k2_aot --results " + str(out_dir),
                     experiment="native-k2-blackwell-aot")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cfg", default='{"L": 2, "V": 128}')
    ap.add_argument("--json")
    ap.add_argument("--results", help="write k2_blackwell_aot.json + provenance into this folder")
    ap.add_argument("--inner", action="store_true", help="compile here (CUTE_DSL_ARCH is already set)")
    a = ap.parse_args(argv)
    if a.results:
        write_results(a.results)
        return 0
    cfg = json.loads(a.cfg)
    if a.inner:
        from .k2_blackwell import compile_fake

        t0 = time.perf_counter()
        fn, extra = compile_fake(cfg)
        rep = {"compile_s": round(time.perf_counter() - t0, 2), "ptx": fn.artifacts.PTX, **extra}
    else:
        rep = compile_report(cfg)
    Path(a.json).write_text(json.dumps(rep, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
