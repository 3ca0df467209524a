"""Environment for the GDN-family tests.

On a machine without CUDA the Triton tests run on the interpreter, which must be switched on before
``triton.jit`` decorates the kernels (it reads TRITON_INTERPRET at decoration time).
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

