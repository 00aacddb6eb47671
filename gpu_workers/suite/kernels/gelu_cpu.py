"""Reference C++ kernel for arena/gelu: exact (erf) GELU, one pass over the data."""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cmath>

torch::Tensor gelu_forward(torch::Tensor x) {
    TORCH_CHECK(x.device().is_cpu(), "gelu: x must be a CPU tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "gelu: x must be float32");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const float* in = xc.data_ptr<float>();
    float* out = y.data_ptr<float>();
    at::parallel_for(0, xc.numel(), 32768, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
            const float v = in[i];
            out[i] = 0.5f * v * (1.0f + std::erf(v * 0.70710678118654752440f));
        }
    });
    return y;
}
"""

_ext = load_inline(
    name="arena_gelu_cpu",
    cpp_sources=cpp_source,
    functions=["gelu_forward"],
    extra_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return _ext.gelu_forward(x)
