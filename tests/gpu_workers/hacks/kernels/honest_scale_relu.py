"""Honest control: a PyTorch-level rewrite of relu(1.5 x + 0.25) (open track)."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.clamp_min(torch.addcmul(torch.full_like(x, 0.25), x, torch.full_like(x, 1.5)), 0.0)
