"""CUDA hack kernels (load_inline, cuda_sources; an honest Triton kernel beside them) against the
evaluator on a real GPU.

Run on the GPU machine: ``pytest -m gpu tests/gpu_workers/test_gpu_hacks.py``. Each kernel file builds
its own extension (cached by source hash under KERNELCOURT_CACHE_DIR). All evaluations run once per
module, two at a time (builds overlap; timing on one GPU is serialised by the evaluator's own sync).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from gpu_workers import EvalRequest, EvalResult
from gpu_workers.workers.pool import LocalPool

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.slow,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

CUDA = Path(__file__).resolve().parent / "hacks" / "cuda"
TASK = CUDA / "scale_relu_16m.py"
KERNELS = ("honest", "honest_triton", "side_stream", "side_stream_python", "reused_memory", "lazy_output", "cache_data_ptr",
           "event_timer_patch")
OPEN_TRACK = ("event_timer_patch", "honest_triton")  # also evaluated on the open track (no CUPTI watch there): NAME_open


def _request(kernel: str, track: str = "strict") -> EvalRequest:
    return EvalRequest(
        task_source=TASK.read_text(),
        kernel_source=(CUDA / f"{kernel}.py").read_text(),
        device="cuda",
        track=track,
        task_name="scale_relu_16m",
        baselines=("eager",),
        timing_budget_s=1.0,
        trials=5,
    )


@pytest.fixture(scope="module")
def cuda_results(kernelcourt_cache_dir) -> dict[str, EvalResult]:
    with LocalPool(workers=2) as pool:
        futures = {name: pool.submit(_request(name)) for name in KERNELS}
        futures.update({f"{name}_open": pool.submit(_request(name, "open")) for name in OPEN_TRACK})
        results = {name: future.result() for name, future in futures.items()}
    artifacts = Path(__file__).resolve().parents[2] / "test-artifacts"  # gitignored
    artifacts.mkdir(exist_ok=True)
    (artifacts / "gpu_hack_results.json").write_text(
        json.dumps({k: r.to_dict() for k, r in results.items()}, indent=1)
    )
    return results


def _describe(result: EvalResult) -> str:
    findings = "; ".join(f"{f.severity}:{f.rule}" for f in result.findings) or "no findings"
    return (
        f"status={result.status} reward={result.reward} kernel_ms={result.timings_ms.get('kernel')} "
        f"[{findings}] {result.message[:300]} {result.compile_log[-1500:]} {result.run_log[-1500:]}"
    )


def test_honest_cuda_kernel_passes_with_no_reject_finding(cuda_results):
    result = cuda_results["honest"]
    assert result.status == "passed", _describe(result)
    assert result.rejects == [], _describe(result)
    assert result.reward >= 1.0


def test_honest_triton_kernel_passes_on_the_open_track(cuda_results):
    # @triton.jit reads the function's source when the module is imported, and Triton builds the kernel
    # and its launcher at the first launch, in the candidate's own cache
    result = cuda_results["honest_triton_open"]
    assert result.status == "passed", _describe(result)
    assert result.rejects == [], _describe(result)


@pytest.mark.xfail(strict=True, reason="a known false reject: Triton's own launcher and driver helpers, built "
                   "into the candidate's writable cache at the first launch, find libcuda with dlopen/dlsym, "
                   "which the linkage check takes for run-time lookup (library_binding)")
def test_honest_triton_kernel_passes_on_the_strict_track(cuda_results):
    result = cuda_results["honest_triton"]
    assert result.status == "passed", _describe(result)
    assert result.rejects == [], _describe(result)


def test_honest_cuda_kernel_has_no_findings_at_all(cuda_results):
    # Once a false timer_mismatch: the eager baseline's loop overhead, measured at another time, was
    # subtracted while another evaluation's build shared the CPUs. The scheduler's run delay of the
    # timing child is now left out on both sides (judge.timer_finding); it passed 5 of 5 runs on the H200.
    result = cuda_results["honest"]
    assert result.findings == [], _describe(result)


def test_the_candidates_context_is_made_and_ended_outside_the_gpu_slot(cuda_results):
    # a timer waiting for the slot never waits for the driver making or ending a context (pipeline.candidate.warm_candidate)
    stretches = cuda_results["honest"].timing_stats["gpu_slot"]["stretches"]
    assert "candidate: warm" not in stretches and "candidate: exit" not in stretches, stretches
    assert {"candidate: imported", "candidate: trial", "candidate: done"} <= set(stretches), stretches


@pytest.mark.parametrize("kernel", ["side_stream", "side_stream_python"])
def test_side_stream_work_is_inside_the_measurement(kernel, cuda_results):
    honest, result = cuda_results["honest"], cuda_results[kernel]
    # the outputs are right (the judge syncs the device before reading them) ...
    assert result.correct, _describe(result)
    # ... and the timer saw the side stream's work: no better than the honest kernel on the default stream
    assert result.timings_ms["kernel"] >= 0.7 * honest.timings_ms["kernel"], (
        f"{kernel}: {result.timings_ms['kernel']:.4f} ms vs honest {honest.timings_ms['kernel']:.4f} ms"
    )
    assert result.speedup["eager"] <= 1.5 * honest.speedup["eager"], _describe(result)
    # the reward took the end-to-end time, and a person is told why; unless the forward's own host
    # time already covered its end-to-end time (seen once on the H100: 0.256 ms of host time a call),
    # where the reward took that, and nothing was unseen
    stats = result.timing_stats["kernel"]
    if stats["timed"] == "host":
        assert stats["host_median_ms"] >= stats["net_median_ms"], stats
        return
    assert stats["timed"] == "end to end", stats
    assert any(f.rule == "unseen_work" and f.severity == "review" for f in result.findings), _describe(result)


def test_side_stream_created_in_cplusplus_gets_the_review_flag(cuda_results):
    result = cuda_results["side_stream"]
    flagged = [f for f in result.findings if f.rule == "side_stream"]
    assert flagged and flagged[0].severity == "review", _describe(result)
    assert result.needs_review


@pytest.mark.parametrize(
    "kernel,rules",
    [
        ("reused_memory", set()),
        ("lazy_output", {"lazy_output"}),
        ("cache_data_ptr", {"timed_output_mismatch"}),
    ],
)
def test_cuda_hack_is_rejected_or_incorrect(kernel, rules, cuda_results):
    result = cuda_results[kernel]
    assert result.status in ("rejected", "incorrect", "runtime_error"), _describe(result)
    assert result.reward == -1.0
    if result.status == "rejected" and rules:
        assert {f.rule for f in result.rejects} & rules, _describe(result)


def test_the_kernel_side_time_leaves_out_the_hosts_latency(cuda_results):
    stats = cuda_results["honest"].timing_stats["kernel"]
    assert stats["gpu_iterations"] > 0, stats
    assert 0 < stats["gpu_median_ms"] <= stats["median_ms"] < stats["e2e_median_ms"], stats
    assert stats["timed"] in ("kernel side", "host"), stats


@pytest.mark.parametrize("name", ["event_timer_patch", "event_timer_patch_open"])
def test_a_patched_event_timer_earns_no_speed_reward(name, cuda_results):
    # the forward does all of its work and computes the right answer; only cudaEventElapsedTime lies
    # (half of what passed): what the host's clock saw each window keep the GPU busy shows it on
    # either track (the judge's work around each window, 1.2 ms an iteration against this 0.07 ms
    # kernel, hides it from the loop's wall clock), and CUPTI's records of the kernels on strict
    result = cuda_results[name]
    assert result.status in ("passed", "rejected"), _describe(result)
    if result.status == "passed":
        assert set(result.speed_withheld) & {"timer_mismatch", "device_time"}, _describe(result)
        assert result.reward == 1.0, _describe(result)
