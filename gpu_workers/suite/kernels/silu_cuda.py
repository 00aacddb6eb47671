"""Reference CUDA kernel for arena/silu: x * sigmoid(x), one grid-stride pass over the data."""

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

__global__ void silu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float v = x[i];
        y[i] = v / (1.0f + expf(-v));
    }
}

torch::Tensor silu_forward(torch::Tensor x) {
    ARENA_CHECK_INPUT(x, "silu");
    const at::cuda::CUDAGuard guard(x.device());
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const int64_t n = xc.numel();
    if (n == 0) return y;
    silu_kernel<<<arena_grid(n, 256), 256, 0, at::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<float>(), y.data_ptr<float>(), n);
    ARENA_CHECK_LAUNCH("silu");
    return y;
}
"""

cpp_source = "torch::Tensor silu_forward(torch::Tensor x);"

_ext = load_inline(
    name="arena_silu_cuda",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["silu_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return _ext.silu_forward(x)
