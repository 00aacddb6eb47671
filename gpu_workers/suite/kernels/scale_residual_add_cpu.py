"""Reference C++ kernel for arena/scale_residual_add: residual + scale * (x + bias[col]), one pass."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>

torch::Tensor scale_residual_add_forward(torch::Tensor x, torch::Tensor residual, torch::Tensor bias,
                                         double scale) {
    for (const auto& t : {x, residual, bias}) {
        TORCH_CHECK(t.device().is_cpu(), "scale_residual_add: tensors must be on the CPU");
        TORCH_CHECK(t.scalar_type() == torch::kFloat32, "scale_residual_add: tensors must be float32");
    }
    TORCH_CHECK(x.sizes() == residual.sizes(), "scale_residual_add: x and residual differ in shape");
    TORCH_CHECK(x.dim() >= 1 && x.numel() > 0, "scale_residual_add: x must be a non-empty tensor");
    const int64_t cols = x.size(-1);
    TORCH_CHECK(bias.numel() == cols, "scale_residual_add: bias size mismatch");
    auto xc = x.contiguous();
    auto rc = residual.contiguous();
    auto bc = bias.contiguous();
    const int64_t rows = xc.numel() / cols;
    const float s = static_cast<float>(scale);
    auto y = torch::empty_like(xc);
    const float* xin = xc.data_ptr<float>();
    const float* rin = rc.data_ptr<float>();
    const float* b = bc.data_ptr<float>();
    float* out = y.data_ptr<float>();
    at::parallel_for(0, rows, 16, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            const int64_t base = r * cols;
            for (int64_t c = 0; c < cols; ++c) out[base + c] = rin[base + c] + s * (xin[base + c] + b[c]);
        }
    });
    return y;
}
"""

_ext = load_inline(
    name="arena_scale_residual_add_cpu",
    cpp_sources=cpp_source,
    functions=["scale_residual_add_forward"],
    extra_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim: int, scale: float):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(dim))  # same init as Model

    def forward(self, x, residual):
        return _ext.scale_residual_add_forward(x, residual, self.bias, self.scale)
