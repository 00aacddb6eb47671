"""Outputs compared on the device: what the candidate's judge hands over is checked before it is
opened, and the degenerate-task evidence is the same whether outputs travel or stay.

The CUDA IPC path itself runs in the gpu-marked tests (tests/gpu_workers/tasks/test_budget.py: a
KernelBench task at its published size, and test_outputs_compared_on_the_device_* below)."""

from __future__ import annotations

import pytest
import torch

from gpu_workers import EvalRequest
from gpu_workers.child.handover import HandoverError, open_outputs
from gpu_workers.child.reference import output_spread

DEVICE = torch.device("cpu")


def _described(**overrides):
    d = {"handover": "cuda", "device": 0, "handle": b"h" * 64, "storage_bytes": 4096, "storage_offset": 0,
         "counter": b"c" * 16, "counter_offset": 0, "event": None, "event_sync": False, "dtype": "float32",
         "shape": [16, 16], "stride": [16, 1], "offset": 0}
    d.update(overrides)
    return d


@pytest.mark.parametrize(("overrides", "says"), [
    ({"dtype": "object"}, "dtype"),
    ({"shape": [16, -1]}, "shape"),
    ({"shape": "16x16"}, "shape"),
    ({"stride": [16]}, "geometry"),
    ({"storage_bytes": -1}, "geometry"),
    ({"handle": "not bytes"}, "handles"),
    ({"event_sync": 1}, "handles"),
    ({"shape": [65, 16]}, "past its own allocation"),  # one row more than the 4 KiB handed over holds
    ({"offset": 1000}, "past its own allocation"),
    ({"stride": [1 << 40, 1]}, "past its own allocation"),
])
def test_a_malformed_handover_is_refused_before_anything_is_opened(overrides, says):
    with pytest.raises(HandoverError, match=says):
        open_outputs([_described(**overrides)], DEVICE)


def test_a_handle_that_does_not_open_is_the_candidates_failure():
    with pytest.raises(HandoverError):
        open_outputs([_described()], DEVICE)  # no CUDA here, or a handle no process exported


def test_plain_leaves_pass_as_they_are_and_empty_outputs_are_made_here():
    out = open_outputs([3, None, {"handover": "empty", "dtype": "float32", "shape": [0, 4]}], DEVICE)
    assert out[:2] == [3, None] and out[2].shape == (0, 4) and out[2].dtype == torch.float32
    with pytest.raises(HandoverError, match="has elements"):
        open_outputs([{"handover": "empty", "dtype": "float32", "shape": [2, 4]}], DEVICE)
    with pytest.raises(HandoverError, match="not a list"):
        open_outputs({"0": 1}, DEVICE)


def test_output_spread_matches_float64_statistics_and_keeps_a_tiny_deviation():
    x = torch.randn(3_000_017, dtype=torch.float32) * 3 + 1
    std, mean_abs = output_spread([x])[0]
    assert std == pytest.approx(float(x.double().std()), rel=1e-9)
    assert mean_abs == pytest.approx(float(x.double().abs().mean()), rel=1e-9)
    # near-constant across chunks: a difference of sums would lose this deviation, the merge does not
    flat = torch.full((3_000_017,), 1000.0, dtype=torch.float64)
    flat[::7] += 1e-7
    assert output_spread([flat])[0][0] == pytest.approx(float(flat.std()), rel=1e-6)
    assert output_spread([torch.ones(1), torch.arange(4), "x"]) == [None, None, None]


DEVICES = [pytest.param("cpu"), pytest.param("cuda", marks=[
    pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")])]
KERNELS = {"identity": "torch.relu(x) * 2", "off_by_a_little": "torch.relu(x) * 2 + (x > 3.5).float()",
           # right within every tolerance, but a call's answer drifts with the calls before it
           "nondeterministic": "torch.relu(x) * 2 + 1e-6 * next(CALLS)",
           # right on fresh tensors, wrong whenever it is called again on the same buffer, as the timed
           # calls are (new values copied in): only the timed sets' reference answers can tell
           "wrong_when_timed": "torch.relu(x) * 2 + float(LAST.append(x.data_ptr()) or LAST[-2:-1] == LAST[-1:])"}


VERDICTS = [
    ("identity", "passed", None),
    ("off_by_a_little", "incorrect", None),
    ("nondeterministic", None, "nondeterministic"),
    ("wrong_when_timed", None, "timed_fingerprint_mismatch"),
]


@pytest.mark.parametrize("compared_by", ["reference child", "parent"])
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("kernel", "status", "rule"), VERDICTS)
def test_outputs_compared_by_the_reference_child_give_the_same_verdicts(compared_by, device, kernel, status, rule,
                                                                       kernelcourt_cache_dir):
    # given a task whose outputs are compared by the reference child (the operator's threshold at 0
    # bytes) or, as small outputs are by default, by the parent
    _assert_verdict(device, compared_by == "reference child", kernel, status, rule, kernelcourt_cache_dir)


@pytest.mark.parametrize(("kernel", "status", "rule"), VERDICTS)
def test_some_timed_sets_whole_and_the_rest_fingerprinted_later_give_the_same_verdicts(kernel, status, rule,
                                                                                      kernelcourt_cache_dir,
                                                                                      monkeypatch):
    # given, on the CPU, the plan a GPU has: the first three timed sets' outputs kept whole (answered
    # by the reference before the candidate starts), every other set fingerprinted once the
    # candidate's timing names the sets it reached
    from gpu_workers.pipeline import plan

    keep_all = plan.kept_rotations
    monkeypatch.setattr(plan, "kept_rotations", lambda device, on_device=False: (
        [] if on_device else keep_all(device)[:3]))
    assert plan.fingerprinted_later("cpu")
    _assert_verdict("cpu", False, kernel, status, rule, kernelcourt_cache_dir)


def _assert_verdict(device, on_device, kernel, status, rule, cache_dir):
    from gpu_workers import evaluate
    from gpu_workers.settings import from_environ

    n = 4096 if device == "cuda" else 256
    task = ("import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
            f"        return torch.relu(x) * 2\n\ndef get_inputs():\n    return [torch.randn({n}, {n})]\n\n"
            "def get_init_inputs():\n    return []\n")
    source = ("import itertools\nimport torch\nimport torch.nn as nn\n\nCALLS = itertools.count()\nLAST = []\n\n"
              "class ModelNew(nn.Module):\n    def forward(self, x):\n"
              f"        return {KERNELS[kernel]}\n")
    settings = from_environ({"KERNELCOURT_DEVICE_COMPARE_BYTES": "0" if on_device else str(1 << 40),
                             "KERNELCOURT_CACHE_DIR": str(cache_dir)})
    result = evaluate(EvalRequest(task_source=task, kernel_source=source, device=device, track="open",
                                  baselines=("eager",), timing_budget_s=0.3), settings)
    # then every way gives the same verdict, and the comparison was made where it was meant to be
    assert result.timing_stats["memory"]["on_device"] is on_device, result.message
    if status is not None:
        assert result.status == status, (result.message, result.run_log[-2000:])
    if status == "incorrect":
        assert "differs from the reference" in result.message
    if rule is not None:
        assert rule in {f.rule for f in result.findings}, (result.status, result.message)
    # every timed call's output checked against an answer the reference made for its set
    assert not [f for f in result.findings if "no reference answer" in f.message], result.findings
