"""Reference C++ kernel for arena/rmsnorm: per row, mean of squares, then x * rsqrt(ms + eps) * w."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cmath>

torch::Tensor rmsnorm_forward(torch::Tensor x, torch::Tensor weight, double eps) {
    TORCH_CHECK(x.device().is_cpu() && weight.device().is_cpu(), "rmsnorm: tensors must be on the CPU");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && weight.scalar_type() == torch::kFloat32,
                "rmsnorm: tensors must be float32");
    TORCH_CHECK(x.dim() >= 1 && x.numel() > 0, "rmsnorm: x must be a non-empty tensor");
    const int64_t cols = x.size(-1);
    TORCH_CHECK(weight.numel() == cols, "rmsnorm: weight size mismatch");
    auto xc = x.contiguous();
    auto wc = weight.contiguous();
    const int64_t rows = xc.numel() / cols;
    auto y = torch::empty_like(xc);
    const float* in = xc.data_ptr<float>();
    const float* w = wc.data_ptr<float>();
    float* out = y.data_ptr<float>();
    at::parallel_for(0, rows, 8, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            const float* xr = in + r * cols;
            float* yr = out + r * cols;
            float sq = 0.0f;
            for (int64_t c = 0; c < cols; ++c) sq += xr[c] * xr[c];
            const float inv_rms = 1.0f / std::sqrt(sq / static_cast<float>(cols) + static_cast<float>(eps));
            for (int64_t c = 0; c < cols; ++c) yr[c] = xr[c] * inv_rms * w[c];
        }
    });
    return y;
}
"""

_ext = load_inline(
    name="arena_rmsnorm_cpu",
    cpp_sources=cpp_source,
    functions=["rmsnorm_forward"],
    extra_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))  # same init as Model

    def forward(self, x):
        return _ext.rmsnorm_forward(x, self.weight, self.eps)
