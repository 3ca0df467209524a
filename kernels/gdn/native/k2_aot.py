"""Ahead-of-time compile of the tensor-core K1/K2 kernels on the CPU: Blackwell K2 (:mod:`.k2_blackwell`) and K1
(:mod:`.k1_blackwell_scan`) for sm_100a -- compiled, not executed (no B200) -- and the Hopper wgmma K1
(:mod:`.k1_hopper_wgmma`) for sm_90a -- compiled here; executed on the H200 (results/native/bench.json) -- and the
Hopper wgmma K2 (:mod:`.k2_hopper_wgmma`) for sm_90a -- compiled, not yet executed.

Same route and same inspection as :mod:`.aot` (whose PTX / cubin helpers it reuses): the DSL's architecture is
fixed before import, so the compile runs in a fresh process with ``CUTE_DSL_ARCH`` set and fake tensors, keeping
the PTX and cubin. ``python -m lethe.kernels.gdn.native.k2_aot --cfg '{"L": 2, "V": 128}' --json out.json``;
``python -m lethe.kernels.gdn.native.k2_aot --results results/native [--kernel k1_scan|k1_wgmma|k2_wgmma]`` writes that kernel's
committed report (:data:`REPORTS`: e.g. ``k2_blackwell_aot.json``, rows in the schema of ``aot.json`` so
:func:`lethe.kernels.gdn.native.render.aot_table` renders it) and its provenance (``<stem>_provenance.json``).
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

# Blackwell kernels this module compiles, by the ``kernel`` key of a cfg (default k2).
KERNELS = {"k2": "lethe.kernels.gdn.native.k2_blackwell", "k1_scan": "lethe.kernels.gdn.native.k1_blackwell_scan",
           "k1_wgmma": "lethe.kernels.gdn.native.k1_hopper_wgmma", "k2_wgmma": "lethe.kernels.gdn.native.k2_hopper_wgmma"}
# The Hopper kernels' own target (the others are Blackwell's, sm_100a).
HOPPER_KERNELS = ("k1_wgmma", "k2_wgmma")


def compile_report(cfg: dict, arch: str = "sm_100a", timeout: int = 900) -> dict:
    """Compile a Blackwell kernel (cfg["kernel"] in :data:`KERNELS`, default the K2 kernel) for ``arch`` in a
    fresh process; the report dict (PTX counts, TMEM columns, cubin)."""
    dump = tempfile.mkdtemp(prefix="cute_k2_aot_")
    env = dict(os.environ, CUTE_DSL_ARCH=arch, CUTE_DSL_KEEP="ptx,cubin", CUTE_DSL_DUMP_DIR=dump,
               OMP_NUM_THREADS="1")
    out_json = os.path.join(dump, "report.json")
    cmd = [sys.executable, "-m", "lethe.kernels.gdn.native.k2_aot", "--cfg", json.dumps(cfg), "--json", out_json,
           "--inner"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"AOT compile of {cfg.get('kernel', 'k2')} for {arch} failed:\n{proc.stderr[-6000:]}")
    rep = json.loads(Path(out_json).read_text())
    ptx_files = sorted(glob.glob(os.path.join(dump, "*.ptx")), key=os.path.getmtime)
    cubins = sorted(glob.glob(os.path.join(dump, "*.cubin")), key=os.path.getmtime)
    ptx = rep.pop("ptx") or (Path(ptx_files[-1]).read_text() if ptx_files else "")
    rep.update(kernel=KERNELS[cfg.get("kernel", "k2")].rsplit(".", 1)[1], arch=arch, cfg=cfg, ptx_target=_ptx_target(ptx), ptx_counts=ptx_counts(ptx),
               tmem_alloc_columns=tmem_columns_from_ptx(ptx))
    rep["cubin"] = cubin_report(cubins[-1]) if cubins else {"error": "no cubin dumped"}
    for f in glob.glob(os.path.join(dump, "*")):
        os.unlink(f)
    os.rmdir(dump)
    return rep


# What each committed report holds: its file stem, the configurations compiled, the provenance experiment name.
REPORTS = {
    "k2": ("k2_blackwell_aot", [dict(L=2, V=64), dict(L=2, V=128)], "native-k2-blackwell-aot", "sm_100a"),
    "k1_scan": ("k1_blackwell_scan_aot",
                [dict(kernel="k1_scan", V=64), dict(kernel="k1_scan", V=128),
                 dict(kernel="k1_scan", V=128, erase=False, dsf=False)], "native-k1-scan-blackwell-aot", "sm_100a"),
    "k1_wgmma": ("k1_hopper_wgmma_aot",
                 [dict(kernel="k1_wgmma", V=64), dict(kernel="k1_wgmma", V=128),
                  dict(kernel="k1_wgmma", V=128, erase=False, dsf=False),
                  dict(kernel="k1_wgmma", V=64, split=True), dict(kernel="k1_wgmma", V=128, split=True)],
                 "native-k1-wgmma-hopper-aot", "sm_90a"),
    "k2_wgmma": ("k2_hopper_wgmma_aot", [dict(kernel="k2_wgmma", V=64), dict(kernel="k2_wgmma", V=128)],
                 "native-k2-wgmma-hopper-aot", "sm_90a"),
}
STATUS = {"sm_100a": "compiled, not executed (no B200)",
          "sm_90a": "compiled; executed on the H200 (results/native/bench.json)"}
# Kernels whose status differs from their architecture's.
KERNEL_STATUS = {"k2_wgmma": "compiled, not yet executed (written after the H200 time was spent)"}


def write_results(out_dir: str, kernel: str = "k2") -> Path:
    """Compile the kernel's configurations (:data:`REPORTS`) and write the report + provenance
    (lethe.provenance) into ``out_dir``."""
    from lethe import provenance

    stem, cfgs, experiment, arch = REPORTS[kernel]
    rows = []
    for cfg in cfgs:
        r = compile_report(cfg, arch=arch)
        r["status"] = KERNEL_STATUS.get(kernel, STATUS[arch])
        rows.append(r)
    out = Path(out_dir) / f"{stem}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rows": rows}, indent=1, sort_keys=True) + "\n")
    provenance.write(out.parent / f"{stem}_provenance.json",
                     command=f"python -m lethe.kernels.gdn.native.k2_aot --results {out_dir} --kernel {kernel}",
                     experiment=experiment)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cfg", default='{"L": 2, "V": 128}')
    ap.add_argument("--arch", default=None, help="target (default: the kernel's own, sm_90a for the Hopper ones)")
    ap.add_argument("--json")
    ap.add_argument("--results", help="write the --kernel's committed report (+ provenance) into this folder")
    ap.add_argument("--kernel", choices=sorted(REPORTS), default="k2")
    ap.add_argument("--inner", action="store_true", help="compile here (CUTE_DSL_ARCH is already set)")
    a = ap.parse_args(argv)
    if a.results:
        write_results(a.results, a.kernel)
        return 0
    cfg = json.loads(a.cfg)
    if a.inner:
        import importlib

        compile_fake = importlib.import_module(KERNELS[cfg.get("kernel", "k2")]).compile_fake
        t0 = time.perf_counter()
        fn, extra = compile_fake(cfg)
        rep = {"compile_s": round(time.perf_counter() - t0, 2), "ptx": fn.artifacts.PTX, **extra}
    else:
        kern = cfg.get("kernel", "k2")
        rep = compile_report(cfg, arch=a.arch or ("sm_90a" if kern in HOPPER_KERNELS else "sm_100a"))
    Path(a.json).write_text(json.dumps(rep, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
