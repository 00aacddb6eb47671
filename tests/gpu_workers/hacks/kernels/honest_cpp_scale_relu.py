"""Honest control (strict): relu(1.5 x + 0.25) in its own C++ loop; allocation through ATen."""
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_SRC = r"""
#include <torch/extension.h>

torch::Tensor scale_relu(torch::Tensor x) {
  TORCH_CHECK(x.scalar_type() == torch::kFloat32, "float32 only");
  auto in = x.contiguous();
  auto out = torch::empty_like(in);
  const float* src = in.data_ptr<float>();
  float* dst = out.data_ptr<float>();
  const int64_t n = in.numel();
  for (int64_t i = 0; i < n; ++i) {
    float v = src[i] * 1.5f + 0.25f;
    dst[i] = v > 0.f ? v : 0.f;
  }
  return out;
}
"""

_ext = load_inline(name="honest_cpp_scale_relu", cpp_sources=_SRC, functions=["scale_relu"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x):
        return _ext.scale_relu(x)
