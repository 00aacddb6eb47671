"""Reference C++ kernel for arena/layernorm: per-row mean, then variance around it (two passes, so
no cancellation), then the affine map."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cmath>

torch::Tensor layernorm_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps) {
    TORCH_CHECK(x.device().is_cpu() && weight.device().is_cpu() && bias.device().is_cpu(),
                "layernorm: tensors must be on the CPU");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && weight.scalar_type() == torch::kFloat32 &&
                bias.scalar_type() == torch::kFloat32, "layernorm: tensors must be float32");
    TORCH_CHECK(x.dim() >= 1 && x.numel() > 0, "layernorm: x must be a non-empty tensor");
    const int64_t cols = x.size(-1);
    TORCH_CHECK(weight.numel() == cols && bias.numel() == cols, "layernorm: weight/bias size mismatch");
    auto xc = x.contiguous();
    auto wc = weight.contiguous();
    auto bc = bias.contiguous();
    const int64_t rows = xc.numel() / cols;
    auto y = torch::empty_like(xc);
    const float* in = xc.data_ptr<float>();
    const float* w = wc.data_ptr<float>();
    const float* b = bc.data_ptr<float>();
    float* out = y.data_ptr<float>();
    const float inv_n = 1.0f / static_cast<float>(cols);
    at::parallel_for(0, rows, 8, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            const float* xr = in + r * cols;
            float* yr = out + r * cols;
            float sum = 0.0f;
            for (int64_t c = 0; c < cols; ++c) sum += xr[c];
            const float mean = sum * inv_n;
            float sq = 0.0f;
            for (int64_t c = 0; c < cols; ++c) {
                const float d = xr[c] - mean;
                sq += d * d;
            }
            const float rstd = 1.0f / std::sqrt(sq * inv_n + static_cast<float>(eps));
            for (int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - mean) * rstd * w[c] + b[c];
        }
    });
    return y;
}
"""

_ext = load_inline(
    name="arena_layernorm_cpu",
    cpp_sources=cpp_source,
    functions=["layernorm_forward"],
    extra_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.norm = nn.LayerNorm(dim, eps=eps)
        with torch.no_grad():  # same init as Model (the evaluator also copies its state dict)
            self.norm.weight.copy_(1.0 + 0.1 * torch.randn(dim))
            self.norm.bias.copy_(0.1 * torch.randn(dim))

    def forward(self, x):
        return _ext.layernorm_forward(x, self.norm.weight, self.norm.bias, self.norm.eps)
