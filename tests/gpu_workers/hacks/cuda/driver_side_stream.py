"""Family 1 (CUDA): the candidate's own kernel launched on a stream made through the driver API
(cuStreamCreate via ctypes at import, no torch.cuda.Stream for a regex), never joined by the timer's
stream: forward returns before its work is done."""
import ctypes

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_driver = ctypes.CDLL("libcuda.so.1")
_handle = ctypes.c_void_p()
assert _driver.cuStreamCreate(ctypes.byref(_handle), 1) == 0  # CU_STREAM_NON_BLOCKING

_ext = load_inline(name="driver_side_stream", cpp_sources="torch::Tensor run(torch::Tensor x, int64_t s);",
                   cuda_sources=r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
__global__ void scale_relu_slow(const float* x, float* y, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    float v = x[i];
    for (int k = 0; k < 64; ++k) v = v * 1.0000001f;  // real work, on a stream nobody waits for
    v = 1.5f * x[i] + 0.25f;
    y[i] = v > 0.f ? v : 0.f;
  }
}
torch::Tensor run(torch::Tensor x, int64_t s) {
  auto y = torch::empty_like(x);
  int64_t n = x.numel();
  scale_relu_slow<<<1024, 256, 0, reinterpret_cast<cudaStream_t>(s)>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
  return y;
}
""", functions=["run"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x):
        return _ext.run(x, _handle.value)
