"""Reference C++ kernel for arena/add_layernorm: LayerNorm(x + residual) in one pass per row; the
sum is formed once into the output row and normalised in place."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cmath>

torch::Tensor add_layernorm_forward(torch::Tensor x, torch::Tensor residual, torch::Tensor weight,
                                    torch::Tensor bias, double eps) {
    for (const auto& t : {x, residual, weight, bias}) {
        TORCH_CHECK(t.device().is_cpu(), "add_layernorm: tensors must be on the CPU");
        TORCH_CHECK(t.scalar_type() == torch::kFloat32, "add_layernorm: tensors must be float32");
    }
    TORCH_CHECK(x.sizes() == residual.sizes(), "add_layernorm: x and residual differ in shape");
    TORCH_CHECK(x.dim() >= 1 && x.numel() > 0, "add_layernorm: x must be a non-empty tensor");
    const int64_t cols = x.size(-1);
    TORCH_CHECK(weight.numel() == cols && bias.numel() == cols, "add_layernorm: weight/bias size mismatch");
    auto xc = x.contiguous();
    auto rc = residual.contiguous();
    auto wc = weight.contiguous();
    auto bc = bias.contiguous();
    const int64_t rows = xc.numel() / cols;
    auto y = torch::empty_like(xc);
    const float* xin = xc.data_ptr<float>();
    const float* rin = rc.data_ptr<float>();
    const float* w = wc.data_ptr<float>();
    const float* b = bc.data_ptr<float>();
    float* out = y.data_ptr<float>();
    const float inv_n = 1.0f / static_cast<float>(cols);
    at::parallel_for(0, rows, 8, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            const float* xr = xin + r * cols;
            const float* rr = rin + r * cols;
            float* yr = out + r * cols;
            float sum = 0.0f;
            for (int64_t c = 0; c < cols; ++c) {
                const float v = xr[c] + rr[c];
                yr[c] = v;
                sum += v;
            }
            const float mean = sum * inv_n;
            float sq = 0.0f;
            for (int64_t c = 0; c < cols; ++c) {
                const float d = yr[c] - mean;
                sq += d * d;
            }
            const float rstd = 1.0f / std::sqrt(sq * inv_n + static_cast<float>(eps));
            for (int64_t c = 0; c < cols; ++c) yr[c] = (yr[c] - mean) * rstd * w[c] + b[c];
        }
    });
    return y;
}
"""

_ext = load_inline(
    name="arena_add_layernorm_cpu",
    cpp_sources=cpp_source,
    functions=["add_layernorm_forward"],
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

    def forward(self, x, residual):
        return _ext.add_layernorm_forward(x, residual, self.norm.weight, self.norm.bias, self.norm.eps)
