"""Reference CUDA kernel for arena/maxpool1d: 1-D max pooling, one thread per output element."""

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

// One thread per output element (grid-stride); the window's out-of-range taps are the implicit
// -inf padding, so they are skipped.
__global__ void maxpool1d_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t total, int64_t len,
                                 int64_t out_len, int kernel_size, int stride, int padding) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / out_len, o = i % out_len;
        const float* xr = x + r * len;
        const int64_t start = o * stride - padding;
        float m = -INFINITY;
        for (int k = 0; k < kernel_size; ++k) {
            const int64_t j = start + k;
            if (j >= 0 && j < len) m = fmaxf(m, xr[j]);
        }
        y[i] = m;
    }
}

torch::Tensor maxpool1d_forward(torch::Tensor x, int64_t kernel_size, int64_t stride, int64_t padding) {
    ARENA_CHECK_INPUT(x, "maxpool1d");
    TORCH_CHECK(x.dim() == 3, "maxpool1d: x must be (N, C, L)");
    TORCH_CHECK(kernel_size > 0 && stride > 0 && padding >= 0 && 2 * padding <= kernel_size,
                "maxpool1d: bad pooling parameters");
    const at::cuda::CUDAGuard guard(x.device());
    auto xc = x.contiguous();
    const int64_t len = xc.size(2);
    const int64_t out_len = (len + 2 * padding - kernel_size) / stride + 1;
    TORCH_CHECK(out_len > 0, "maxpool1d: input shorter than the window");
    auto y = torch::empty({xc.size(0), xc.size(1), out_len}, xc.options());
    const int64_t total = y.numel();
    if (total == 0) return y;
    maxpool1d_kernel<<<arena_grid(total, 256), 256, 0, at::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<float>(), y.data_ptr<float>(), total, len, out_len, (int)kernel_size, (int)stride, (int)padding);
    ARENA_CHECK_LAUNCH("maxpool1d");
    return y;
}
"""

cpp_source = "torch::Tensor maxpool1d_forward(torch::Tensor x, int64_t kernel_size, int64_t stride, int64_t padding);"

_ext = load_inline(
    name="arena_maxpool1d_cuda",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["maxpool1d_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, kernel_size: int, stride: int, padding: int):
        super().__init__()
        # the same module as Model's, used only to hold the pooling parameters
        self.pool = nn.MaxPool1d(kernel_size=kernel_size, stride=stride, padding=padding)

    def forward(self, x):
        return _ext.maxpool1d_forward(x, self.pool.kernel_size, self.pool.stride, self.pool.padding)
