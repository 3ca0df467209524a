"""What a sandboxed CUDA process leaves in device memory is not readable by the next one.

The float64 reference may run on the GPU (docs/verifier.md, "Reference on the GPU"), in a process that has exited
before the candidate's starts. The candidate could still look for the reference's outputs in uninitialised
device memory, so the threat model holds only if the driver clears memory between CUDA contexts. This checks it:
one sandboxed child fills memory with a sentinel and exits, the next allocates the same amount uninitialised and
counts the sentinel.
"""

from __future__ import annotations

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

MB = 4096


def test_device_memory_does_not_carry_over_between_sandboxed_processes():
    from lethe.sandbox import run_isolated

    fill = run_isolated("lethe.sandbox.testing:gpu_fill_sentinel", payload={"mb": MB}, device="cuda", timeout_s=120)
    assert fill.status == "ok", fill.detail
    look = run_isolated("lethe.sandbox.testing:gpu_count_sentinel", payload={"mb": MB}, device="cuda", timeout_s=120)
    assert look.status == "ok", look.detail
    assert look.result["found"] == 0, f"{look.result['found']} words of the previous process's memory were readable"
