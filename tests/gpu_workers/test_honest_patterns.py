"""Honest patterns that must pass: weights derived at construction (the second weight configuration
is made while both models are built), library code that reads frames, library code that reads the
candidate's source (TorchScript, Triton's ``@jit``) or records its callers (``torch.jit.trace``); and
the candidate's own frame reads, which must still be refused."""

from __future__ import annotations

import pytest

from gpu_workers import EvalRequest
from gpu_workers.workers.pool import LocalPool

CONV_TASK = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, channels, scale):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)
        self.norm = nn.LayerNorm(8)
        self.scale = scale

    def forward(self, x):
        return self.norm(self.conv(x) * self.scale)


def get_inputs():
    return [torch.randn(2, 4, 8, 8)]


def get_init_inputs():
    return [4, 2.0]
'''

PRESCALED = '''
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    """Folds the scale into its own copy of the conv's weight, once, in __init__."""

    def __init__(self, channels, scale):
        super().__init__()
        conv = nn.Conv2d(channels, channels, 3, padding=1)
        self.weight = nn.Parameter(conv.weight.detach() * scale)
        self.bias = nn.Parameter(conv.bias.detach() * scale)
        self.norm = nn.LayerNorm(8)

    def forward(self, x):
        return self.norm(F.conv2d(x, self.weight, self.bias, padding=1))
'''

TRANSFORMER_TASK = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        return torch.relu(self.proj(x))


def get_inputs():
    return [torch.randn(2, 5, 16)]


def get_init_inputs():
    return [16]
'''

TRANSFORMER_CANDIDATE = '''
import logging
import warnings

import torch
import torch.nn as nn

logging.getLogger("candidate").warning("building")  # logging finds its caller through frames


class ModelNew(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.proj = nn.Linear(d, d)
        # built and kept (unused in forward): torch's constructors read frames and warn
        self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(d, 2, 32, batch_first=True), 2)
        warnings.warn("a candidate may warn", stacklevel=2)

    def forward(self, x):
        return torch.relu(self.proj(x))
'''

OWN_FRAMES = '''
import sys

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        caller = getattr(sys, "_get" + "frame")(1)  # spelled past the static scan: the guard decides
        return torch.relu(self.proj(x)) + 0.0 * len(getattr(caller, "f_" + "locals"))
'''

SCRIPTED = '''
import torch
import torch.nn as nn


@torch.jit.script  # compiled from the function's source, which TorchScript reads as Triton's @jit does
def _bias_relu(y: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return torch.relu(y + bias)


class ModelNew(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        return _bias_relu(x @ self.proj.weight.t(), self.proj.bias)
'''

TRACED = '''
import torch
import torch.nn as nn


class _Inner(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        return torch.relu(self.proj(x))


class ModelNew(nn.Module):
    """Traces its body with TorchScript on the first call, as some model-written kernels do."""

    def __init__(self, d):
        super().__init__()
        self.inner = _Inner(d)
        self.traced = None

    def forward(self, x):
        if self.traced is None:
            self.traced = torch.jit.trace(self.inner, x)
        return self.traced(x)
'''


def _request(task: str, kernel: str, name: str) -> EvalRequest:
    return EvalRequest(task_source=task, kernel_source=kernel, device="cpu", track="open", task_name=name,
                       baselines=("eager",), trials=3, timing_budget_s=0.05)


@pytest.fixture(scope="module")
def results(kernelcourt_cache_dir):
    requests = {"prescaled": _request(CONV_TASK, PRESCALED, "conv"),
                "transformer": _request(TRANSFORMER_TASK, TRANSFORMER_CANDIDATE, "linear"),
                "own_frames": _request(TRANSFORMER_TASK, OWN_FRAMES, "linear"),
                "scripted": _request(TRANSFORMER_TASK, SCRIPTED, "linear"),
                "traced": _request(TRANSFORMER_TASK, TRACED, "linear")}
    with LocalPool(workers=2) as pool:
        futures = {name: pool.submit(request) for name, request in requests.items()}
        return {name: future.result() for name, future in futures.items()}


def test_a_weight_prescaled_in_init_passes_both_weight_configurations(results):
    # given a candidate that folds the scale into its own parameter in __init__
    result = results["prescaled"]
    # then every trial passes, the last (the second configuration, perturbed) included
    assert (result.status, result.trials_passed, result.trials) == ("passed", 3, 3), result.message


def test_building_torch_modules_logging_and_warning_is_not_a_violation(results):
    result = results["transformer"]
    assert result.status == "passed", result.message
    assert [f.rule for f in result.findings if f.rule == "sandbox_violation"] == []


def test_the_candidates_own_frame_read_is_refused_as_a_violation(results):
    result = results["own_frames"]
    assert result.status == "rejected"
    assert [f.rule for f in result.rejects] == ["sandbox_violation"]
    assert "sys._getframe in candidate code" in result.message


def test_a_function_compiled_from_its_source_passes(results):
    # given a candidate whose helper TorchScript compiles from its source text (as triton.jit does)
    result = results["scripted"]
    # then it is imported and evaluated like any other, not failed for a source its file cannot give
    assert result.status == "passed", result.message


def test_a_module_traced_with_torchscript_passes(results):
    # torch.jit.trace reads its caller's frames for its own use: library code, let through
    result = results["traced"]
    assert result.status == "passed", result.message
    assert [f.rule for f in result.findings if f.rule == "sandbox_violation"] == []
