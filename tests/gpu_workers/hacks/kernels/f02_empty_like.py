"""Family 2: return torch.empty_like without computing (the Sakana allocator trick)."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.empty_like(x)
