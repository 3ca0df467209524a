"""Reproduce state-spaces/mamba#904 ahead of time: the Mamba-3 SISO backward asks for more TMEM than sm_100 has.

The kernel ``mamba3_siso_bwd_kernel_dqkv`` is taken from the mamba-ssm 2.3.2.post1 *source distribution* (pinned
by sha256; only its two pure-Python Triton files are used, no CUDA extension is built). Its launch is rebuilt the
way ``compute_dqkv`` issues it, recorded with :func:`lethe.aot.record_launches` (no GPU: nothing runs), and every
autotune config is compiled for sm_100a (and sm_90a) under several Triton releases, one process per release
(side venvs from :mod:`lethe.aot.venvs`). Each compilation gives a :class:`~lethe.aot.triton_aot.ResourceReport`
judged by :func:`lethe.aot.limits.check`.

Compiled, not executed: there is no B200 here. A config that needs more than 512 TMEM columns is one Triton's
loader would refuse (``OutOfResources``) and the autotuner would silently drop, which is the mechanism #904
describes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tarfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from lethe.provenance import REPO_ROOT

SDIST = {
    "project": "mamba-ssm",
    "version": "2.3.2.post1",
    "filename": "mamba_ssm-2.3.2.post1.tar.gz",
    # Computed from the PyPI download (pip verifies it against the index's own digest while downloading).
    "sha256": "104cc47e9101e5401a675fa2b784f2952b9b037f3b1dd83b5ac544394e95d028",
}
KERNEL = "mamba3_siso_bwd_kernel_dqkv"
PACKAGE_DIR = "mamba_ssm/ops/triton/mamba3"
KERNEL_FILES = ("mamba3_siso_bwd.py", "utils.py")
CACHE = REPO_ROOT / "cache" / "mamba904"


def sha256_of(path: str | os.PathLike[str]) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch_sdist(cache_dir: Path = CACHE) -> Path:
    """The pinned sdist under ``cache_dir`` (downloaded with pip if absent); raises if its sha256 differs."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    path = cache_dir / SDIST["filename"]
    if not path.exists():
        env = dict(os.environ, MAMBA_SKIP_CUDA_BUILD="TRUE", CAUSAL_CONV1D_SKIP_CUDA_BUILD="TRUE")
        # --no-build-isolation: preparing the sdist's metadata imports torch; reuse ours instead of a fresh one.
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "--no-build-isolation",
             "--disable-pip-version-check", "-d", str(cache_dir), f"{SDIST['project']}=={SDIST['version']}"],
            check=True, env=env,
        )
    got = sha256_of(path)
    if got != SDIST["sha256"]:
        raise RuntimeError(f"{path}: sha256 {got} does not match the pinned {SDIST['sha256']}")
    return path


_EINOPS_STUB = '''"""Stand-in for einops: mamba3_siso_bwd.py imports it for host-side reshapes, never inside a kernel."""


def _host_only(*args, **kwargs):
    raise NotImplementedError("einops stub: only the Triton kernels of this module are compiled here")


rearrange = repeat = _host_only
'''


def extract_kernel_tree(sdist: Path, dest: Path = CACHE / "src") -> tuple[Path, dict[str, str]]:
    """Extract only the Triton kernel files into an importable stub package; returns (root, file sha256s)."""
    prefix = sdist.name.removesuffix(".tar.gz")
    pkg = dest / PACKAGE_DIR
    pkg.mkdir(parents=True, exist_ok=True)
    hashes = {}
    with tarfile.open(sdist, "r:gz") as tar:
        for name in KERNEL_FILES:
            member = tar.getmember(f"{prefix}/{PACKAGE_DIR}/{name}")
            data = tar.extractfile(member).read()
            (pkg / name).write_bytes(data)
            hashes[f"{PACKAGE_DIR}/{name}"] = hashlib.sha256(data).hexdigest()
    # Empty package markers: importing the real mamba_ssm/__init__ would pull in its CUDA extensions.
    parts = Path(PACKAGE_DIR).parts
    for depth in range(1, len(parts) + 1):
        (dest.joinpath(*parts[:depth]) / "__init__.py").write_text("")
    (dest / "einops.py").write_text(_EINOPS_STUB)
    return dest, hashes


@dataclass(frozen=True)
class DqkvLaunch:
    """The ``compute_dqkv`` launch being reproduced. Sizes enter Triton's specialisation only through "== 1" and
    "% 16 == 0" of the integer arguments (and the constexpr flags), so these defaults stand for the #904 setting
    (1.4B Mamba-3 SISO: d_model 2048 -> 64 heads of d_v 64, d_state 128, chunk 64, batch 4, seq 4096)."""

    batch: int = 4
    seqlen: int = 4096
    nheads: int = 64
    nheads_qk: int = 64  # compute_dqkv receives Q_rot / K_scaled stored per head: (B, T, nheads, d_state)
    headdim_qk: int = 128
    headdim_v: int = 64
    chunk_size: int = 64
    has_d: bool = True  # Mamba3 has a D skip parameter (fp32)
    has_d_ossm_state: bool = False  # final-state gradient: only when final states are returned
    has_input_state: bool = False  # initial-state gradient: only when initial states are passed


VARIANTS = {
    # what a plain training step of the Mamba3 module launches (no initial state, no final-state gradient)
    "module_training": DqkvLaunch(),
    # with both state gradients, as when states are carried across segments
    "with_states": DqkvLaunch(has_d_ossm_state=True, has_input_state=True),
}


def _strides(*shape: int) -> list[int]:
    out, step = [], 1
    for dim in reversed(shape):
        out.append(step)
        step *= dim
    return list(reversed(out))


def launch_dqkv(kernel: Any, cfg: DqkvLaunch) -> None:
    """Issue the kernel launch exactly as ``compute_dqkv`` does, with pointer stand-ins (dtypes as allocated by
    the forward: bf16 activations and states, fp32 statistics and state gradients). Run it inside
    ``record_launches(execute=False)``."""
    from lethe.aot.launches import PointerArg

    b, t, h, hq, pq, pv, cs = (cfg.batch, cfg.seqlen, cfg.nheads, cfg.nheads_qk, cfg.headdim_qk, cfg.headdim_v,
                               cfg.chunk_size)
    nchunks = (t + cs - 1) // cs
    bf16, f32 = PointerArg("bfloat16"), PointerArg("float32")
    s_q = _strides(b, t, hq, pq)
    s_v = _strides(b, t, h, pv)
    s_stat = _strides(b, h, t)
    s_sum = _strides(b, h, nchunks)
    s_ssm = _strides(b, h, pv, nchunks * pq)
    s_state = _strides(b, h, pv, pq)
    s_dq = _strides(b, t, h, pq)
    s_dd = _strides(b, h)
    d = f32 if cfg.has_d else None
    d_ossm = f32 if cfg.has_d_ossm_state else None
    d_issm = f32 if cfg.has_input_state else None
    kernel[(h, b)](
        bf16, bf16, bf16, f32, f32, f32, d, bf16, bf16, d_ossm, None,
        bf16, bf16, bf16, f32, f32, f32 if cfg.has_d else None, d_issm,
        *s_q, *s_q, *s_v, *s_stat, *s_sum, *s_stat,
        1 if cfg.has_d else 0,
        *s_ssm, *s_v,
        *(s_state if cfg.has_d_ossm_state else [0] * 4),
        0,
        *s_dq, *s_dq, *s_v, *s_stat, *s_stat,
        *(s_dd if cfg.has_d else [0, 0]),
        *(s_state if cfg.has_input_state else [0] * 4),
        t, hq, pq, pv,
        CHUNK_SIZE=cs, HEADDIM_QK=pq, HEADDIM_V=pv, RECOMPUTE_MASK=False,
        HAS_D_OSSM_STATE=cfg.has_d_ossm_state, RETURN_D_ISSM_STATE=cfg.has_input_state, IS_VARLEN=False,
    )


def run_worker(src_root: Path, variants: list[str], targets: list[str], out: Path,
               maxnreg_only_default: list[str]) -> None:
    """Compile every autotune config of the kernel for each variant and target; append JSON lines to ``out``.

    Runs under whichever Triton the interpreter imports (one process per release).
    """
    sys.path.insert(0, str(src_root))
    import triton

    from lethe.aot.launches import compile_launch, expand_configs, record_launches

    module = __import__(f"{PACKAGE_DIR.replace('/', '.')}.mamba3_siso_bwd", fromlist=["x"])
    kernel = getattr(module, KERNEL)
    # Resumable: configs already in `out` (from an interrupted run) are not compiled again.
    done = set()
    if out.exists():
        for line in out.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                done.add((r["variant"], r["target"], r["num_warps"], r["num_stages"], r["maxnreg"]))
    with out.open("a") as fh:
        for variant in variants:
            with record_launches(execute=False) as launches:
                launch_dqkv(kernel, VARIANTS[variant])
            (record,) = launches
            for kwargs in expand_configs(record):
                if variant in maxnreg_only_default and kwargs.get("maxnreg") is not None:
                    continue
                for target in targets:
                    # Other targets are context for the sm_100 story: their maxnreg variants are not needed.
                    if target != "sm_100a" and kwargs.get("maxnreg") is not None:
                        continue
                    key = (variant, target, kwargs.get("num_warps", 4), kwargs.get("num_stages", 3),
                           kwargs.get("maxnreg"))
                    if key in done:
                        continue
                    t0 = time.time()
                    rep = compile_launch(record.jit, target, record.args, kwargs)
                    row = {"triton": triton.__version__, "variant": variant, **rep.to_dict(),
                           "violations": rep.violations(), "seconds": round(time.time() - t0, 1)}
                    fh.write(json.dumps(row, sort_keys=True) + "\n")
                    fh.flush()
                    print(f"[{triton.__version__} {variant} {target} w{rep.num_warps} s{rep.num_stages} "
                          f"r{rep.maxnreg}] tmem={rep.tmem_columns} shared={rep.shared_bytes} "
                          f"reg={rep.registers} spill={rep.spill_bytes} err={rep.error} ({row['seconds']}s)",
                          flush=True)


def python_for(version: str) -> str:
    """The interpreter that imports ``triton==version``: this one if it matches, else the side venv."""
    import triton

    from lethe.aot.venvs import ensure

    if triton.__version__ == version:
        return sys.executable
    return str(ensure(version))


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The #904 statements, each checked against the compiled rows (sm_100a, maxnreg unset, module variant)."""
    def pick(version_pred, stages, warps_pred):
        return [r for r in rows if r["target"] == "sm_100a" and r["variant"] == "module_training"
                and r["maxnreg"] is None and version_pred(r["triton"]) and r["num_stages"] in stages
                and warps_pred(r["num_warps"])]

    def ver(v: str) -> tuple[int, ...]:
        return tuple(int(x) for x in v.split(".")[:3])

    claims = []
    old = pick(lambda v: ver(v) < (3, 8), {1, 2, 3}, lambda w: w >= 4)
    claims.append({
        "claim": "Triton < 3.8: every num_warps >= 4 config asks for 544 TMEM columns (> 512)",
        "observed": sorted({(r["triton"], r["tmem_columns"]) for r in old}),
        "holds": bool(old) and all(r["tmem_columns"] == 544 for r in old),
    })
    new1 = pick(lambda v: ver(v) >= (3, 8), {1}, lambda w: w >= 4)
    claims.append({
        "claim": "Triton >= 3.8: num_stages = 1 fits in 256 TMEM columns",
        "observed": sorted({(r["triton"], r["tmem_columns"]) for r in new1}),
        "holds": bool(new1) and all(r["tmem_columns"] == 256 for r in new1),
    })
    new23 = pick(lambda v: ver(v) >= (3, 8), {2, 3}, lambda w: w >= 4)
    claims.append({
        "claim": "Triton >= 3.8: num_stages = 2-3 still ask for 576 TMEM columns (> 512)",
        "observed": sorted({(r["triton"], r["tmem_columns"]) for r in new23}),
        "holds": bool(new23) and all(r["tmem_columns"] == 576 for r in new23),
    })
    two = pick(lambda v: True, {1, 2, 3}, lambda w: w == 2)
    claims.append({
        "claim": "num_warps = 2 configs fit TMEM only by using no tcgen05 MMA at all, and spill heavily",
        "observed": sorted({(r["triton"], r["tmem_columns"], r["spill_bytes"]) for r in two}),
        "holds": bool(two) and all(r["mma"].get("ttgir_tc_gen5_mma", 0) == 0 and r["tmem_columns"] == 0
                                   and (r["spill_bytes"] or 0) > 0 for r in two),
    })
    for c in claims:
        c["observed"] = [list(o) for o in c["observed"]]
    return claims


def _coverage(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        key = f"{r['triton']} {r['variant']} {r['target']}"
        entry = out.setdefault(key, {"configs": 0, "maxnreg": set()})
        entry["configs"] += 1
        entry["maxnreg"].add(-1 if r["maxnreg"] is None else r["maxnreg"])
    return {k: {"configs": v["configs"], "maxnreg": [None if m == -1 else m for m in sorted(v["maxnreg"])]}
            for k, v in sorted(out.items())}


def build_result(rows: list[dict[str, Any]], file_hashes: dict[str, str], targets: list[str]) -> dict[str, Any]:
    keep = [{k: v for k, v in r.items() if k not in ("seconds", "source", "kernel")} for r in rows]
    keep.sort(key=lambda r: (r["variant"], r["target"], tuple(int(x) for x in r["triton"].split(".")[:3]),
                             r["num_stages"], r["num_warps"], -1 if r["maxnreg"] is None else r["maxnreg"]))
    ptxas = {}
    for r in keep:
        ptxas.setdefault(r["triton"], {})[r["target"]] = r["ptxas"]
    return {
        "schema": "lethe.aot.mamba904/1",
        "kernel": KERNEL,
        "compiled_not_executed": True,
        "note": "Every figure comes from compiling on a CPU host; nothing ran on an sm_100 GPU (none here).",
        "source": {**SDIST, "files": file_hashes},
        "variants": {k: asdict(v) for k, v in VARIANTS.items()},
        "targets": targets,
        "ptxas": ptxas,
        "rows": keep,
        # which configs were compiled under each release: the maxnreg variants are optional (slow to compile)
        "coverage": _coverage(keep),
        "claims": summarize(keep),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="AOT reproduction of mamba#904")
    sub = parser.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("worker", help="compile under the current interpreter's Triton")
    w.add_argument("--src", required=True, type=Path)
    w.add_argument("--out", required=True, type=Path)
    w.add_argument("--variants", nargs="+", default=list(VARIANTS))
    w.add_argument("--targets", nargs="+", default=["sm_100a"])
    w.add_argument("--maxnreg-only-default", nargs="*", default=["with_states"])
    r = sub.add_parser("run", help="fetch, compile under every Triton release, write the result JSON")
    r.add_argument("--versions", nargs="+", default=["3.6.0", "3.7.1", "3.8.0"])
    r.add_argument("--targets", nargs="+", default=["sm_100a", "sm_90a"])
    r.add_argument("--variants", nargs="+", default=list(VARIANTS))
    r.add_argument("--out", required=True, type=Path)
    r.add_argument("--provenance", type=Path)
    r.add_argument("--work", type=Path, default=CACHE / "runs")
    r.add_argument("--context-targets-for", nargs="*", default=None,
                   help="compile targets other than sm_100a only under these releases (default: all)")
    r.add_argument("--reuse", action="store_true",
                   help="aggregate existing per-release JSON lines in --work instead of recompiling")
    args = parser.parse_args(argv)

    if args.cmd == "worker":
        run_worker(args.src, args.variants, args.targets, args.out, args.maxnreg_only_default)
        return 0

    sdist = fetch_sdist()
    src_root, file_hashes = extract_kernel_tree(sdist)
    args.work.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    for version in args.versions:
        part = args.work / f"triton-{version}.jsonl"
        targets = args.targets
        if args.context_targets_for is not None and version not in args.context_targets_for:
            targets = [t for t in targets if t == "sm_100a"]
        if not (args.reuse and part.exists()):
            part.unlink(missing_ok=True)
            env = dict(os.environ,
                       PYTHONPATH=os.pathsep.join([str(REPO_ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
            subprocess.run([python_for(version), "-m", "lethe.aot.mamba904", "worker", "--src", str(src_root),
                            "--out", str(part), "--variants", *args.variants, "--targets", *targets],
                           check=True, env=env)
        got = [json.loads(line) for line in part.read_text().splitlines() if line.strip()]
        if any(r["triton"] != version for r in got):
            raise RuntimeError(f"{part} holds rows of another Triton release")
        rows += got
    result = build_result(rows, file_hashes, args.targets)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    if args.provenance is not None:
        from lethe.provenance import write

        write(args.provenance, command=" ".join(sys.argv), sdist_sha256=SDIST["sha256"],
              triton_versions=args.versions, targets=args.targets)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
