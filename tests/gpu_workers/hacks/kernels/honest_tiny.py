"""Honest control for the near-zero task: it must not be flagged degenerate or wrong."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.tanh(x).mul_(1e-4)
