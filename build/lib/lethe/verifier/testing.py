"""Test helpers for the verifier: an in-process runner and a KernelBench-style allclose check.

Imported by tests (tests/verifier, tests/test_cli.py); lives in the package so test modules can import it under
pytest's importlib mode.

The in-process runner calls the same sandbox entry points (reference and candidate) without spawning a process,
round-tripping payloads through JSON and arrays through the sandbox's array file format (lethe.sandbox.arrays)
exactly as the sandbox does. It is only ever used with the trusted fixture kernels in lethe.verifier.fixtures, to keep the three-state calibration suite fast on two
cores; the sandboxed path is exercised by the CLI and determinism tests.
"""

from __future__ import annotations

import importlib
import json
import os
import tempfile
from pathlib import Path

import torch

from lethe.sandbox import SandboxResult
from lethe.sandbox import arrays as arrays_io


def inprocess_runner(target, payload=None, arrays=None, *, env=None, **_kw):
    mod, fn = target.split(":")
    func = getattr(importlib.import_module(mod), fn)
    saved = {k: os.environ.get(k) for k in (env or {})}
    for k, v in (env or {}).items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    with tempfile.TemporaryDirectory() as td:
        arrays_io.write(Path(td) / "in.arrays", dict(arrays or {}), digest=False)
        arr_in, _ = arrays_io.read(Path(td) / "in.arrays", digest=False)
    try:
        with tempfile.TemporaryDirectory() as wd:
            result, arr_out = func(json.loads(json.dumps(payload or {})), arr_in, Path(wd))
    except Exception as exc:  # noqa: BLE001 - mirror the sandbox: a raising child is a status
        return SandboxResult(status="error", detail=f"{type(exc).__name__}: {exc}")
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    with tempfile.TemporaryDirectory() as td:
        arrays_io.write(Path(td) / "out.arrays", dict(arr_out or {}))
        arrays_back, _ = arrays_io.read(Path(td) / "out.arrays")
    return SandboxResult(status="ok", result=json.loads(json.dumps(result)), arrays=arrays_back)


def _exec_file(src: str, name: str) -> dict:
    """exec a source from a real file (Triton's @jit needs one)."""
    from lethe.verifier.reference import load_source

    return load_source(src, name)


def kb_allclose(ref_src: str, cand_src: str, seed: int = 42, trials: int = 5, tol: float = 1e-2) -> bool:
    """KernelBench's check in miniature: same seed for both models, get_inputs() per trial, fp32,
    torch.allclose(atol=rtol=1e-2) on every trial (no weight copying, no adversarial inputs)."""
    ref_ns = _exec_file(ref_src, "kb_ref")
    cand_ns = _exec_file(cand_src, "kb_cand")
    torch.manual_seed(seed)
    init = ref_ns["get_init_inputs"]()
    torch.manual_seed(seed)
    ref = ref_ns["Model"](*init)
    torch.manual_seed(seed)
    new = cand_ns["ModelNew"](*init)
    for t in range(trials):
        torch.manual_seed(seed + t)
        xs = ref_ns["get_inputs"]()
        with torch.no_grad():
            r = ref(*[x.clone() for x in xs])
            c = new(*[x.clone() for x in xs])
        if r.shape != c.shape or r.dtype != c.dtype or not torch.allclose(r, c, atol=tol, rtol=tol):
            return False
    return True


def kb_grad_allclose(ref_src: str, cand_src: str, seed: int = 42, tol: float = 1e-2) -> bool:
    """The same loose check applied to input gradients (what a 'has a backward' harness would do)."""
    ref_ns = _exec_file(ref_src, "kb_ref")
    cand_ns = _exec_file(cand_src, "kb_cand")
    torch.manual_seed(seed)
    init = ref_ns["get_init_inputs"]()
    torch.manual_seed(seed)
    ref = ref_ns["Model"](*init)
    torch.manual_seed(seed)
    new = cand_ns["ModelNew"](*init)
    torch.manual_seed(seed)
    (x,) = ref_ns["get_inputs"]()
    xr, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
    ref(xr).sum().backward()
    new(xc).sum().backward()
    return torch.allclose(xr.grad, xc.grad, atol=tol, rtol=tol)


