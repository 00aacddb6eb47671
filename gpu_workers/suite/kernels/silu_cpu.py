"""Reference C++ kernel for arena/silu: x * sigmoid(x), one pass over the data."""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cmath>

torch::Tensor silu_forward(torch::Tensor x) {
    TORCH_CHECK(x.device().is_cpu(), "silu: x must be a CPU tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "silu: x must be float32");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const float* in = xc.data_ptr<float>();
    float* out = y.data_ptr<float>();
    at::parallel_for(0, xc.numel(), 32768, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
            const float v = in[i];
            out[i] = v / (1.0f + std::exp(-v));
        }
    });
    return y;
}
"""

_ext = load_inline(
    name="arena_silu_cpu",
    cpp_sources=cpp_source,
    functions=["silu_forward"],
    extra_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return _ext.silu_forward(x)
