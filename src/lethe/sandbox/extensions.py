"""Prebuilt C++/CUDA extensions: a candidate's ``load_inline`` builds once, in a build step, never while it is verified.

A KernelBench-style CUDA candidate calls ``torch.utils.cpp_extension.load_inline(...)`` when its module is
imported. Left alone, every verification process would re-run that build (tens of seconds of compiler time per
kernel, repeated for every process that imports the candidate). This module splits the two:

* **build step** (:func:`install` in ``"record"`` mode, run by ``lethe.verifier.worker:build_candidate`` in its own
  sandboxed process whose only writable directory is the candidate's *extension root*): the candidate module is
  imported with ``TORCH_EXTENSIONS_DIR`` set to that root, so ``load_inline`` builds exactly where and how it
  would for KernelBench given the same directory as ``build_dir``; each call's arguments are hashed and the built
  library recorded in the root's :data:`MARKER` (written by the parent from the child's report, so the candidate
  cannot forge another candidate's record). A candidate that builds lazily, on its first forward, may define a
  module-level ``lethe_build()`` that the build step calls after the import.
* **verification** (``"load"`` mode, the candidate process of ``lethe.verifier.worker:run_candidate``, which sees the
  store read-only): ``load_inline`` is replaced by a loader that hashes the call's arguments, finds the library the
  build step recorded for the same hash and imports it directly -- no compiler, no ninja, no lock file. A call whose
  hash was not recorded (a candidate whose sources change between imports) falls back to the real ``load_inline``
  in the process's private directory and is counted in :data:`REBUILT`, so the row can say it happened.

The store lives outside every run directory: ``<store>/<toolchain>/<sha256(candidate source)[:24]>/``, where
``toolchain`` hashes what a build depends on besides the sources (torch and CUDA versions, Python, the target
architectures). Different toolchains never share a build, and one candidate's root is never another's.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

#: The JSON file in an extension root that records the build step's outcome (written by the verifier).
MARKER = "lethe_build.json"
#: Environment variable naming the store's top folder (default: ``~/.cache/lethe/extensions``).
STORE_ENV = "LETHE_EXT_STORE"
#: Arguments of ``load_inline`` that do not change what is built.
_NOT_BUILD_INPUTS = frozenset({"verbose", "build_directory", "keep_intermediates"})

#: Filled in the candidate process: the calls recorded ("record" mode) and the calls that had to build ("load").
RECORDED: list[dict[str, Any]] = []
REBUILT: list[dict[str, Any]] = []
LOADED: list[dict[str, Any]] = []


def toolchain_id(arch_list: str | None = None) -> str:
    """What a build depends on besides its sources, as a short hash (the store's second level)."""
    import torch

    facts = {"torch": torch.__version__, "cuda": torch.version.cuda, "python": sys.version.split()[0],
             "machine": platform.machine(),
             "arch": arch_list if arch_list is not None else os.environ.get("TORCH_CUDA_ARCH_LIST", "")}
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:16]


def store_root(base: str | os.PathLike | None = None, arch_list: str | None = None) -> Path:
    """``<base>/<toolchain>``: base is the argument, else ``$LETHE_EXT_STORE``, else ``~/.cache/lethe/extensions``."""
    top = base or os.environ.get(STORE_ENV) or Path.home() / ".cache" / "lethe" / "extensions"
    return Path(top).expanduser().resolve() / toolchain_id(arch_list)


def ext_root(store: Path, cand_src: str) -> Path:
    """The extension root of one candidate source inside ``store``."""
    return Path(store) / hashlib.sha256(cand_src.encode("utf-8")).hexdigest()[:24]


def read_marker(root: Path) -> dict[str, Any] | None:
    """The recorded build outcome of an extension root, or None when it was never built (or the file is bad)."""
    try:
        data = json.loads((Path(root) / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and "ok" in data else None


def write_marker(root: Path, report: dict[str, Any]) -> dict[str, Any]:
    """Atomically record a build step's outcome. The report comes from the candidate's own process, so only the
    keys the loader reads are kept and a library outside this root is refused: a candidate can name its own build
    and nothing else."""
    top = os.path.realpath(root) + os.sep
    exts, refused = [], []
    for e in report.get("extensions") or []:
        lib = os.path.realpath(str(e.get("library", "")))
        (exts if lib.startswith(top) else refused).append(
            {"name": str(e.get("name")), "key": str(e.get("key")), "library": lib,
             "python_module": bool(e.get("python_module", True))})
    error = str(report.get("error") or "")
    if refused:
        error = (error + "; " if error else "") + f"refused {len(refused)} library path(s) outside the build root"
    keep = {"ok": bool(report.get("ok")) and not refused, "error": error[:4000],
            "seconds": float(report.get("seconds") or 0.0), "extensions": exts}
    tmp = Path(root) / f".{MARKER}.tmp"
    tmp.write_text(json.dumps(keep, sort_keys=True, indent=1))
    os.replace(tmp, Path(root) / MARKER)
    return keep


def call_key(real, args: tuple, kwargs: dict) -> tuple[str, dict[str, Any]]:
    """(hash, bound arguments) of one ``load_inline`` call: every argument that changes the build, canonically."""
    bound = inspect.signature(real).bind(*args, **kwargs)
    bound.apply_defaults()
    build = {k: v for k, v in bound.arguments.items() if k not in _NOT_BUILD_INPUTS}
    blob = json.dumps(build, sort_keys=True, default=repr)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest(), dict(bound.arguments)


def _import_library(name: str, path: str, python_module: bool):
    if not python_module:
        import torch

        torch.ops.load_library(path)
        return path
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import the prebuilt extension {name} from {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def install(mode: str, root: str | os.PathLike) -> None:
    """Replace ``torch.utils.cpp_extension.load_inline`` in this process (a sandboxed candidate process).

    ``mode="record"``: build as usual (``TORCH_EXTENSIONS_DIR`` is the extension root) and note each call's hash
    and library in :data:`RECORDED`. ``mode="load"``: import the library recorded for the call's hash in the
    root's marker; build (into the private ``TORCH_EXTENSIONS_DIR``) only when there is none.
    """
    from torch.utils import cpp_extension

    real = getattr(cpp_extension.load_inline, "__wrapped__", cpp_extension.load_inline)
    root = Path(root)
    recorded = {e["key"]: e for e in (read_marker(root) or {}).get("extensions", [])} if mode == "load" else {}

    def load_inline(*args, **kwargs):
        key, bound = call_key(real, args, kwargs)
        name = str(bound["name"])
        python_module = bool(bound.get("is_python_module", True))
        if mode == "load":
            hit = recorded.get(key)
            if hit is not None and hit["name"] == name and os.path.isfile(hit["library"]):
                mod = _import_library(name, hit["library"], hit["python_module"])
                LOADED.append({"name": name, "key": key})
                return mod
            REBUILT.append({"name": name, "key": key,
                            "why": "no build recorded for these arguments" if hit is None else "library missing"})
            return real(*args, **kwargs)
        mod = real(*args, **kwargs)
        lib = getattr(mod, "__file__", None) if python_module else mod
        if not lib:
            build_dir = bound.get("build_directory") or os.path.join(os.environ.get("TORCH_EXTENSIONS_DIR", ""), name)
            lib = os.path.join(build_dir, f"{name}{cpp_extension.LIB_EXT}")
        RECORDED.append({"name": name, "key": key, "library": os.path.realpath(str(lib)),
                         "python_module": python_module})
        return mod

    load_inline.__wrapped__ = real
    load_inline.__doc__ = real.__doc__
    cpp_extension.load_inline = load_inline


def report() -> dict[str, Any]:
    """What this process's ``load_inline`` calls did (the candidate result carries it to the row's notes)."""
    return {"loaded": len(LOADED), "rebuilt": [dict(r) for r in REBUILT]}


def arch_list(device: str) -> str:
    """The ``TORCH_CUDA_ARCH_LIST`` a build gets: the user's, else the visible GPU's capability (e.g. ``9.0``),
    else empty. Fixing it in the parent makes the build independent of what the build process can see."""
    if os.environ.get("TORCH_CUDA_ARCH_LIST"):
        return os.environ["TORCH_CUDA_ARCH_LIST"]
    if device != "cuda":
        return ""
    import torch

    if not torch.cuda.is_available():
        return ""
    major, minor = torch.cuda.get_device_capability()
    return f"{major}.{minor}"


def _readable(root: Path) -> None:
    """Let every uid read and traverse a finished build (the sandbox gave the root mode 0700 for the build step):
    the candidate's verification runs under another leased uid. Nothing in a build is secret."""
    for dirpath, _dirs, files in os.walk(root):
        os.chmod(dirpath, 0o755)
        for f in files:
            p = os.path.join(dirpath, f)
            if not os.path.islink(p):
                os.chmod(p, os.stat(p).st_mode | 0o444)


def ensure_built(cand_src: str, *, runner, device: str, timeout_s: float = 900.0, memory_mb: int = 16384,
                 store: str | os.PathLike | None = None, jobs: int | None = None) -> tuple[Path, dict, Any]:
    """Build a candidate's extensions once: ``(extension root, marker, sandbox result or None when cached)``.

    The build step runs sandboxed with the extension root as its only writable directory. Its outcome is
    recorded (:data:`MARKER`) when the step itself finished -- a compile error is the candidate's and is kept, so
    it is reported without compiling again; a timeout or a harness failure is not recorded, so the next run tries
    again. A file lock serialises two verifiers building the same source."""
    import fcntl
    import shutil

    arch = arch_list(device)
    root = ext_root(store_root(store, arch), cand_src)
    marker = read_marker(root)
    if marker is not None:
        return root, marker, None
    root.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f".{root.name}.lock", "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        marker = read_marker(root)
        if marker is not None:
            return root, marker, None
        env = {"TORCH_EXTENSIONS_DIR": str(root), "TORCH_CUDA_ARCH_LIST": arch or None,
               "MAX_JOBS": str(jobs) if jobs else os.environ.get("MAX_JOBS")}
        res = runner("lethe.verifier.worker:build_candidate", payload={"cand_src": cand_src}, arrays={},
                     timeout_s=timeout_s, memory_mb=memory_mb, device=device, env=env, workdir=str(root))
        for scratch in (".home", ".tmp", ".src"):
            shutil.rmtree(root / scratch, ignore_errors=True)
        _readable(root)
        if res.status == "ok" and isinstance(res.result, dict):
            return root, write_marker(root, res.result), res
        tail = (getattr(res, "stderr_tail", "") or "")[-1500:]
        return root, {"ok": False, "transient": True, "seconds": float(getattr(res, "seconds", 0.0) or 0.0),
                      "error": f"build step {res.status}: {res.detail} {tail}"[:4000], "extensions": []}, res
