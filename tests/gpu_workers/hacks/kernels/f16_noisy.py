"""Family 16: inside the tolerance but different every call (a racy or uninitialised read looks like this)."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x * 1.5 + 0.25) + torch.rand_like(x) * 1e-3
