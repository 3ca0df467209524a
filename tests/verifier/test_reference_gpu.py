"""The float64 reference on CUDA: equal to the CPU reference to float64 rounding on KernelBench problems, bit
for bit the same across runs, and computed on the CPU (saying why) when CUDA cannot compute it.

Run on a GPU host: ``OMP_NUM_THREADS=4 python -m pytest -q tests/verifier/test_reference_gpu.py``. Every test
goes through the real sandbox (the reference child gets the GPU as a candidate's does), with the disk cache off
so each run computes.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

# KernelBench level-1 problems of each kind the brief names: a matmul, a softmax, a convolution, a reduction.
PROBLEMS = ("level1/2_Standard_matrix_multiplication_.py", "level1/23_Softmax.py",
            "level1/63_conv_standard_2D__square_input__square_kernel.py", "level1/47_Sum_reduction_over_a_dimension.py")
# What the reference computes (outputs, gradients, the flush-to-zero, sensitivity and conditioning-spread arrays);
# everything else it returns (inputs, weights, upstream gradients) is drawn on the CPU and must be identical bytes.
COMPUTED = ("ref", "gin", "ftz", "sens", "cond", "gcond")
COMPUTED_DIRS = ("/gpar/", "/gcondpar/")
# "To float64 rounding": a difference of at most this many float64 epsilons of the array's own scale (the
# largest magnitude the CPU reference has there). A float32 computation misses it by about 1e9.
ROUNDING_EPS = 2000


ROOT = Path(__file__).resolve().parents[2]
# The pinned KernelBench problems, where tests/verifier/test_probes_realsize.py finds them.
KB = Path(os.environ.get("LETHE_KERNELBENCH",
                         ROOT.parent / "shared" / "third_party" / "kernelbench-48642c5c" / "KernelBench"))


def _kernelbench() -> Path:
    if not (KB / "level1").is_dir():
        pytest.skip(f"KernelBench problems not found at {KB} (set LETHE_KERNELBENCH)")
    return KB


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    from lethe.verifier import api

    monkeypatch.setenv("LETHE_REF_CACHE", "off")
    api._REF_CACHE.clear()
    yield
    api._REF_CACHE.clear()


def _reference(src: str, device: str):
    from lethe.verifier import api

    api._REF_CACHE.clear()
    status, res, arrays, raw = api.run_reference(src, 0, device=device)
    assert status == "ok" and res["ok"], res.get("error")
    return res, arrays


def _scale_key(key: str) -> str:
    """The array whose scale bounds ``key``'s rounding: a sensitivity or a conditioning spread is a difference of
    two evaluations, so it is bounded by the scale of what was evaluated (output k, input j's gradient, a
    parameter's gradient); everything else by its own."""
    if "/gcondpar/" in key:
        return key.replace("/gcondpar/", "/gpar/")
    head, _, tail = key.rpartition("/")
    for prefix, base in (("sens", "ref"), ("gcond", "gin"), ("cond", "ref")):
        if tail.startswith(prefix):
            return f"{head}/{base}{tail[len(prefix):]}"
    return key


@pytest.mark.parametrize("problem", PROBLEMS)
def test_cuda_reference_equals_the_cpu_reference_to_float64_rounding(problem):
    src = (_kernelbench() / problem).read_text()
    cpu, a_cpu = _reference(src, "cpu")
    gpu, a_gpu = _reference(src, "cuda")
    assert gpu["reference_device"] == "cuda" and "reference_fallback" not in gpu
    assert sorted(a_cpu) == sorted(a_gpu)
    assert [(m["id"], m["status"]) for m in cpu["probes"]] == [(m["id"], m["status"]) for m in gpu["probes"]]
    for k in a_cpu:
        x, y = a_cpu[k], a_gpu[k]
        assert x.shape == y.shape and x.dtype == y.dtype, k
        name = k.rsplit("/", 1)[-1]
        if not (name.startswith(COMPUTED) or any(d in k for d in COMPUTED_DIRS)):
            assert x.tobytes() == y.tobytes(), f"{k}: drawn on the CPU, must not depend on the reference device"
            continue
        if x.dtype.kind != "f":
            assert np.array_equal(x, y), k
            continue
        same_nonfinite = np.array_equal(np.isfinite(x), np.isfinite(y)) and np.array_equal(np.isnan(x), np.isnan(y))
        assert same_nonfinite, k
        fin = np.isfinite(x)
        ref = a_cpu[_scale_key(k)]
        scale = float(np.abs(ref[np.isfinite(ref)]).max()) if np.isfinite(ref).any() else 0.0
        diff = float(np.abs(x[fin].astype(np.float64) - y[fin].astype(np.float64)).max()) if fin.any() else 0.0
        assert diff <= ROUNDING_EPS * np.finfo(np.float64).eps * scale, (k, diff, scale)


def test_cuda_reference_is_bit_identical_across_runs():
    """Deterministic algorithms and cuBLAS's fixed workspace: the same seed gives the same bits."""
    for problem in (PROBLEMS[0], PROBLEMS[2]):
        src = (_kernelbench() / problem).read_text()
        _, first = _reference(src, "cuda")
        _, again = _reference(src, "cuda")
        assert sorted(first) == sorted(again)
        assert all(first[k].tobytes() == again[k].tobytes() for k in first), problem


CPU_TENSOR_IN_FORWARD = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return x * torch.linspace(0.0, 1.0, x.shape[-1], dtype=x.dtype)  # made on the CPU, whatever x's device

def get_inputs():
    return [torch.randn(8, 64)]

def get_init_inputs():
    return []
'''

NO_DETERMINISTIC_CUDA_KERNEL = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.histc(x, bins=16, min=-4.0, max=4.0) + 0.0 * x.sum()

def get_inputs():
    return [torch.randn(32, 64)]

def get_init_inputs():
    return []
'''


@pytest.mark.parametrize("src,why", [(CPU_TENSOR_IN_FORWARD, "fails on CUDA but runs on the CPU"),
                                     (NO_DETERMINISTIC_CUDA_KERNEL, "deterministic")])
def test_what_cuda_cannot_compute_is_computed_on_the_cpu_and_recorded(src, why):
    from lethe.verifier import api

    res, arrays = _reference(src, "cuda")
    assert res["reference_device"] == "cpu" and why in res["reference_fallback"]
    cpu, a_cpu = _reference(src, "cpu")
    assert sorted(arrays) == sorted(a_cpu) and all(arrays[k].tobytes() == a_cpu[k].tobytes() for k in arrays)
    assert api.reference_environment(res, "cuda")["reference_fallback"] == res["reference_fallback"]


def test_rows_with_a_cuda_reference_grade_like_rows_with_a_cpu_one():
    """End to end on a KernelBench problem with an exact torch candidate: every gate's status is the same
    whether the reference ran on the CPU or on CUDA, and the row says which."""
    import json

    from lethe.verifier import api

    src = (_kernelbench() / PROBLEMS[1]).read_text()
    cand = src.replace("class Model(", "class ModelNew(")
    rows = {}
    for where in ("cpu", "cuda"):
        api._REF_CACHE.clear()
        rows[where] = api.verify(src, cand, device="cuda", reference_device=where)
        assert json.loads(rows[where]["environment"])["reference_device"] == where
    assert rows["cpu"]["status"] == rows["cuda"]["status"] == "gated"
    assert ({g: v["status"] for g, v in rows["cpu"]["gates"].items()}
            == {g: v["status"] for g, v in rows["cuda"]["gates"].items()})
