"""Reference CUDA kernel for arena/layernorm: LayerNorm, one block per row, two-pass mean/variance with
warp-shuffle reductions, then the affine map."""

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

// One block per row (grid-stride over rows): mean, then variance around it (two passes over the
// row, no cancellation), then the affine map.
__global__ void layernorm_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                 const float* __restrict__ b, float* __restrict__ y, int64_t rows,
                                 int64_t cols, float eps) {
    __shared__ float scratch[32];
    const float inv_n = 1.0f / (float)cols;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* xr = x + r * cols;
        float* yr = y + r * cols;
        float sum = 0.0f;
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) sum += xr[c];
        const float mean = block_sum(sum, scratch) * inv_n;
        float sq = 0.0f;
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
            const float d = xr[c] - mean;
            sq += d * d;
        }
        const float rstd = 1.0f / sqrtf(block_sum(sq, scratch) * inv_n + eps);
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = (xr[c] - mean) * rstd * w[c] + b[c];
    }
}

torch::Tensor layernorm_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps) {
    ARENA_CHECK_INPUT(x, "layernorm");
    ARENA_CHECK_INPUT(weight, "layernorm");
    ARENA_CHECK_INPUT(bias, "layernorm");
    TORCH_CHECK(x.dim() >= 1 && x.numel() > 0, "layernorm: x must be a non-empty tensor");
    const int64_t cols = x.size(-1);
    TORCH_CHECK(weight.numel() == cols && bias.numel() == cols, "layernorm: weight/bias size mismatch");
    const at::cuda::CUDAGuard guard(x.device());
    auto xc = x.contiguous();
    auto wc = weight.contiguous();
    auto bc = bias.contiguous();
    auto y = torch::empty_like(xc);
    const int64_t rows = xc.numel() / cols;
    const unsigned int grid = (unsigned int)std::min<int64_t>(rows, 65535LL * 8);
    layernorm_kernel<<<grid, 256, 0, at::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<float>(), wc.data_ptr<float>(), bc.data_ptr<float>(), y.data_ptr<float>(), rows, cols,
        static_cast<float>(eps));
    ARENA_CHECK_LAUNCH("layernorm");
    return y;
}
"""

cpp_source = "torch::Tensor layernorm_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps);"

_ext = load_inline(
    name="arena_layernorm_cuda",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["layernorm_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.norm = nn.LayerNorm(dim, eps=eps)
        with torch.no_grad():  # same init as Model (the evaluator also copies its state dict)
            self.norm.weight.copy_(1.0 + 0.1 * torch.randn(dim))
            self.norm.bias.copy_(0.1 * torch.randn(dim))

    def forward(self, x):
        return _ext.layernorm_forward(x, self.norm.weight, self.norm.bias, self.norm.eps)
