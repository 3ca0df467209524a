"""Test helpers for the verifier: an in-process runner and a KernelBench-style allclose check.

Imported by tests (tests/verifier, tests/test_cli.py); lives in the package so test modules can import it under
pytest's importlib mode.

The in-process runner calls the same sandbox entry points (reference and candidate) without spawning a process,
round-tripping payloads through JSON and arrays through npz exactly as the sandbox does. It is only ever used
with the trusted fixture kernels in lethe.verifier.fixtures, to keep the three-state calibration suite fast on two
cores; the sandboxed path is exercised by the CLI and determinism tests.
"""

from __future__ import annotations

import importlib
import io
import json
import os
import tempfile
from pathlib import Path

import numpy as np
import torch

from lethe.sandbox import SandboxResult


def inprocess_runner(target, payload=None, arrays=None, *, env=None, **_kw):
    mod, fn = target.split(":")
    func = getattr(importlib.import_module(mod), fn)
    saved = {k: os.environ.get(k) for k in (env or {})}
    for k, v in (env or {}).items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    buf = io.BytesIO()
    np.savez(buf, **(arrays or {}))
    buf.seek(0)
    with np.load(buf, allow_pickle=False) as z:
        arr_in = {k: z[k] for k in z.files}
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
    out = io.BytesIO()
    np.savez(out, **arr_out)
    out.seek(0)
    with np.load(out, allow_pickle=False) as z:
        arrays_back = {k: z[k] for k in z.files}
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


