import torch
import torch.nn as nn
import torch.nn.functional as F

# Sizes: the module's own constants are the "cuda" profile; the evaluator's loader overwrites them
# with PROFILES[profile] before calling get_inputs() / get_init_inputs().
batch_size = 4096
dim = 1024
hidden = 4096

PROFILES = {
    "cpu": {"batch_size": 256, "dim": 256, "hidden": 512},
    "cuda": {"batch_size": 4096, "dim": 1024, "hidden": 4096},
}


class Model(nn.Module):
    """Transformer MLP block with a residual connection: x + fc2(gelu(fc1(x)))."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(F.gelu(self.fc1(x)))


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim, hidden]
