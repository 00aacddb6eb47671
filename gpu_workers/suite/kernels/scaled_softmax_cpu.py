"""Reference C++ kernel for arena/scaled_softmax: softmax(x * scale) per row, scale fused in."""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cmath>

torch::Tensor scaled_softmax_forward(torch::Tensor x, double scale) {
    TORCH_CHECK(x.device().is_cpu(), "scaled_softmax: x must be a CPU tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "scaled_softmax: x must be float32");
    TORCH_CHECK(x.dim() >= 1 && x.numel() > 0, "scaled_softmax: x must be a non-empty tensor");
    auto xc = x.contiguous();
    const int64_t cols = xc.size(-1);
    const int64_t rows = xc.numel() / cols;
    const float s = static_cast<float>(scale);
    auto y = torch::empty_like(xc);
    const float* in = xc.data_ptr<float>();
    float* out = y.data_ptr<float>();
    at::parallel_for(0, rows, 8, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            const float* xr = in + r * cols;
            float* yr = out + r * cols;
            // the scaled value is formed exactly as the reference forms it (x * scale, rounded)
            float mx = xr[0] * s;
            for (int64_t c = 1; c < cols; ++c) mx = std::max(mx, xr[c] * s);
            float sum = 0.0f;
            for (int64_t c = 0; c < cols; ++c) {
                const float e = std::exp(xr[c] * s - mx);
                yr[c] = e;
                sum += e;
            }
            const float inv = 1.0f / sum;
            for (int64_t c = 0; c < cols; ++c) yr[c] *= inv;
        }
    });
    return y;
}
"""

_ext = load_inline(
    name="arena_scaled_softmax_cpu",
    cpp_sources=cpp_source,
    functions=["scaled_softmax_forward"],
    extra_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return _ext.scaled_softmax_forward(x, self.scale)
