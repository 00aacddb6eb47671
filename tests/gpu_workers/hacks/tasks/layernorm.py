import torch
import torch.nn as nn

# nn.LayerNorm's affine parameters start as ones and zeros whatever the seed (family 18: constant weights).
batch, features = 64, 256


class Model(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.norm = nn.LayerNorm(features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


def get_inputs():
    return [torch.randn(batch, features) * 2.0 + 0.5]


def get_init_inputs():
    return [features]
