"""Environment for the scale-run tests (the Mamba tests' pattern).

* Without CUDA our Triton kernels run on the interpreter, which must be on before ``triton.jit`` decorates them.
* ``lethe.kernels`` is this checkout's ``kernels/`` folder, whatever an editable install made elsewhere says.
"""

import os
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

ROOT = Path(__file__).resolve().parents[2]

import lethe.kernels  # noqa: E402

_OURS = str(ROOT / "kernels")
if [str(Path(p).resolve()) for p in lethe.kernels.__path__] != [_OURS]:
    lethe.kernels.__path__[:] = [_OURS]


@pytest.fixture(scope="session")
def corpus():
    from lethe.scale.data import stdlib_corpus

    return stdlib_corpus()
