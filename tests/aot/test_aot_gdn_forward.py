"""The GDN Triton forward's generated sm_90a code (compiled on the CPU, nothing executed): facts the docs state
about it, checked where they come from."""

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _triton_aot():
    return importlib.import_module("experiments.gdn.triton_aot")


def contracted_split_products(ptx: str) -> int:
    """FMAs that take the low part of a 3xTF32 split from an unrounded product: ``fma a, b, -hi`` where ``hi`` is
    cvt.rna.tf32 of ``mul a, b`` -- the product enters the split beyond float32 precision."""
    muls = {m[1]: (m[2], m[3]) for m in re.finditer(r"mul\.f32\s+(%r\d+),\s*(%r\d+),\s*(%r\d+);", ptx)}
    split = {muls[r] for r in re.findall(r"cvt\.rna\.tf32\.f32\s+%r\d+,\s*(%r\d+);", ptx) if r in muls}
    return sum((m[1], m[2]) in split for m in re.finditer(r"fma\.rn\.f32\s+%r\d+,\s*(%r\d+),\s*(%r\d+),", ptx))


@pytest.mark.slow
def test_state_kernel_contracts_its_own_kend_into_the_split_but_not_a_loaded_one():
    # results/gdn/launch_sweep/state_kend/WHY_NOT_BITWISE.md: why KEND 1 is not bitwise KEND 0 on the GPU
    import torch
    from lethe.kernels.gdn.launch_tables import overridden

    from lethe.aot import compiled_ptx

    aot = _triton_aot()
    found = {}
    for kend in (0, 1):
        # the 3xTF32 kernel the explanation is about (bf16 inputs run at TF32-rn by default since e746f01)
        with overridden({"state_fwd_kernel": {"KEND": kend, "PREC": "tf32x3"}}):
            recs = aot.record_wrapper_launches(128, 128, 64, torch.bfloat16, erase=True)
        (rec,) = [r for r in recs if r.jit.fn.__name__ == "state_fwd_kernel"]
        found[kend] = contracted_split_products(compiled_ptx(rec.jit, "sm_90a", rec.args, dict(rec.kwargs)))
    # KEND 0: one per element of the [64, 128] Kend tile a thread holds (128 threads); KEND 1: none
    assert found == {0: 64 * 128 // 128, 1: 0}
