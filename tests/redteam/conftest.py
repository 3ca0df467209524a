"""Environment for the red-team and positive-control tests.

Their Triton members run on the interpreter on a machine without CUDA, and Triton reads TRITON_INTERPRET when
``triton.jit`` decorates, including its own library functions (``tl.max``, ``tl.sum``) when triton is first
imported: setting it here, at collection, means no earlier test in the same session can have imported triton in
compiled mode first (which made ``pc_softmax_triton`` fail when tests/test_cli.py ran before these).
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
