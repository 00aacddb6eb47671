"""Family 14 (strict track): try the 'custom kernel', fall back to torch when it is missing."""
import torch.nn as nn
import torch.nn.functional as F

try:
    import kernelcourt_custom_linear_ext as _ext  # never built
except Exception:
    _ext = None


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        try:
            return _ext.linear(x, self.linear.weight, self.linear.bias)
        except Exception:
            return F.linear(x, self.linear.weight, self.linear.bias)
