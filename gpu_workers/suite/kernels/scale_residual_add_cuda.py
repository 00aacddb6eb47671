"""Reference CUDA kernel for arena/scale_residual_add: residual + scale * (x + bias[col]), one fused pass."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime.h>

#define ARENA_CHECK_INPUT(t, what)                                                       \
    TORCH_CHECK((t).is_cuda(), what ": tensors must be CUDA tensors");                   \
    TORCH_CHECK((t).scalar_type() == torch::kFloat32, what ": tensors must be float32")

#define ARENA_CHECK_LAUNCH(what)                                                         \
    do {                                                                                 \
        cudaError_t err_ = cudaGetLastError();                                           \
        TORCH_CHECK(err_ == cudaSuccess, what ": kernel launch failed: ", cudaGetErrorString(err_)); \
    } while (0)

// A grid of at most this many blocks covers any size through grid-stride loops.
static inline unsigned int arena_grid(int64_t work, int threads) {
    const int64_t blocks = (work + threads - 1) / threads;
    return static_cast<unsigned int>(std::max<int64_t>(1, std::min<int64_t>(blocks, 65535LL * 8)));
}

// One thread per element (grid-stride): residual + scale * (x + bias[col]).
__global__ void scale_residual_add_kernel(const float* __restrict__ x, const float* __restrict__ res,
                                          const float* __restrict__ bias, float* __restrict__ y, int64_t n,
                                          int64_t cols, float scale) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        y[i] = res[i] + scale * (x[i] + bias[i % cols]);
    }
}

torch::Tensor scale_residual_add_forward(torch::Tensor x, torch::Tensor residual, torch::Tensor bias, double scale) {
    ARENA_CHECK_INPUT(x, "scale_residual_add");
    ARENA_CHECK_INPUT(residual, "scale_residual_add");
    ARENA_CHECK_INPUT(bias, "scale_residual_add");
    TORCH_CHECK(x.sizes() == residual.sizes(), "scale_residual_add: x and residual differ in shape");
    TORCH_CHECK(x.dim() >= 1 && x.numel() > 0, "scale_residual_add: x must be a non-empty tensor");
    const int64_t cols = x.size(-1);
    TORCH_CHECK(bias.numel() == cols, "scale_residual_add: bias size mismatch");
    const at::cuda::CUDAGuard guard(x.device());
    auto xc = x.contiguous();
    auto rc = residual.contiguous();
    auto bc = bias.contiguous();
    auto y = torch::empty_like(xc);
    const int64_t n = xc.numel();
    scale_residual_add_kernel<<<arena_grid(n, 256), 256, 0, at::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<float>(), rc.data_ptr<float>(), bc.data_ptr<float>(), y.data_ptr<float>(), n, cols,
        static_cast<float>(scale));
    ARENA_CHECK_LAUNCH("scale_residual_add");
    return y;
}
"""

cpp_source = "torch::Tensor scale_residual_add_forward(torch::Tensor x, torch::Tensor residual, torch::Tensor bias, double scale);"

_ext = load_inline(
    name="arena_scale_residual_add_cuda",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["scale_residual_add_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim: int, scale: float):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(dim))  # same init as Model

    def forward(self, x, residual):
        return _ext.scale_residual_add_forward(x, residual, self.bias, self.scale)
