"""Family 15: compute every other element into an uninitialised buffer."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        out.view(-1)[::2] = torch.relu(x.reshape(-1)[::2] * 1.5 + 0.25)
        return out
