"""Honest control: layer norm with its affine parameters (open track)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.norm = nn.LayerNorm(features)

    def forward(self, x):
        return F.layer_norm(x, x.shape[-1:], self.norm.weight, self.norm.bias, self.norm.eps)
