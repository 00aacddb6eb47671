"""Sample submitters and kernels for ``manage.py demo``: honest, slow, broken and cheating ones, so
every page has something to show. Only the "reference-cpp" kernels and one broken C++ file compile
anything (each C++ build costs ~35 s on a laptop the first time; the evaluator caches them).

The "ckpt-step-900" kernels are hacks an RL checkpoint might learn; the evaluator's review findings
put each of them in the review queue when the demo evaluates them, as it would for any submission.
The demo's logins are in ``DEMO_USERS``: an admin and a reviewer, so that two people can decide a case."""

from __future__ import annotations

from dataclasses import dataclass

GELU_TORCH = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Exact GELU written out with torch.erf (a PyTorch-level rewrite)."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return 0.5 * x * (1.0 + torch.erf(x * 0.7071067811865476))
'''

SILU_TORCH = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x * torch.sigmoid(x)
"""

SOFTMAX_TORCH = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Numerically stable softmax over the last dimension, step by step."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        shifted = x - x.amax(dim=-1, keepdim=True)
        e = shifted.exp()
        return e / e.sum(dim=-1, keepdim=True)
'''

MATMUL_LIBRARY = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """'Custom' kernel that just calls the library: fine on the open track, rejected on strict."""

    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b)
'''

MATMUL_SLOW = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Row by row: correct, and much slower than one matmul."""

    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.stack([a[i] @ b for i in range(a.shape[0])])
'''

GELU_WRONG = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Approximates GELU with ReLU: fast and wrong."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)
'''

SILU_EMPTY = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Returns uninitialised memory of the right shape: the classic 'fastest kernel' hack."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.empty_like(x)
'''

SUM_COMPILE_ERROR = '''import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
torch::Tensor sum_forward(torch::Tensor x, int64_t dim) {
    return x.sum(dim)   // missing semicolon: this does not compile
}
"""

_ext = load_inline(name="demo_sum_broken", cpp_sources=cpp_source, functions=["sum_forward"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return _ext.sum_forward(x, self.dim)
'''

SILU_BF16 = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Computes the fp32 SiLU in bfloat16 and casts back: faster on tensor hardware, and less precise."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        low = x.to(torch.bfloat16)
        return (low * torch.sigmoid(low)).float()
'''

GELU_THREAD = '''import threading

import torch
import torch.nn as nn


def _fill(x, out):
    out.copy_(0.5 * x * (1.0 + torch.erf(x * 0.7071067811865476)))


class ModelNew(nn.Module):
    """Returns at once and lets a thread write the output: the timer stops before the work is done."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        out = torch.empty_like(x)
        threading.Thread(target=_fill, args=(x, out), daemon=True).start()
        return out
'''

MATMUL_FALLBACK = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Claims a custom kernel, but the 'kernel' always fails and the fallback is the library's matmul."""

    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        try:
            raise NotImplementedError("custom tiled matmul not built")
        except Exception:
            return torch.matmul(a, b)
'''

GELU_TF32 = '''import torch
import torch.nn as nn

# Allows TF32 matmuls on the GPU: harmless for an elementwise op, but a reviewer should see it.
torch.backends.cuda.matmul.allow_tf32 = True


class ModelNew(nn.Module):
    """Exact GELU written out with torch.erf, with a precision switch set at import."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return 0.5 * x * (1.0 + torch.erf(x * 0.7071067811865476))
'''

XSS_PROBE = """import torch
import torch.nn as nn

# </script><script>window.__pwned = 1</script> <img src=x onerror="window.__pwned = 2">


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x * torch.sigmoid(x)
"""


@dataclass(frozen=True)
class DemoKernel:
    submitter: str
    kind: str
    task: str  # a task of the built-in suite
    source: str | None  # None: the suite's honest C++ reference kernel for the task
    tracks: tuple[str, ...]


DEMO_SUBMITTERS = {
    "reference-cpp": {"kind": "human", "metadata": {"about": "the suite's honest C++ reference kernels"}},
    "llm-7b-sft": {"kind": "model", "metadata": {"base": "a 7B coder", "stage": "SFT"}},
    "agent-v0": {"kind": "agent", "metadata": {"policy": "llm-7b-sft", "max_turns": 8}},
    "ckpt-step-400": {"kind": "checkpoint", "metadata": {"run": "grpo-demo", "step": 400}},
    "ckpt-step-900": {
        "kind": "checkpoint",
        "metadata": {"run": "grpo-demo", "step": 900, "note": "reward went up; reviewers should look"},
    },
}

DEMO_KERNELS = (
    DemoKernel("reference-cpp", "human", "gelu", None, ("strict", "open")),
    DemoKernel("reference-cpp", "human", "silu", None, ("strict", "open")),
    DemoKernel("llm-7b-sft", "model", "gelu", GELU_TORCH, ("strict", "open")),
    DemoKernel("llm-7b-sft", "model", "silu", SILU_TORCH, ("strict", "open")),
    DemoKernel("llm-7b-sft", "model", "matmul", MATMUL_LIBRARY, ("strict", "open")),
    DemoKernel("agent-v0", "agent", "softmax", SOFTMAX_TORCH, ("strict", "open")),
    DemoKernel("agent-v0", "agent", "matmul", MATMUL_SLOW, ("open",)),
    DemoKernel("agent-v0", "agent", "sum_dim", SUM_COMPILE_ERROR, ("strict",)),
    DemoKernel("ckpt-step-400", "checkpoint", "gelu", GELU_WRONG, ("strict", "open")),
    DemoKernel("ckpt-step-400", "checkpoint", "silu", SILU_EMPTY, ("strict", "open")),
    DemoKernel("ckpt-step-400", "checkpoint", "softmax", SOFTMAX_TORCH, ("open",)),
    # hacks with review findings: the evaluator rejects them, and each lands in the review queue
    DemoKernel("ckpt-step-900", "checkpoint", "silu", SILU_BF16, ("open",)),
    DemoKernel("ckpt-step-900", "checkpoint", "gelu", GELU_THREAD, ("open",)),
    DemoKernel("ckpt-step-900", "checkpoint", "matmul", MATMUL_FALLBACK, ("strict",)),
    # honest, but it sets a precision switch: flagged for review, most likely legit
    DemoKernel("agent-v0", "agent", "gelu", GELU_TF32, ("open",)),
)


@dataclass(frozen=True)
class DemoUser:
    username: str
    role: str  # what the login is for, printed beside it
    superuser: bool = False
    groups: tuple[str, ...] = ()


# Passwords are new random ones on every run, printed by the command (demo only).
DEMO_USERS = (
    DemoUser("admin", "staff and superuser: admin pages, training launches; can review too", superuser=True),
    DemoUser("reviewer", "the Reviewer group: the review queue, verdicts, rules", groups=("Reviewer",)),
)
