import torch
import torch.nn as nn

# Sizes: the module's own constants are the "cuda" profile; the evaluator's loader overwrites them
# with PROFILES[profile] before calling get_inputs() / get_init_inputs().
M = 2048
K = 2048
N = 2048

PROFILES = {
    "cpu": {"M": 256, "K": 256, "N": 256},
    "cuda": {"M": 2048, "K": 2048, "N": 2048},
}


class Model(nn.Module):
    """C = A @ B for A (M x K) and B (K x N), fp32."""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
