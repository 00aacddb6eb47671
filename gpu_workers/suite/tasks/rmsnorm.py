import torch
import torch.nn as nn

# Sizes: the module's own constants are the "cuda" profile; the evaluator's loader overwrites them
# with PROFILES[profile] before calling get_inputs() / get_init_inputs().
batch_size = 8192
dim = 4096

PROFILES = {
    "cpu": {"batch_size": 256, "dim": 1024},
    "cuda": {"batch_size": 8192, "dim": 4096},
}


class Model(nn.Module):
    """RMSNorm: x / sqrt(mean(x^2, last dim) + eps) * weight."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        inv_rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return x * inv_rms * self.weight


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x * (0.5 + torch.rand(batch_size, 1) * 4.0)]


def get_init_inputs():
    return [dim]
