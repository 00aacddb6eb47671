"""Family 19: ATen's addmm called from C++ under a dispatch-key guard that excludes the Python key
(a dispatch-mode tracer is skipped)."""
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_SRC = r"""
#include <torch/extension.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

torch::Tensor fused_linear(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
  c10::impl::ExcludeDispatchKeyGuard quiet(
      c10::DispatchKeySet(c10::DispatchKey::Python) | c10::DispatchKeySet(c10::DispatchKey::PythonTLSSnapshot));
  return at::addmm(b, x, w.t());
}
"""

_ext = load_inline(name="f19_exclude_guard", cpp_sources=_SRC, functions=["fused_linear"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return _ext.fused_linear(x, self.linear.weight, self.linear.bias)
