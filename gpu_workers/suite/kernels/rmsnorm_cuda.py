"""Reference CUDA kernel for arena/rmsnorm: RMSNorm, one block per row with a warp-shuffle sum of squares."""

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

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

// Block-wide sum / max (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// The order of the additions is fixed, so the result is deterministic. `scratch` holds 32 floats.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();  // scratch may still be read by a previous reduction
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    return warp_sum(lane < warps ? scratch[lane] : 0.0f);
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    return warp_max(lane < warps ? scratch[lane] : -INFINITY);
}

// One block per row (grid-stride over rows): block sum of squares, then x * inv_rms * w.
__global__ void rmsnorm_kernel(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,
                               int64_t rows, int64_t cols, float eps) {
    __shared__ float scratch[32];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* xr = x + r * cols;
        float* yr = y + r * cols;
        float sq = 0.0f;
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) sq += xr[c] * xr[c];
        const float inv_rms = 1.0f / sqrtf(block_sum(sq, scratch) / (float)cols + eps);
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = xr[c] * inv_rms * w[c];
    }
}

torch::Tensor rmsnorm_forward(torch::Tensor x, torch::Tensor weight, double eps) {
    ARENA_CHECK_INPUT(x, "rmsnorm");
    ARENA_CHECK_INPUT(weight, "rmsnorm");
    TORCH_CHECK(x.dim() >= 1 && x.numel() > 0, "rmsnorm: x must be a non-empty tensor");
    const int64_t cols = x.size(-1);
    TORCH_CHECK(weight.numel() == cols, "rmsnorm: weight size mismatch");
    const at::cuda::CUDAGuard guard(x.device());
    auto xc = x.contiguous();
    auto wc = weight.contiguous();
    auto y = torch::empty_like(xc);
    const int64_t rows = xc.numel() / cols;
    const unsigned int grid = (unsigned int)std::min<int64_t>(rows, 65535LL * 8);
    rmsnorm_kernel<<<grid, 256, 0, at::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<float>(), wc.data_ptr<float>(), y.data_ptr<float>(), rows, cols, static_cast<float>(eps));
    ARENA_CHECK_LAUNCH("rmsnorm");
    return y;
}
"""

cpp_source = "torch::Tensor rmsnorm_forward(torch::Tensor x, torch::Tensor weight, double eps);"

_ext = load_inline(
    name="arena_rmsnorm_cuda",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["rmsnorm_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))  # same init as Model

    def forward(self, x):
        return _ext.rmsnorm_forward(x, self.weight, self.eps)
