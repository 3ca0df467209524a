import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_SRC = r"""
#include <torch/extension.h>
__global__ void relu_half_kernel(const float* x, float* y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) { float v = x[i]; y[i] = v > 0.f ? 0.5f * v : 0.f; }
}
torch::Tensor relu_half(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int64_t n = x.numel();
    relu_half_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""
_ext = None


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        global _ext
        if _ext is None:
            _ext = load_inline("relu_half_ext", cpp_sources="torch::Tensor relu_half(torch::Tensor x);",
                               cuda_sources=_SRC, functions=["relu_half"])
        return _ext.relu_half(x.contiguous())
