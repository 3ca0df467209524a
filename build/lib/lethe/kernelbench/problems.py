"""KernelBench-style problems and the candidates that exploit the check's known holes.

The reference sources follow KernelBench's problem convention (``Model``, module-level shape constants,
``get_inputs``, ``get_init_inputs``) with the shapes of the named level-1 problems, written here from their
specification (operator, shape, input distribution), so the holes are exercised where they are real:

* at the paper-era shapes with ``randn`` inputs, a softmax over 16,384 columns has max output ~4e-3 and an
  L1-normalised row ~3e-4, both under atol = 1e-2, so an all-zeros answer passes;
* from KernelBench v0.1 inputs are ``torch.rand`` in [0, 1), on which ReLU is the identity;
* every problem has exactly one shape, so a candidate may hard-code it.

Each candidate is a complete ``ModelNew`` source; :data:`KNOWN_HOLES` pairs it with its reference and says
why the check accepts it and which battery gate should not.
"""

from __future__ import annotations

from dataclasses import dataclass

SOFTMAX_REF = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    """Softmax over dim 1 (KernelBench L1/23, paper-era shape)."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=1)


batch_size = 16
dim = 16384


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''

L1NORM_REF = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    """Row-wise L1 normalisation (KernelBench L1/38, paper-era shape)."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x / torch.sum(torch.abs(x), dim=1, keepdim=True)


batch_size = 16
dim = 16384


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''

RELU_RAND_REF = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    """ReLU (KernelBench L1/19) with the v0.1 input distribution, torch.rand in [0, 1)."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


batch_size = 16
dim = 16384


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
'''

ZEROS_CAND = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.zeros_like(x)
'''

IDENTITY_CAND = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x
'''

# Correct only on the benchmark's single shape: the row length (the stride of a hand-written kernel) is the
# constant 16,384 of KernelBench's fixed shape, so any other row length is reinterpreted or raises.
SHAPE_HARDCODED_SOFTMAX_CAND = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        rows = x.reshape(-1, 16384)
        m = rows.max(dim=1, keepdim=True).values
        e = torch.exp(rows - m)
        return (e / e.sum(dim=1, keepdim=True)).reshape(x.shape)
'''

CORRECT_SOFTMAX_CAND = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        m = x.max(dim=1, keepdim=True).values
        e = torch.exp(x - m)
        return e / e.sum(dim=1, keepdim=True)
'''


@dataclass(frozen=True)
class KnownHole:
    name: str
    problem: str
    ref_src: str
    cand_src: str
    why_check_accepts: str
    battery_should_catch: str


KNOWN_HOLES = (
    KnownHole("zeros_softmax", "L1/23_Softmax", SOFTMAX_REF, ZEROS_CAND,
              "max|softmax| over 16384 columns of randn is ~4e-3 < atol 1e-2",
              "a scale-aware value comparison (CMP-01)"),
    KnownHole("zeros_l1norm", "L1/38_L1Norm_", L1NORM_REF, ZEROS_CAND,
              "max|x / sum|x|| over 16384 columns of randn is ~3e-4 < atol 1e-2",
              "a scale-aware value comparison (CMP-01)"),
    KnownHole("identity_relu", "L1/19_ReLU (v0.1 inputs)", RELU_RAND_REF, IDENTITY_CAND,
              "relu(x) == x on torch.rand inputs in [0, 1)",
              "inputs with negative values (CMP-01)"),
    KnownHole("shape_hardcoded_softmax", "L1/23_Softmax", SOFTMAX_REF, SHAPE_HARDCODED_SOFTMAX_CAND,
              "the check evaluates only the benchmark's single shape (16, 16384)",
              "held-out shapes (CMP-03)"),
)
