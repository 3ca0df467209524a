"""Tiny KernelBench-style references and candidates (conforming and gate-violating): the calibration fixtures.

Each violator breaks exactly the property of one gate, in a way a real generated kernel does; most of them
still pass a KernelBench-style allclose(atol=rtol=1e-2) on the benchmark's own inputs.
"""

HEADER = "import torch\nimport torch.nn as nn\n"

# ---------------------------------------------------------------- references
SOFTMAX_REF = HEADER + '''
batch_size = 4
dim = 64

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=1)

def get_inputs():
    return [torch.randn(batch_size, dim)]

def get_init_inputs():
    return []
'''

SUM_REF = HEADER + '''
batch_size = 4
dim = 64

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x.sum(dim=1)

def get_inputs():
    return [torch.randn(batch_size, dim)]

def get_init_inputs():
    return []
'''

LINEAR_REF = HEADER + '''
batch_size = 4
in_features = 8
out_features = 6

class Model(nn.Module):
    def __init__(self, i, o):
        super().__init__()
        self.fc = nn.Linear(i, o)

    def forward(self, x):
        return torch.tanh(self.fc(x))

def get_inputs():
    return [torch.randn(batch_size, in_features)]

def get_init_inputs():
    return [in_features, out_features]
'''

SCALE_REF = HEADER + '''
batch_size = 4
dim = 16

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x) * 2.0

def get_inputs():
    return [torch.randn(batch_size, dim)]

def get_init_inputs():
    return []
'''

BROKEN_REF = HEADER + '''
class Model(nn.Module):
    def forward(self, x):
        return x.reshape(3, -1)   # 4*16 elements cannot reshape to 3 rows: the reference itself is broken

def get_inputs():
    return [torch.randn(4, 16)]

def get_init_inputs():
    return []
'''


def as_candidate(ref: str) -> str:
    """The reference itself renamed to ModelNew: the canonical conforming candidate."""
    return ref.replace("class Model(", "class ModelNew(")


def candidate(forward_body: str, init: str = "", extra: str = "", params: str = "") -> str:
    init_sig = f"self{', ' + params if params else ''}"
    return HEADER + extra + f'''
class ModelNew(nn.Module):
    def __init__({init_sig}):
        super().__init__()
{init or "        pass"}

    def forward(self, x):
{forward_body}
'''


# ---------------------------------------------------------------- violators (one per gate property)
# CMP-01: internal bf16 compute: ~4e-3 relative error, well inside allclose(1e-2).
SOFTMAX_BF16_INSIDE = candidate("        return torch.softmax(x.bfloat16(), dim=1).float()")

# CMP-02: custom backward off by 0.2%: forward exact, allclose(1e-2) on the gradient passes.
LINEAR_BAD_BACKWARD = candidate(
    "        return torch.tanh(_Lin.apply(x, self.fc.weight, self.fc.bias))",
    init="        self.fc = nn.Linear(i, o)",
    params="i, o",
    extra='''
class _Lin(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b):
        ctx.save_for_backward(x, w)
        return x @ w.t() + b

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return (g @ w) * 1.002, g.t() @ x, g.sum(0)
''')
LINEAR_FORWARD_ONLY = candidate(
    "        with torch.no_grad():\n            return torch.tanh(self.fc(x))",
    init="        self.fc = nn.Linear(i, o)", params="i, o")
LINEAR_CONFORMING = as_candidate(LINEAR_REF)

# CMP-03: hard-codes the benchmark width (processes 64 columns in blocks of 16, drops any tail).
SOFTMAX_FIXED_BLOCKS = candidate('''        n = (x.shape[1] // 16) * 16
        y = torch.zeros_like(x)
        y[:, :n] = torch.softmax(x[:, :n], dim=1)
        return y''')

# ORD-01: blocks of 8 rounded to and summed in fp16, then an fp32 total: ~5e-4 relative error.
SUM_BF16_BLOCKS = candidate('''        n = x.shape[1]
        pad = (-n) % 8
        xp = torch.nn.functional.pad(x, (0, pad))
        parts = xp.reshape(x.shape[0], -1, 8).half().sum(-1).float()
        return parts.sum(-1)''')

# ORD-03: one running total along the row kept in fp16 (any fp32 order is within the bound).
SUM_SEQUENTIAL = candidate('''        acc = torch.zeros(x.shape[0], dtype=torch.float16)
        for j in range(x.shape[1]):
            acc = (acc.float() + x[:, j]).half()
        return acc.to(x.dtype)''')

# ORD-02: a call counter perturbs the last bit; a persistent output buffer; in-place on the input.
SOFTMAX_NONDET = candidate('''        self.calls += 1
        return torch.softmax(x, dim=1) * (1.0 + 1e-7 * (self.calls % 2))''', init="        self.calls = 0")
SOFTMAX_SHARED_BUFFER = candidate('''        if self.buf is None or self.buf.shape != x.shape or self.buf.dtype != x.dtype:
            self.buf = torch.empty_like(x)
        torch.softmax(x, dim=1, out=self.buf)
        return self.buf''', init="        self.buf = None")
SCALE_INPLACE = candidate("        return x.relu_().mul_(2.0)")

# PRC-01: the fp16 path quantises its input to 1/16 steps (fp32 path exact).
SOFTMAX_FP16_QUANT = candidate('''        if x.dtype == torch.float16:
            x = (x.float() * 16).round() / 16
            return torch.softmax(x, dim=1).half()
        return torch.softmax(x, dim=1)''')
SOFTMAX_FP32_ONLY = candidate('''        if x.dtype != torch.float32:
            raise TypeError("this kernel only supports float32")
        return torch.softmax(x, dim=1)''')

# PRC-02: half inputs accumulated in a half running total.
SUM_HALF_ACC = candidate('''        if x.dtype == torch.float32:
            return x.sum(dim=1)
        acc = torch.zeros(x.shape[0], dtype=x.dtype)
        for j in range(x.shape[1]):
            acc = acc + x[:, j]
        return acc''')

# EXC-01: hides non-finite values.
SOFTMAX_NAN_TO_NUM = candidate("        return torch.nan_to_num(torch.softmax(x, dim=1), nan=0.0, posinf=1.0, neginf=0.0)")

# EXC-02: flushes subnormal inputs to zero (what fp32 FTZ hardware does).
SCALE_FTZ = candidate('''        tiny = torch.finfo(x.dtype).tiny
        x = torch.where(x.abs() < tiny, torch.zeros_like(x), x)
        return torch.relu(x) * 2.0''')

# RES-01: returns float64.
SCALE_DOUBLE = candidate("        return (torch.relu(x) * 2.0).double()")

# Status fixtures.
SYNTAX_ERROR = "import torch\nclass ModelNew(:\n"
LOAD_ERROR = candidate("        return x", init="        raise RuntimeError('boom in __init__')")
CUDA_INLINE = HEADER + '''
from torch.utils.cpp_extension import load_inline
src = "__global__ void k(float* x) {}"
ext = load_inline(name="k", cpp_sources="", cuda_sources=src, functions=[])
class ModelNew(nn.Module):
    def forward(self, x):
        return x
'''

TRITON_SOFTMAX = HEADER + '''
import triton
import triton.language as tl

@triton.jit
def _softmax_kernel(x_ptr, y_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * stride + offs, mask=mask, other=-float("inf")).to(tl.float32)
    m = tl.max(x, axis=0)
    e = tl.exp(x - m)
    e = tl.where(mask, e, 0.0)
    s = tl.sum(e, axis=0)
    tl.store(y_ptr + row * stride + offs, (e / s).to(y_ptr.dtype.element_ty), mask=mask)

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        _softmax_kernel[(x.shape[0],)](x, y, x.stride(0), x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
        return y
'''

# A Triton kernel with a runtime loop bound: the interpreter (numpy 2) cannot run it (pitfalls.md).
TRITON_RUNTIME_LOOP = HEADER + '''
import triton
import triton.language as tl

@triton.jit
def _rowsum(x_ptr, y_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in range(0, n_cols, BLOCK):
        offs = s + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * stride + offs, mask=offs < n_cols, other=0.0).to(tl.float32)
    tl.store(y_ptr + row, tl.sum(acc, axis=0))

class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty(x.shape[0], dtype=torch.float32)
        _rowsum[(x.shape[0],)](x, y, x.stride(0), x.shape[1], BLOCK=32)
        return y.to(x.dtype)
'''


# (gate, reference, candidate, profile, expected gate status, violator passes allclose(1e-2)?)
# The three-state calibration set: tests/verifier/test_gates.py asserts it, the verifier compute rule
# (workflow/rules/verifier_compute.smk) re-measures it through the real sandbox, and the calibration stage
# can sweep tolerance constants over it.
CALIBRATION: list[tuple[str, str, str, str, str, bool | None]] = [
    ("CMP-01", "SOFTMAX_REF", "SOFTMAX_BF16_INSIDE", "strict", "fail", True),
    ("CMP-02", "LINEAR_REF", "LINEAR_BAD_BACKWARD", "strict", "fail", True),
    ("CMP-02", "LINEAR_REF", "LINEAR_FORWARD_ONLY", "strict", "na", None),
    ("CMP-03", "SOFTMAX_REF", "SOFTMAX_FIXED_BLOCKS", "strict", "fail", True),
    ("ORD-01", "SUM_REF", "SUM_BF16_BLOCKS", "strict", "fail", True),
    ("ORD-02", "SOFTMAX_REF", "SOFTMAX_NONDET", "strict", "fail", True),
    ("ORD-02", "SOFTMAX_REF", "SOFTMAX_NONDET", "fast-math", "pass", True),
    ("ORD-02", "SOFTMAX_REF", "SOFTMAX_SHARED_BUFFER", "strict", "fail", True),
    ("ORD-02", "SCALE_REF", "SCALE_INPLACE", "strict", "fail", True),
    ("ORD-03", "SUM_REF", "SUM_SEQUENTIAL", "strict", "fail", True),
    ("PRC-01", "SOFTMAX_REF", "SOFTMAX_FP16_QUANT", "strict", "fail", True),
    ("PRC-01", "SOFTMAX_REF", "SOFTMAX_FP32_ONLY", "strict", "pass", True),
    ("PRC-02", "SUM_REF", "SUM_HALF_ACC", "strict", "fail", True),
    ("EXC-01", "SOFTMAX_REF", "SOFTMAX_NAN_TO_NUM", "strict", "fail", True),
    ("EXC-01", "SOFTMAX_REF", "SOFTMAX_NAN_TO_NUM", "fast-math", "pass", True),
    ("EXC-02", "SCALE_REF", "SCALE_FTZ", "strict", "fail", True),
    ("EXC-02", "SCALE_REF", "SCALE_FTZ", "cuda-default", "pass", True),
    ("RES-01", "SCALE_REF", "SCALE_DOUBLE", "strict", "fail", None),
]
CONFORMING_REFS = ["SOFTMAX_REF", "SUM_REF", "LINEAR_REF", "SCALE_REF"]


# KernelBench-shaped references with features the probe plan must handle: integer inputs (targets),
# buffers in train mode, integer outputs, tuple outputs, a global entering two dimensions (conv/BN
# images), two-operand reductions, hard-coded shapes (dimension-size knobs). Conforming = every gate
# passes or is na.
HEADER_F = HEADER + "import torch.nn.functional as F\n"
EDGE_REFS: dict[str, str] = {
"ce": HEADER_F + '''
batch_size = 8
num_classes = 10
class Model(nn.Module):
    def __init__(self):
        super().__init__()
    def forward(self, predictions, targets):
        return F.cross_entropy(predictions, targets)
def get_inputs():
    return [torch.randn(batch_size, num_classes), torch.randint(0, num_classes, (batch_size,))]
def get_init_inputs():
    return []
''',
"bn": HEADER_F + '''
batch_size = 4
features = 3
dim = 8
class Model(nn.Module):
    def __init__(self, f):
        super().__init__()
        self.bn = nn.BatchNorm2d(f)
    def forward(self, x):
        return self.bn(x)
def get_inputs():
    return [torch.randn(batch_size, features, dim, dim)]
def get_init_inputs():
    return [features]
''',
"argmax": HEADER_F + '''
batch_size = 4
dim = 32
class Model(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.d = d
    def forward(self, x):
        return torch.argmax(x, dim=self.d)
def get_inputs():
    return [torch.randn(batch_size, dim)]
def get_init_inputs():
    return [1]
''',
"tuple": HEADER_F + '''
class Model(nn.Module):
    def __init__(self):
        super().__init__()
    def forward(self, x, y):
        return x + y, (x * y).sum(dim=-1)
def get_inputs():
    return [torch.randn(4, 16), torch.randn(4, 16)]
def get_init_inputs():
    return []
''',
"conv": HEADER_F + '''
batch_size = 2
in_channels = 3
out_channels = 4
k = 3
h = 10
class Model(nn.Module):
    def __init__(self, i, o, k):
        super().__init__()
        self.conv = nn.Conv2d(i, o, k)
    def forward(self, x):
        return torch.relu(self.conv(x))
def get_inputs():
    return [torch.randn(batch_size, in_channels, h, h)]
def get_init_inputs():
    return [in_channels, out_channels, k]
''',
"matmul": HEADER_F + '''
M = 16
K = 32
N = 8
class Model(nn.Module):
    def __init__(self):
        super().__init__()
    def forward(self, A, B):
        return torch.matmul(A, B)
def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]
def get_init_inputs():
    return []
''',
"matmul_hard": HEADER_F + '''
class Model(nn.Module):
    def __init__(self):
        super().__init__()
    def forward(self, A, B):
        return torch.matmul(A, B)
def get_inputs():
    return [torch.randn(16, 32), torch.randn(32, 8)]
def get_init_inputs():
    return []
''',
}

