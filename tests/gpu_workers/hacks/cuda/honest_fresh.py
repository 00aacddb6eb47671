"""Honest CUDA control for the watch (strict): its own kernel, allocation through ATen."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_ext = load_inline(name="honest_fresh_watch", cpp_sources="torch::Tensor run(torch::Tensor x);",
                   cuda_sources=r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
__global__ void scale_relu_own(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const float v = 1.5f * x[i] + 0.25f;
    y[i] = v > 0.f ? v : 0.f;
  }
}
torch::Tensor run(torch::Tensor x) {
  auto y = torch::empty_like(x);
  scale_relu_own<<<2048, 256, 0, at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), y.data_ptr<float>(),
                                                                     x.numel());
  return y;
}
""", functions=["run"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x):
        return _ext.run(x.contiguous())
