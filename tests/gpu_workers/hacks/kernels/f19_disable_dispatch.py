"""Family 19: PyTorch's linear run with the Python dispatch key excluded, so a dispatch-mode tracer
never sees it (the guard's name assembled at run time, past the static rules)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

_quiet = getattr(torch._C, "_Disable" + "TorchDispatch")


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        with _quiet():
            return F.linear(x, self.linear.weight, self.linear.bias)
