"""The official competitor of the Mamba benchmarks: mamba-ssm 2.3.2.post1, fetched as its pinned sdist and its
CUDA selective scan (``selective_scan_cuda``) built from it on the GPU host.

mamba-ssm publishes no wheel on PyPI (its prebuilt wheels live on GitHub releases, which a GPU node without
network cannot reach), so the benchmark builds the extension the way the sdist's ``setup.py`` does -- the same ten
sources, the same nvcc flags (``--use_fast_math`` included: that is how its authors ship it) -- but through
``torch.utils.cpp_extension.load`` for the one architecture of the host (``TORCH_CUDA_ARCH_LIST``), which cuts
the build from every architecture setup.py lists to one. The build directory is the cache: ninja rebuilds
nothing when it is kept. The Python package is used from the extracted sdist unchanged.

    python -m lethe.perf.mamba_ssm build --sdist mamba_ssm-2.3.2.post1.tar.gz --out cache/mamba_ssm
    python -m lethe.perf.mamba_ssm fetch --dest cache/                 # needs network; else hand-supply the file

``activate(out)`` puts the built module and the package on ``sys.path`` (``env_paths`` gives the same for a
subprocess's PYTHONPATH).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tarfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Pin:
    version: str
    filename: str
    url: str
    sha256: str


PIN = Pin(
    version="2.3.2.post1",
    filename="mamba_ssm-2.3.2.post1.tar.gz",
    url="https://files.pythonhosted.org/packages/af/48/aa7bec0efc7453fa0512276c0069c854bf684219050294266534bfef34bb/"
        "mamba_ssm-2.3.2.post1.tar.gz",
    sha256="104cc47e9101e5401a675fa2b784f2952b9b037f3b1dd83b5ac544394e95d028",
)

SOURCES = (
    "selective_scan.cpp",
    "selective_scan_fwd_fp32.cu", "selective_scan_fwd_fp16.cu", "selective_scan_fwd_bf16.cu",
    "selective_scan_bwd_fp32_real.cu", "selective_scan_bwd_fp32_complex.cu",
    "selective_scan_bwd_fp16_real.cu", "selective_scan_bwd_fp16_complex.cu",
    "selective_scan_bwd_bf16_real.cu", "selective_scan_bwd_bf16_complex.cu",
)

# setup.py's nvcc flags for selective_scan_cuda, less the per-architecture -gencode list (one arch here) and the
# flags that only print (-v to ptxas, -lineinfo).
NVCC_FLAGS = (
    "-O3", "-std=c++17",
    "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
    "-U__CUDA_NO_BFLOAT16_OPERATORS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
    "-U__CUDA_NO_BFLOAT162_OPERATORS__", "-U__CUDA_NO_BFLOAT162_CONVERSIONS__",
    "--expt-relaxed-constexpr", "--expt-extended-lambda", "--use_fast_math",
)
CXX_FLAGS = ("-O3", "-std=c++17")


class FetchError(RuntimeError):
    """The sdist could not be fetched or does not match its pin (the message says what to do)."""


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def verify(path: Path, pin: Pin = PIN) -> Path:
    """The file if its SHA-256 is the pin's; FetchError otherwise."""
    path = Path(path)
    if not path.is_file():
        raise FetchError(f"{path}: no such file (hand-supply {pin.filename}, sha256 {pin.sha256})")
    got = sha256_of(path)
    if got != pin.sha256:
        raise FetchError(f"{path}: sha256 {got} is not the pinned {pin.sha256} of mamba-ssm {pin.version}")
    return path


def fetch(dest: Path, pin: Pin = PIN, timeout_s: float = 60.0) -> Path:
    """Download the pinned sdist into ``dest`` (kept if already there and matching)."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / pin.filename
    if out.is_file():
        return verify(out, pin)
    tmp = out.with_suffix(".part")
    try:
        with urllib.request.urlopen(pin.url, timeout=timeout_s) as r, open(tmp, "wb") as f:
            f.write(r.read())
    except OSError as exc:
        raise FetchError(f"cannot download {pin.url} ({exc}); offline, hand-supply {pin.filename} "
                         f"(sha256 {pin.sha256}) and pass --sdist") from exc
    verify(tmp, pin)
    os.replace(tmp, out)
    return out


def extract(sdist: Path, out: Path, pin: Pin = PIN) -> Path:
    """The sdist's root folder under ``out`` (extracted once; members outside it are refused)."""
    verify(sdist, pin)
    root = Path(out) / f"mamba_ssm-{pin.version}"
    if (root / "mamba_ssm" / "__init__.py").is_file():
        return root
    Path(out).mkdir(parents=True, exist_ok=True)
    with tarfile.open(sdist) as tar:
        tar.extractall(out, filter="data")
    return root


def build(sdist: Path, out: Path, *, arch: str | None = None, jobs: int | None = None, verbose: bool = False) -> dict:
    """Build ``selective_scan_cuda`` into ``out/build`` (ninja: kept builds are reused). Returns a record of
    what was built (paths, arch, flags, seconds)."""
    import torch
    from torch.utils.cpp_extension import load

    root = extract(sdist, out)
    if arch is None:
        major, minor = torch.cuda.get_device_capability()
        arch = f"{major}.{minor}"
    os.environ["TORCH_CUDA_ARCH_LIST"] = arch
    if jobs:
        os.environ["MAX_JOBS"] = str(jobs)
    bdir = Path(out) / "build"
    bdir.mkdir(parents=True, exist_ok=True)
    src = root / "csrc" / "selective_scan"
    t0 = time.time()
    load(name="selective_scan_cuda", sources=[str(src / s) for s in SOURCES], extra_cflags=list(CXX_FLAGS),
         extra_cuda_cflags=list(NVCC_FLAGS), extra_include_paths=[str(src)], build_directory=str(bdir),
         verbose=verbose)
    rec = {"version": PIN.version, "sha256": PIN.sha256, "arch": arch, "build_dir": str(bdir),
           "package_dir": str(root), "nvcc_flags": list(NVCC_FLAGS), "wall_s": round(time.time() - t0, 1),
           "torch": torch.__version__, "cuda": torch.version.cuda}
    (Path(out) / "build.json").write_text(json.dumps(rec, indent=1) + "\n")
    return rec


def env_paths(out: Path) -> list[str]:
    """What a process needs on its path to ``import mamba_ssm`` with the built extension."""
    rec = json.loads((Path(out) / "build.json").read_text())
    return [rec["build_dir"], rec["package_dir"]]


def activate(out: Path) -> dict:
    """Put the built extension and the package on ``sys.path``; returns the build record."""
    rec = json.loads((Path(out) / "build.json").read_text())
    for p in reversed(env_paths(out)):
        if p not in sys.path:
            sys.path.insert(0, p)
    return rec


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="fetch and build mamba-ssm's CUDA selective scan (pinned sdist)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fetch")
    f.add_argument("--dest", required=True)
    b = sub.add_parser("build")
    b.add_argument("--sdist", required=True)
    b.add_argument("--out", required=True)
    b.add_argument("--arch", default=None)
    b.add_argument("--jobs", type=int, default=None)
    b.add_argument("--verbose", action="store_true")
    a = ap.parse_args(argv)
    try:
        if a.cmd == "fetch":
            print(fetch(Path(a.dest)))
        else:
            print(json.dumps(build(Path(a.sdist), Path(a.out), arch=a.arch, jobs=a.jobs, verbose=a.verbose)))
    except FetchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
