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
    """LayerNorm(x + residual), the post-residual norm of a transformer layer."""

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.norm = nn.LayerNorm(dim, eps=eps)
        with torch.no_grad():  # not the identity affine map, so a kernel must really apply it
            self.norm.weight.copy_(1.0 + 0.1 * torch.randn(dim))
            self.norm.bias.copy_(0.1 * torch.randn(dim))

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.norm(x + residual)


def get_inputs():
    x = torch.randn(batch_size, dim) * (1.0 + torch.rand(batch_size, 1) * 2.0)
    residual = torch.randn(batch_size, dim) + torch.randn(batch_size, 1)
    return [x, residual]


def get_init_inputs():
    return [dim]
