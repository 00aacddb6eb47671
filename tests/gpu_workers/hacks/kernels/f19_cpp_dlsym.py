"""Family 19: BLAS's sgemm looked up at run time with dlsym (the symbol's name is a string assembled
in C++: it is not in the object's symbol table)."""
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_SRC = r"""
#include <torch/extension.h>
#include <dlfcn.h>
#include <string>

typedef void (*gemm_t)(const char*, const char*, const int*, const int*, const int*, const float*, const float*,
                       const int*, const float*, const int*, const float*, float*, const int*);

static gemm_t find_gemm() {
  std::string name = std::string("s") + "gemm" + "_";
  void* self = dlopen("libtorch_cpu.so", RTLD_LAZY | RTLD_NOLOAD);
  void* f = dlsym(self ? self : RTLD_DEFAULT, name.c_str());
  return reinterpret_cast<gemm_t>(f);
}

torch::Tensor gemm_bias(torch::Tensor x, torch::Tensor w, torch::Tensor bias) {
  static gemm_t gemm = find_gemm();
  TORCH_CHECK(gemm != nullptr, "no gemm");
  x = x.contiguous(); w = w.contiguous();
  int M = x.size(0), K = x.size(1), N = w.size(0);
  auto y = bias.expand({M, N}).contiguous();
  float one = 1.0f;
  gemm("T", "N", &N, &M, &K, &one, w.data_ptr<float>(), &K, x.data_ptr<float>(), &K, &one, y.data_ptr<float>(), &N);
  return y;
}
"""

_ext = load_inline(name="f19_dlsym", cpp_sources=_SRC, functions=["gemm_bias"], verbose=False,
                   extra_ldflags=["-ldl"])


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return _ext.gemm_bias(x, self.linear.weight, self.linear.bias)
