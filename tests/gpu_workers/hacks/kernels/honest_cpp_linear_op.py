"""Honest control (strict): the linear as the candidate's own registered operator (TORCH_LIBRARY),
its own loops, outputs allocated through ATen."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_SRC = r"""
#include <torch/extension.h>

torch::Tensor own_linear(const torch::Tensor& x_, const torch::Tensor& w_, const torch::Tensor& b_) {
  auto x = x_.contiguous(), w = w_.contiguous(), b = b_.contiguous();
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  auto y = torch::empty({M, N}, x.options());
  const float *px = x.data_ptr<float>(), *pw = w.data_ptr<float>(), *pb = b.data_ptr<float>();
  float* py = y.data_ptr<float>();
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      float acc = pb[j];
      for (int64_t k = 0; k < K; ++k) acc += px[i * K + k] * pw[j * K + k];
      py[i * N + j] = acc;
    }
  return y;
}

TORCH_LIBRARY(honest_own, m) { m.def("linear(Tensor x, Tensor w, Tensor b) -> Tensor"); }
TORCH_LIBRARY_IMPL(honest_own, CPU, m) { m.impl("linear", &own_linear); }
"""

load_inline(name="honest_cpp_linear_op", cpp_sources=_SRC, is_python_module=False, verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.ops.honest_own.linear(x, self.linear.weight, self.linear.bias)
