"""Reference CUDA kernel for arena/sum_dim: sum over the middle dimension; coalesced column reads, the
reduced dimension split over threadIdx.y and combined in a fixed order."""

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

// Block (32, 8): threadIdx.x walks 32 consecutive inner columns (coalesced reads), threadIdx.y splits
// the reduced dimension 8 ways; the 8 partial sums are then added in a fixed order (deterministic).
__global__ void sum_dim1_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t red, int64_t inner) {
    __shared__ float partial[8][32];
    const int64_t b = blockIdx.y;
    const int64_t col = blockIdx.x * 32LL + threadIdx.x;
    float acc = 0.0f;
    if (col < inner) {
        const float* src = x + b * red * inner + col;
        for (int64_t r = threadIdx.y; r < red; r += 8) acc += src[r * inner];
    }
    partial[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && col < inner) {
        float total = partial[0][threadIdx.x];
#pragma unroll
        for (int i = 1; i < 8; ++i) total += partial[i][threadIdx.x];
        y[b * inner + col] = total;
    }
}

torch::Tensor sum_dim1_forward(torch::Tensor x, int64_t dim) {
    ARENA_CHECK_INPUT(x, "sum_dim");
    TORCH_CHECK(x.dim() == 3, "sum_dim: x must be 3-D");
    TORCH_CHECK(dim == 1, "sum_dim: this kernel reduces dimension 1");
    const at::cuda::CUDAGuard guard(x.device());
    auto xc = x.contiguous();
    const int64_t outer = xc.size(0), red = xc.size(1), inner = xc.size(2);
    auto y = torch::empty({outer, inner}, xc.options());
    if (y.numel() == 0) return y;
    TORCH_CHECK(red > 0, "sum_dim: empty reduction");
    TORCH_CHECK(outer <= 65535 && (inner + 31) / 32 <= INT32_MAX, "sum_dim: grid too large");
    const dim3 grid((unsigned int)((inner + 31) / 32), (unsigned int)outer);
    sum_dim1_kernel<<<grid, dim3(32, 8), 0, at::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<float>(), y.data_ptr<float>(), red, inner);
    ARENA_CHECK_LAUNCH("sum_dim");
    return y;
}
"""

cpp_source = "torch::Tensor sum_dim1_forward(torch::Tensor x, int64_t dim);"

_ext = load_inline(
    name="arena_sum_dim_cuda",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["sum_dim1_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return _ext.sum_dim1_forward(x, self.dim)
