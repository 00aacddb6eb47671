"""A task's sizing by its own child (kept), the children's limits from its bytes, GPU admission and
who an out-of-memory is on; the GPU parts run on the GPU machine."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from gpu_workers import EvalRequest, evaluate
from gpu_workers.hardware import hardware_info
from gpu_workers.tasks import budget
from gpu_workers.tasks.budget import fits_host, memory_limits, neighbour_oom, task_sizing

needs_gpu = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
GIB = 1 << 30

TASK = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


batch_size = 4096
dim = {dim}


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
'''


def _request(task: str, **fields) -> EvalRequest:
    return EvalRequest(task_source=task, kernel_source="class ModelNew: pass", **fields)


def test_a_task_is_sized_by_its_child_once(tmp_path, monkeypatch):
    # given a 6.4 GB task and a cache that keeps nothing yet
    monkeypatch.setenv("KERNELCOURT_CACHE_DIR", str(tmp_path))
    task = TASK.format(dim=393216 + 7)
    request = _request(task, max_elements=4096)
    hardware = hardware_info("cpu")
    # when it is sized twice
    first = task_sizing(request, hardware, None)
    second = task_sizing(request, hardware, None)
    # then the child measured it, and the second answer is the kept one
    assert first["kept"] is False and second["kept"] is True
    assert first["constants"] == second["constants"]
    assert max(first["bytes"]["largest"].values()) <= 4096
    full = task_sizing(_request(task), hardware, None)
    assert full["constants"] == {} and full["bytes"]["input_bytes"] == 4096 * (393216 + 7) * 4


def test_a_task_that_cannot_fit_the_bound_says_so(kernelcourt_cache_dir):
    from gpu_workers.build.compile import PhaseFailure

    task = TASK.replace("torch.rand(batch_size, dim)", "torch.rand(8, 1 << 20)").format(dim=3)
    with pytest.raises(PhaseFailure, match=r"no scaling of the task's size constants keeps every tensor within 64"):
        task_sizing(_request(task, max_elements=64), hardware_info("cpu"), None)


def test_limits_follow_the_task_unless_given():
    sizing = {"bytes": {"input_bytes": 4 * GIB, "output_bytes": 4 * GIB, "parameter_bytes": 0}}
    derived = memory_limits(_request(TASK, device="cuda"), sizing, kept=5)
    assert derived["rss"] == 2 * ((3 * 5 + 5 + 2) * 4 + 2 * 4) * 1024  # outputs reported + inputs, twice
    assert derived["spawn"] == derived["rss"]  # above the default ceiling
    small = memory_limits(_request(TASK), {"bytes": {"input_bytes": 1 << 20}}, kept=24)
    assert small == {"rss": 4096, "spawn": 16384}
    assert memory_limits(_request(TASK, memory_limit_mb=2048), sizing, 5) == {"rss": 2048, "spawn": 2048}


def test_a_cpu_task_larger_than_the_machine_is_refused_with_its_bytes_before_any_child_runs():
    from gpu_workers.build.compile import PhaseFailure

    sizing = {"bytes": {"input_bytes": GIB, "output_bytes": GIB, "parameter_bytes": 0}}
    with pytest.raises(PhaseFailure, match=r"does not fit this machine's memory: .* GB .* the machine has 8\.6 GB; "
                                           r"scale the task down with max_elements"):
        fits_host(_request(TASK), sizing, kept=24, machine_bytes=8 * GIB)
    assert fits_host(_request(TASK), sizing, kept=24, machine_bytes=1024 * GIB) is None
    # the GPU's own admission bounds a CUDA evaluation; an operator's explicit limit is theirs to choose
    assert fits_host(_request(TASK, device="cuda"), sizing, kept=6, machine_bytes=8 * GIB) is None
    assert fits_host(_request(TASK, memory_limit_mb=2048), sizing, kept=24, machine_bytes=8 * GIB) is None
    assert fits_host(_request(TASK), {"bytes": {}}, kept=24, machine_bytes=8 * GIB) is None


def test_an_evaluation_too_large_for_the_machine_ends_at_once_with_a_clear_message(kernelcourt_cache_dir,
                                                                                   monkeypatch):
    # given a 64 MiB relu and a machine of 256 MiB
    monkeypatch.setattr(budget, "machine_memory_bytes", lambda: 256 << 20)
    task = TASK.format(dim=4096)
    kernel = task.replace("class Model(", "class ModelNew(")
    # when it is evaluated on the CPU
    result = evaluate(EvalRequest(task_source=task, kernel_source=kernel, device="cpu", track="open",
                                  baselines=["eager"], timing_budget_s=0.05))
    # then it ends before its children, saying what it needs
    assert result.status == "runtime_error"
    assert "does not fit this machine's memory" in result.message and "max_elements" in result.message
    assert result.timing_stats["memory"]["limits_mb"]["rss"] >= 4096


def test_outputs_larger_than_the_operators_threshold_are_compared_on_the_device(tmp_path, monkeypatch):
    from gpu_workers.pipeline.plan import compares_on_device, kept_rotations
    from gpu_workers.settings import from_environ
    from gpu_workers.tasks.budget import announced_bytes

    monkeypatch.setenv("KERNELCOURT_CACHE_DIR", str(tmp_path))
    settings = from_environ({"KERNELCOURT_DEVICE_COMPARE_BYTES": str(GIB)})
    request = _request(TASK, device="cuda")
    big = {"bytes": {"input_bytes": 8 * GIB, "output_bytes": 8 * GIB, "parameter_bytes": 0}}
    small = {"bytes": {"input_bytes": GIB, "output_bytes": GIB // 2, "parameter_bytes": 0}}
    assert compares_on_device(request, big, settings) and not compares_on_device(request, small, settings)
    assert not compares_on_device(request, {"bytes": {}}, settings)  # not measured: not on the device
    assert kept_rotations("cuda", on_device=True) == [] and kept_rotations("cuda")  # fingerprints only
    # on an H200 the float64 reference of an 8 GB task does not fit beside its candidate: fp32 alone
    h200 = {"device": "cuda", "memory_bytes": 150_109_880_320, "name": "H200", "gpu": {"uuid": "test-h200"}}
    narrow = announced_bytes(request, big, 0, h200, on_device=True)
    assert narrow["fp64"] is False and narrow["total"] <= 0.9 * h200["memory_bytes"]
    # level1/45_Average_Pooling_2D: a 17 GB input, small outputs (not on the device): fp32 alone too
    pooling = {"bytes": {"input_bytes": 17_179_869_184, "output_bytes": 141_705_216, "parameter_bytes": 0}}
    pooled = announced_bytes(request, pooling, len(kept_rotations("cuda")), h200, on_device=False)
    assert pooled["fp64"] is False and pooled["total"] <= 0.9 * h200["memory_bytes"]
    assert announced_bytes(request, small, 0, h200, on_device=True)["fp64"] is True


def test_the_reference_announces_no_less_than_its_child_held_in_an_earlier_evaluation(tmp_path, monkeypatch):
    # given a task whose sizes announce ~3.7 GB for its reference on a GPU, and a fresh cache
    from gpu_workers.tasks.budget import announced_bytes, keep_reference_peak

    monkeypatch.setenv("KERNELCOURT_CACHE_DIR", str(tmp_path))
    request = _request(TASK, device="cuda")
    sizing = {"bytes": {"input_bytes": GIB // 2, "output_bytes": GIB // 2, "parameter_bytes": 0}}
    gpu = {"device": "cuda", "key": "cuda:H200|torch-x|cuda-y", "memory_bytes": 150_109_880_320, "name": "H200",
           "gpu": {"uuid": "test-h200"}}
    first = announced_bytes(request, sizing, 0, gpu)
    # when its reference child held 8 GiB in an evaluation, then 2 GiB in another
    keep_reference_peak(request, gpu, None, {"reserved": 8 * GIB, "allocated": 7 * GIB})
    keep_reference_peak(request, gpu, None, {"reserved": 2 * GIB, "allocated": GIB})
    later = announced_bytes(request, sizing, 0, gpu)
    # then later evaluations announce the most it held, with the margin and its context, and the candidate's
    # part is unchanged
    assert first["reference"] < 8 * GIB
    assert later["reference"] == int(8 * GIB * 1.1) + (600 << 20)
    assert later["candidate"] == first["candidate"] and later["total"] == later["reference"] + later["candidate"]
    # and nothing is kept from a child's word that is no number, nor for other hardware or on the CPU
    keep_reference_peak(request, gpu, None, {"reserved": "lots"})
    keep_reference_peak(request, {**gpu, "key": "cuda:H100|torch-x|cuda-y"}, None, {"reserved": 64 * GIB})
    assert announced_bytes(request, sizing, 0, gpu)["reference"] == later["reference"]
    assert announced_bytes(request, sizing, 0, hardware_info("cpu"))["reference"] == first["reference"]


def test_only_an_admitted_evaluations_cuda_oom_is_a_neighbours():
    oom = "the reference (task) failed to run: torch.OutOfMemoryError: CUDA out of memory."
    assert neighbour_oom("runtime_error", oom, {"admitted": True, "bytes": GIB})
    assert not neighbour_oom("runtime_error", oom, {"admitted": False, "bytes": GIB})
    assert not neighbour_oom("incorrect", oom, {"admitted": True, "bytes": GIB})
    assert not neighbour_oom("runtime_error", "RuntimeError: shape", {"admitted": True, "bytes": GIB})


@needs_gpu[0]
@needs_gpu[1]
def test_relu_at_its_published_size_passes_on_the_gpu(kernelcourt_cache_dir, kernelbench_root):
    # given level1/19_ReLU as published (a 6.4 GB input) and its identity candidate, on a GPU that can
    # admit what it announces (some 131 GB with the float64 reference, 99 GB without: an H200, not an 80 GB card)
    from gpu_workers.suite.kernelbench import identity_candidate

    if torch.cuda.get_device_properties(0).total_memory * 0.9 < 99e9:
        pytest.skip("level1/19_ReLU announces 99 GB at least: more than this GPU admits")

    source = (kernelbench_root / "level1" / "19_ReLU.py").read_text()
    result = evaluate(EvalRequest(task_source=source, kernel_source=identity_candidate(source), device="cuda",
                                  track="open", task_name="19_ReLU", baselines=("eager",)))
    assert result.status == "passed", result.message
    assert result.timing_stats["memory"]["admitted"] is True
    assert result.timing_stats["sizing"]["bytes"]["input_bytes"] == 4096 * 393216 * 4
    assert abs(result.speedup["eager"] - 1.0) <= 0.03
    # and what each child's allocator held at most is within what the evaluation announced for it
    memory = result.timing_stats["memory"]
    for child in ("reference", "candidate"):
        assert 4096 * 393216 * 4 <= memory["peak"][child]["allocated"] <= memory["announced"][child], child


@needs_gpu[0]
@needs_gpu[1]
def test_an_oom_caused_by_a_neighbour_is_retried_as_infrastructure(kernelcourt_cache_dir):
    # given a process outside the ledger that holds all but 1 GiB of the GPU
    hog = subprocess.Popen([sys.executable, "-c", (
        "import sys, torch; free, _ = torch.cuda.mem_get_info(); "
        "x = torch.empty(free - (1 << 30), dtype=torch.uint8, device='cuda'); print('held', flush=True); "
        "sys.stdin.read()")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert hog.stdout.readline().strip() == "held"
        # when an evaluation admitted for its 2 GB input (some 45 GB announced: within an 80 GB card's
        # admission) announces less than the GPU has, but not free
        task = TASK.format(dim=1 << 17)
        from gpu_workers.suite.kernelbench import identity_candidate

        result = evaluate(EvalRequest(task_source=task, kernel_source=identity_candidate(task), device="cuda",
                                      track="open", baselines=("eager",)))
    finally:
        hog.stdin.close()
        hog.wait(60)
    # then it was retried, and its message says infrastructure, not the kernel
    assert result.timing_stats["memory"]["admitted"] is True
    assert len(result.timing_stats["retries"]) == 3
    assert result.message.startswith("infrastructure: a CUDA out-of-memory caused by another process")


def test_a_task_that_cannot_be_measured_runs_with_the_default_limits(tmp_path, monkeypatch):
    # given a task whose constructor reads a value of its own weight (which is on the meta device
    # whichever way it is built for sizing) and is too large to run for real
    monkeypatch.setenv("KERNELCOURT_CACHE_DIR", str(tmp_path))
    task = TASK.replace("    def forward(self, x):", "    def __init__(self):\n        super().__init__()\n"
                        "        self.w = torch.nn.Parameter(torch.ones(3))\n"
                        "        self.k = float(self.w[1].item())\n\n    def forward(self, x):")
    request = _request(task.format(dim=393216))
    sizing = task_sizing(request, hardware_info("cpu"), None)
    # then it is not a failure: nothing is scaled, the default limits apply and nothing is announced
    assert sizing["constants"] == {} and sizing["bytes"] == {}
    assert "Tensor.item() cannot be called on meta tensors" in sizing["error"]
    assert memory_limits(request, sizing, kept=24) == {"rss": 16384, "spawn": 16384}
    # with a bound, the same task cannot be scaled and says why
    from gpu_workers.build.compile import PhaseFailure

    with pytest.raises(PhaseFailure, match="the task does not build at its own sizes on the meta device"):
        task_sizing(_request(task.format(dim=393216), max_elements=1024), hardware_info("cpu"), None)


def test_an_evaluation_queued_behind_a_full_gpu_ends_as_infrastructure_not_as_its_verdict(kernelcourt_cache_dir):
    # given a GPU whose ledger another live evaluation (this process) fills
    from gpu_workers.build.compile import PhaseFailure
    from gpu_workers.tasks.budget import admitted, ledger_for

    gpu = {"device": "cuda", "memory_bytes": 10 * GIB, "name": "H200", "gpu": {"uuid": "test-full"}}
    ledger = ledger_for(gpu)
    with ledger.reserved(8 * GIB, timeout_s=1.0):
        # when a second evaluation asks for more than is left and the wait runs out
        with pytest.raises(PhaseFailure) as failed:
            with admitted(gpu, 4 * GIB, wait_s=1.0):
                pass
    # then it is an infrastructure failure (re-evaluated on resubmission), not a timeout of the kernel's
    assert failed.value.status == "runtime_error"
    assert failed.value.message.startswith("infrastructure: waiting for GPU memory")
    # and once the room is free the same request is admitted at once
    with admitted(gpu, 4 * GIB, wait_s=1.0) as held:
        assert held["admitted"] and held["bytes"] == 4 * GIB
