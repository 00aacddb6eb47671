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
    """LayerNorm over the last dimension, with a learned (non-trivial) weight and bias."""

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.norm = nn.LayerNorm(dim, eps=eps)
        with torch.no_grad():  # not the identity affine map, so a kernel must really apply it
            self.norm.weight.copy_(1.0 + 0.1 * torch.randn(dim))
            self.norm.bias.copy_(0.1 * torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


def get_inputs():
    # an offset and a scale per row, so mean and variance really matter
    x = torch.randn(batch_size, dim)
    return [x * (1.0 + torch.rand(batch_size, 1) * 3.0) + torch.randn(batch_size, 1)]


def get_init_inputs():
    return [dim]
