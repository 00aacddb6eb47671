"""Family 19 (CUDA): cuBLAS through PyTorch with the Python dispatch key excluded; the 'custom' kernel
is defined and built but never launched (a decoy, family 28)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_decoy = load_inline(name="cublas_below_tracer_decoy", cpp_sources="torch::Tensor noop(torch::Tensor x);",
                     cuda_sources=r"""
#include <torch/extension.h>
__global__ void noop_kernel(float* x) {}
torch::Tensor noop(torch::Tensor x) { return x; }
""", functions=["noop"], verbose=False)
_quiet = getattr(torch._C, "_Disable" + "TorchDispatch")


class ModelNew(nn.Module):
    def forward(self, x):
        with _quiet():
            n = x.shape[-1]
            eye = torch.eye(n, device=x.device) * 1.5
            return torch.relu(torch.matmul(x.view(-1, n), eye).view_as(x) + 0.25)
