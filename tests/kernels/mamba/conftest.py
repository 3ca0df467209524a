"""Environment for the Mamba-op tests.

* Without CUDA the Triton tests run on the interpreter, which must be on before ``triton.jit`` decorates a kernel.
* ``lethe.kernels`` is this checkout's ``kernels/`` folder. An editable install made from another checkout maps the
  name to that checkout's folder (setuptools' finder), which would test someone else's code: the package's search
  path is pointed back here when it differs.
* ``mamba_helpers`` imports as a plain module because pytest's default import mode puts each test folder on the
  path (as for tests/kernels/gdn and its ``gdn_helpers``); nothing here edits ``sys.path``.
"""

import os
from pathlib import Path

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]

import lethe.kernels  # noqa: E402

_OURS = str(ROOT / "kernels")
if [str(Path(p).resolve()) for p in lethe.kernels.__path__] != [_OURS]:
    lethe.kernels.__path__[:] = [_OURS]
