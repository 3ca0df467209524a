"""CPU reproductions behind the hand-audit labels of the GPU disputed cell (data/hand_audit/gpu_disputed.csv).

The leaderboard kernels are CUDA (load_inline) and cannot run without a GPU, so each numeric claim a label rests
on is re-derived in torch on the CPU: the arithmetic the kernel's source performs, beside what the contract asks
for. The hand-written trusted kernels are plain PyTorch, so :func:`battery_prc02` runs the battery itself on them.

:func:`run_all` gathers every check into one JSON-ready document (experiments/hand_audit/gpu_disputed_checks.py
writes it to results/hand_audit/gpu_disputed/checks.json).
"""

from __future__ import annotations

import copy
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

FLT_MAX = torch.finfo(torch.float32).max

#: (result key, KernelBench problem under KernelBench/, trusted kernel under data/trusted/kernels/) of each
#: hand-written kernel whose PRC-02 verdict is re-run on the CPU
BATTERY_CASES = (
    ("L2/12:gemm_kblocked_leaky", "level2/12_Gemm_Multiply_LeakyReLU.py", "gemm_kblocked_leaky.py"),
    ("L3/1:mlp_split_k", "level3/1_MLP.py", "mlp_split_k.py"),
)

# The child that runs PRC-02 on one (problem, kernel) pair and prints a digest of its bf16 bracketed probes.
_PRC02_CHILD = (
    "import json,sys; from lethe.verifier import api; "
    "ref=open(sys.argv[1]).read(); cand=open(sys.argv[2]).read(); "
    "row=api.verify(ref,cand,profile='strict',device='cpu',reference_device='cpu',only_gates=['PRC-02']); "
    "g=row['gates']['PRC-02']; ev=json.loads(g['evidence'])['probes']; "
    "print(json.dumps({'status':g['status'],'probes':{k:{'status':v.get('status'),"
    "'max_err_over_tol':(v.get('outputs') or [{}])[0].get('max_err_over_tol'),"
    "'first_bad':(v.get('outputs') or [{}])[0].get('first_bad'),"
    "'first_bad_values':(v.get('outputs') or [{}])[0].get('first_bad_values')} for k,v in ev.items() "
    "if k.startswith('accb_bf16')}}))"
)


def kernelbench_problem(path: Path) -> dict:
    """The namespace of one KernelBench problem file (its Model, get_inputs, get_init_inputs)."""
    ns: dict = {}
    exec(compile(Path(path).read_text(encoding="utf-8"), str(path), "exec"), ns)  # noqa: S102 - KernelBench problem
    return ns


def l2norm_underflow() -> dict:
    """L1/39: x / sqrt(sum x^2) in float32 on inputs below FLT_MIN (the EXC-02 subnormal probe's range)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(16, 16384, generator=g) * 1e-39  # every value subnormal in float32
    unscaled = x / torch.sqrt((x * x).sum(1, keepdim=True))
    exact = (x.double() / torch.linalg.vector_norm(x.double(), dim=1, keepdim=True)).float()
    m = x.abs().amax(1, keepdim=True)
    scaled = (x / m) / torch.sqrt(((x / m) ** 2).sum(1, keepdim=True))  # the scaled two-pass form
    return {"what": "float32 unscaled vs float64 vs float32 scaled L2 normalisation of subnormal rows",
            "squares_flushed_to_zero": bool(((x * x) == 0).all()),
            "unscaled_nonfinite_fraction": float((~torch.isfinite(unscaled)).float().mean()),
            "float64_nonfinite_fraction": float((~torch.isfinite(exact)).float().mean()),
            "scaled_max_abs_err": float((scaled - exact).abs().max())}


def nan_ignoring_max() -> dict:
    """L1/49: the kernel's loop (start at -FLT_MAX, keep v when v > running max) vs torch.max."""
    col = torch.tensor([0.3, float("nan"), 2.9, -1.0])
    m = -FLT_MAX
    for v in col.tolist():
        if v > m:  # false for NaN, so NaN is skipped
            m = v
    m_inf = -FLT_MAX
    for v in [float("-inf")] * 4:
        if v > m_inf:
            m_inf = v
    return {"what": "ordered-compare running max vs torch.max on a column holding a NaN, and on an all -inf column",
            "kernel_loop_with_nan": m, "torch_max_with_nan": float(col.max()),
            "kernel_loop_all_neg_inf": m_inf, "torch_max_all_neg_inf": float(torch.full((4,), float("-inf")).max())}


def nan_dropping_relu() -> dict:
    """L2/9 and L3/9: fmaxf(0, x) and (x > 0 ? x : 0) on NaN vs torch.relu."""
    x = torch.tensor([float("nan"), -1.0, 2.0])
    return {"what": "C fmaxf (torch.fmax) and the ternary ReLU vs torch.relu on NaN",
            "fmaxf_nan": float(torch.fmax(torch.zeros(1), x[:1])), "ternary_nan": float(torch.where(x[:1] > 0, x[:1], 0.0)),
            "torch_relu_nan": float(torch.relu(x[:1]))}


def _tf32(t: torch.Tensor) -> torch.Tensor:
    i = t.contiguous().view(torch.int32)
    return ((i + 0x1000) & ~0x1FFF).view(torch.float32)  # round to 10 explicit mantissa bits, to nearest


def resnet18_tf32(kb: Path) -> dict:
    """L3/9: the candidate's forward is the stock torch ResNet-18 (its only custom op, add + ReLU, is exact).
    Its float32 error with exact float32 convolutions vs with convolution operands rounded to TF32, which is
    what cuDNN does under torch's default torch.backends.cudnn.allow_tf32 = True. ``kb`` is a KernelBench
    checkout (its KernelBench/ folder holds the problems)."""
    ns = kernelbench_problem(Path(kb) / "KernelBench" / "level3" / "9_ResNet18.py")
    torch.manual_seed(0)
    m32 = ns["Model"](*ns["get_init_inputs"]())
    m64 = copy.deepcopy(m32).double()
    x = torch.randn(2, 3, 224, 224)

    def conv_tf32(self, inp):
        return F.conv2d(_tf32(inp), _tf32(self.weight), self.bias, self.stride, self.padding, self.dilation,
                        self.groups)

    with torch.no_grad():
        want = m64(x.double())
        plain_out = m32(x).double()
        for mod in m32.modules():
            if isinstance(mod, nn.Conv2d):
                mod.forward = conv_tf32.__get__(mod)
        tf = m32(x).double()
    return {"what": "ResNet-18 (training-mode batch norm, batch 2) in float32 vs float64",
            "output_rms": float(want.pow(2).mean().sqrt()), "fp32_max_abs_err": float((plain_out - want).abs().max()),
            "tf32_conv_max_abs_err": float((tf - want).abs().max())}


def bf16_weight_double_rounding() -> dict:
    """L2/12, L3/1: the candidate worker's switch between dtype groups as it was when these rows were made (fixed
    since: lethe.verifier.worker._restore). After the float16 probes it reloaded the float32 state into the (still
    float16) parameters, which rounds them to float16, then cast to bfloat16; the reference rounds the same float32
    weights straight to bfloat16. Counts the weights that differ and the error
    they put on a bracketed accumulation row [-2^7, 2^-14, ..., 2^-14, +2^7] of L2/12 (multiplier 2)."""
    torch.manual_seed(0)
    m = nn.Linear(1024, 512)
    w32 = m.weight.detach().clone()
    state0 = copy.deepcopy(m.state_dict())
    m.to(torch.float16)
    m.load_state_dict(state0)
    m.to(torch.bfloat16)
    w_worker = m.weight.detach().double()
    w_ref = w32.double().to(torch.bfloat16).double()
    diff = w_worker != w_ref
    row_err = 2 * 128 * (w_worker - w_ref)[:, [0, -1]].abs().sum(1)
    return {"what": "bf16(fp16(w)) (candidate worker) vs bf16(w) (reference) for nn.Linear(1024, 512) weights",
            "weights_differing_fraction": float(diff.float().mean()),
            "bracketed_row_max_output_err": float(row_err.max()),
            "bracketed_row_columns_affected": int((row_err > 0).sum())}


def battery_prc02(problem: Path, kernel: Path, timeout_s: float = 1800) -> dict:
    """The battery's PRC-02 on the CPU for one hand-written kernel, with this package's verifier (whose worker
    restores each parameter's float32 value and dtype before a dtype group casts the model: the fix of the
    double rounding measured by :func:`bf16_weight_double_rounding`). Runs in a fresh interpreter that imports
    the same ``lethe`` as this process."""
    import lethe

    env = dict(os.environ, PYTHONPATH=str(Path(lethe.__file__).resolve().parents[1]))
    out = subprocess.run([sys.executable, "-c", _PRC02_CHILD, str(problem), str(kernel)],
                         env=env, capture_output=True, text=True, check=True, timeout=timeout_s)
    return json.loads(out.stdout.strip().splitlines()[-1])


def plain(v):
    """JSON without NaN/Inf literals: a non-finite float is written as its name ("nan", "-inf")."""
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [plain(x) for x in v]
    return v


def run_all(kb: Path, trusted_kernels: Path, battery: bool = True) -> dict:
    """Every check, keyed as in checks.json, with non-finite floats spelled out (see :func:`plain`).

    ``kb``: a KernelBench checkout; ``trusted_kernels``: the folder of the hand-written kernels
    (data/trusted/kernels); ``battery=False`` skips the (slow) CPU battery runs."""
    kb = Path(kb)
    res = {"l2norm_underflow": l2norm_underflow(), "nan_ignoring_max": nan_ignoring_max(),
           "nan_dropping_relu": nan_dropping_relu(), "resnet18_tf32": resnet18_tf32(kb),
           "bf16_weight_double_rounding": bf16_weight_double_rounding()}
    if battery:
        for key, problem, kernel in BATTERY_CASES:
            res[f"battery_cpu {key}"] = battery_prc02(kb / "KernelBench" / problem, Path(trusted_kernels) / kernel)
    return plain(res)
