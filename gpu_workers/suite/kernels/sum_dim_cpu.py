"""Reference C++ kernel for arena/sum_dim: sum over the middle dimension of a 3-D tensor.

For each outer index the rows of the reduced dimension are added into the output row in order, so
the inner loop is a unit-stride add and the summation order is fixed (deterministic).
"""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <ATen/Parallel.h>

torch::Tensor sum_dim1_forward(torch::Tensor x, int64_t dim) {
    TORCH_CHECK(x.device().is_cpu(), "sum_dim: x must be a CPU tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "sum_dim: x must be float32");
    TORCH_CHECK(x.dim() == 3, "sum_dim: x must be 3-D");
    TORCH_CHECK(dim == 1, "sum_dim: this kernel reduces dimension 1");
    auto xc = x.contiguous();
    const int64_t outer = xc.size(0), red = xc.size(1), inner = xc.size(2);
    auto y = torch::empty({outer, inner}, xc.options());
    const float* in = xc.data_ptr<float>();
    float* out = y.data_ptr<float>();
    at::parallel_for(0, outer, 1, [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
            float* o = out + b * inner;
            const float* src = in + b * red * inner;
            for (int64_t i = 0; i < inner; ++i) o[i] = src[i];
            for (int64_t r = 1; r < red; ++r) {
                const float* row = src + r * inner;
                for (int64_t i = 0; i < inner; ++i) o[i] += row[i];
            }
        }
    });
    return y;
}
"""

_ext = load_inline(
    name="arena_sum_dim_cpu",
    cpp_sources=cpp_source,
    functions=["sum_dim1_forward"],
    extra_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return _ext.sum_dim1_forward(x, self.dim)
