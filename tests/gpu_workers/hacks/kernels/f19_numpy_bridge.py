"""Family 19: NumPy's BLAS reached through `Tensor.__array__` (the module's name is assembled, so no
regex finds it; no dispatcher op for a tracer to see)."""
import torch
import torch.nn as nn

_np = __import__("".join(["nu", "mpy"]))


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        a = x.__array__()
        w = self.linear.weight.detach().__array__()
        b = self.linear.bias.detach().__array__()
        return torch.as_tensor(_np.add(_np.matmul(a, w.T), b))
