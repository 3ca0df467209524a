"""What the Mamba ops share: backend resolution, the shape/channel guards, dtype rules.

Layouts (channels last, as the authors' records name them): ``u``, ``delta`` ``[batch, L, d_model]``; ``A``
``[d_model, n_state]``; ``B``, ``C`` ``[batch, L, n_state]`` (time-varying, shared by every channel, Mamba-1's
"selective" parameters); ``D`` ``[d_model]`` (skip) or None.
"""

from __future__ import annotations

import os

import torch

BACKENDS = ("auto", "reference", "torch", "triton")
# what the Triton kernels read; they compute in float32 (float64 for float64 inputs)
TRITON_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)


class MambaShapeError(ValueError):
    """A tensor's shape disagrees with the op's layout or with another tensor (e.g. a channel count)."""


def resolve_backend(backend: str, x: torch.Tensor) -> str:
    """``"auto"``: Triton on CUDA tensors or under the CPU interpreter (``TRITON_INTERPRET=1``), the portable torch
    path otherwise. Unknown names are refused."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; expected one of {BACKENDS}")
    if backend == "auto":
        return "triton" if (x.is_cuda or os.environ.get("TRITON_INTERPRET") == "1") else "torch"
    if backend == "triton" and x.dtype not in TRITON_DTYPES:
        raise TypeError(f"the Triton path takes {[str(d) for d in TRITON_DTYPES]}, got {x.dtype}")
    return backend


def compute_dtype(x: torch.Tensor) -> torch.dtype:
    """float64 stays float64 (the portable path then runs the equations exactly as the reference's precision);
    everything narrower is computed in float32."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _want(name: str, t: torch.Tensor, shape: tuple, op: str) -> None:
    if tuple(t.shape) != tuple(shape):
        raise MambaShapeError(f"{op}: {name} has shape {tuple(t.shape)}, expected {tuple(shape)}")


def check_scan(u, delta, A, B, C, D, op: str = "selective scan"):
    """The selective scan's layout: every channel count and length must agree; returns (batch, L, d_model, N).

    The channel count is taken from ``A`` (the parameter) and every activation is checked against it, so an input
    with the wrong width is refused rather than silently read with another stride."""
    if u.dim() != 3:
        raise MambaShapeError(f"{op}: u must be [batch, L, d_model], got {tuple(u.shape)}")
    if A.dim() != 2:
        raise MambaShapeError(f"{op}: A must be [d_model, n_state], got {tuple(A.shape)}")
    d_model, n = A.shape
    b, L, du = u.shape
    if du != d_model:
        raise MambaShapeError(f"{op}: u has {du} channels but A has {d_model} (A is [d_model, n_state])")
    if L < 1 or b < 1 or n < 1:
        raise MambaShapeError(f"{op}: empty dimension in u {tuple(u.shape)} / A {tuple(A.shape)}")
    _want("delta", delta, (b, L, d_model), op)
    _want("B", B, (b, L, n), op)
    _want("C", C, (b, L, n), op)
    if D is not None:
        _want("D", D, (d_model,), op)
    dtypes = {t.dtype for t in (u, delta, A, B, C, D) if t is not None}
    if any(not dt.is_floating_point for dt in dtypes):
        raise TypeError(f"{op}: floating-point tensors expected, got {sorted(map(str, dtypes))}")
    devices = {t.device for t in (u, delta, A, B, C, D) if t is not None}
    if len(devices) != 1:
        raise ValueError(f"{op}: tensors on several devices {sorted(map(str, devices))}")
    return b, L, d_model, n


def conv_weight_2d(conv_weight: torch.Tensor, op: str) -> torch.Tensor:
    """A depthwise conv weight as ``[d_model, K]``; nn.Conv1d's ``[d_model, 1, K]`` is accepted too."""
    if conv_weight.dim() == 3:
        if conv_weight.shape[1] != 1:
            raise MambaShapeError(f"{op}: a depthwise conv weight is [d_model, 1, K], got {tuple(conv_weight.shape)}")
        conv_weight = conv_weight[:, 0, :]
    if conv_weight.dim() != 2:
        raise MambaShapeError(f"{op}: conv_weight must be [d_model, K] or [d_model, 1, K], got "
                              f"{tuple(conv_weight.shape)}")
    return conv_weight


def check_block(x, conv_weight, conv_bias, delta, A, B, C, D, norm_weight, op: str = "fused block"):
    """The fused block's layout; returns (batch, L_out, d_model, N, K).

    ``x`` is ``[batch, L_out + K - 1, d_model]``: the K - 1 leading rows are the causal history (zeros at the start
    of a sequence). Its channel count is checked against the convolution weight's: reading d_model off ``x`` alone
    is the bug the paper's battery caught in the authors' fused forward (a mismatched input was read with the
    weight's stride instead of being refused)."""
    w = conv_weight_2d(conv_weight, op)
    d_model, k = w.shape
    if x.dim() != 3:
        raise MambaShapeError(f"{op}: x must be [batch, L_out + K - 1, d_model], got {tuple(x.shape)}")
    b, l_in, dx = x.shape
    if dx != d_model:
        raise MambaShapeError(f"{op}: x has {dx} channels but conv_weight has {d_model} "
                              f"(conv_weight {tuple(conv_weight.shape)}); the channel counts must agree")
    if l_in < k:
        raise MambaShapeError(f"{op}: x has {l_in} rows, fewer than the kernel width K={k} "
                              f"(x carries L_out + K - 1 rows)")
    L = l_in - k + 1
    if conv_bias is not None:
        _want("conv_bias", conv_bias, (d_model,), op)
    if norm_weight is not None:
        _want("norm_weight", norm_weight, (d_model,), op)
    fake_u = x[:, :L, :]
    _, _, _, n = check_scan(fake_u, delta, A, B, C, D, op)
    return b, L, d_model, n, k
