"""Reference C++ kernel for arena/maxpool1d: 1-D max pooling with implicit -inf padding."""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <limits>

torch::Tensor maxpool1d_forward(torch::Tensor x, int64_t kernel_size, int64_t stride, int64_t padding) {
    TORCH_CHECK(x.device().is_cpu(), "maxpool1d: x must be a CPU tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "maxpool1d: x must be float32");
    TORCH_CHECK(x.dim() == 3, "maxpool1d: x must be (N, C, L)");
    TORCH_CHECK(kernel_size > 0 && stride > 0 && padding >= 0 && 2 * padding <= kernel_size,
                "maxpool1d: bad pooling parameters");
    auto xc = x.contiguous();
    const int64_t rows = xc.size(0) * xc.size(1), len = xc.size(2);
    const int64_t out_len = (len + 2 * padding - kernel_size) / stride + 1;
    TORCH_CHECK(out_len > 0, "maxpool1d: input shorter than the window");
    auto y = torch::empty({xc.size(0), xc.size(1), out_len}, xc.options());
    const float* in = xc.data_ptr<float>();
    float* out = y.data_ptr<float>();
    at::parallel_for(0, rows, 16, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            const float* xr = in + r * len;
            float* yr = out + r * out_len;
            for (int64_t o = 0; o < out_len; ++o) {
                const int64_t start = o * stride - padding;
                float m = -std::numeric_limits<float>::infinity();
                for (int64_t k = 0; k < kernel_size; ++k) {
                    const int64_t i = start + k;
                    if (i >= 0 && i < len && xr[i] > m) m = xr[i];
                }
                yr[o] = m;
            }
        }
    });
    return y;
}
"""

_ext = load_inline(
    name="arena_maxpool1d_cpu",
    cpp_sources=cpp_source,
    functions=["maxpool1d_forward"],
    extra_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, kernel_size: int, stride: int, padding: int):
        super().__init__()
        # the same module as Model's, used only to hold the pooling parameters
        self.pool = nn.MaxPool1d(kernel_size=kernel_size, stride=stride, padding=padding)

    def forward(self, x):
        return _ext.maxpool1d_forward(x, self.pool.kernel_size, self.pool.stride, self.pool.padding)
