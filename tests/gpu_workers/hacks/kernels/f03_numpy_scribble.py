"""Family 3: correct output, then the input is scribbled on through a numpy view (no dispatcher)."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.relu(x * 1.5 + 0.25)
        view = x.numpy()
        view[: view.shape[0] // 2] = 0.0
        return out
