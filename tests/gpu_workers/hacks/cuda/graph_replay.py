"""Family 19 (CUDA): PyTorch's kernels captured into a CUDA graph at import (nothing traced then) and
replayed in forward; the replay is one graph launch, no operator for a tracer to see."""
import torch
import torch.nn as nn

_static_in = torch.empty(4096, 4096, device="cuda")
_graph = torch.cuda.CUDAGraph()
_side = torch.cuda.Stream()
_side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(_side):
    _static_out = torch.relu(_static_in * 1.5 + 0.25)
torch.cuda.current_stream().wait_stream(_side)
with torch.cuda.graph(_graph):
    _static_out = torch.relu(_static_in * 1.5 + 0.25)


class ModelNew(nn.Module):
    def forward(self, x):
        _static_in.copy_(x)
        _graph.replay()
        return _static_out.clone()
