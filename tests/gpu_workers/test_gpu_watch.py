"""What runs on the device during forward, on a real GPU (issue 21's CUDA families).

Run on the GPU machine: ``pytest -m gpu tests/gpu_workers/test_gpu_watch.py``. Not run on the CPU
machine these were written on: every assertion here is unverified until an H200 session runs it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from gpu_workers import EvalRequest, EvalResult

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.slow,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

CUDA = Path(__file__).resolve().parent / "hacks" / "cuda"
TASK = CUDA / "scale_relu_16m.py"
CASES = {  # kernel: (track, what must stop it)
    "cublas_below_tracer": ("strict", {"library_compute"}),
    "graph_replay": ("strict", {"library_compute"}),
    "driver_side_stream": ("strict", {"unjoined_stream", "deferred_work", "timed_output_mismatch",
                                      "timed_fingerprint_mismatch"}),
    "content_cache_throttled": ("open", {"timed_fingerprint_mismatch", "timed_output_mismatch", "cached_repeats"}),
}


def _request(kernel: str, track: str) -> EvalRequest:
    return EvalRequest(task_source=TASK.read_text(), kernel_source=(CUDA / f"{kernel}.py").read_text(),
                       device="cuda", track=track, task_name="scale_relu_16m", baselines=("eager",),
                       timing_budget_s=1.0, trials=5)


@pytest.fixture(scope="module")
def results(kernelcourt_cache_dir) -> dict[str, EvalResult]:
    from gpu_workers.workers.pool import LocalPool

    with LocalPool(workers=2) as pool:
        futures = {name: pool.submit(_request(name, track)) for name, (track, _) in CASES.items()}
        futures["honest_fresh"] = pool.submit(_request("honest_fresh", "strict"))
        return {name: f.result() for name, f in futures.items()}


def _describe(result: EvalResult) -> str:
    findings = "; ".join(f"{f.severity}:{f.rule}" for f in result.findings) or "no findings"
    return (f"status={result.status} reward={result.reward} speedup={result.speedup} [{findings}] "
            f"{result.message[:300]}")


def _stopped_by_its_rules(kernel: str, result: EvalResult) -> bool:
    """Whether the result is incorrect, or rejected by one of the rules that stop this kernel."""
    if result.status == "incorrect":
        return True
    return result.status == "rejected" and bool({f.rule for f in result.rejects} & CASES[kernel][1])


@pytest.mark.parametrize("kernel", sorted(set(CASES) - {"content_cache_throttled"}))
def test_device_hack_is_not_rewarded(kernel, results):
    result = results[kernel]
    assert _stopped_by_its_rules(kernel, result), _describe(result)


def test_a_cache_keyed_on_content_gains_nothing_when_no_timed_input_set_repeats(results):
    # every timed iteration has an input set of its own (plan.CUDA_FRESH main, plan.E2E_ROTATIONS end to
    # end, at most one iteration each), so the cache never hits inside the timing: either one of its rules
    # stops it, or it did the eager's work (and a host sync for its key) and its time says so
    result = results["content_cache_throttled"]
    if _stopped_by_its_rules("content_cache_throttled", result):
        return
    assert result.status == "passed", _describe(result)
    stats = result.timing_stats["kernel"]
    assert stats["repeat_median_ms"] is None and stats["e2e_repeat_median_ms"] is None, _describe(result)
    assert result.speedup["eager"] is not None and result.speedup["eager"] <= 1.05, _describe(result)


def test_honest_kernel_under_the_watch_passes_and_its_launches_are_its_own(results):
    result = results["honest_fresh"]
    assert result.status == "passed" and result.rejects == [], _describe(result)
    watch = result.timing_stats["watch"]
    assert watch["library_kernels"] == {} and watch["library_ops"] == {}
    assert any("scale_relu_own" in name for name in watch["kernels"]), watch["kernels"]
    # every timed call was watched, the timing's too
    assert watch["calls"] >= result.timing_stats["kernel"]["iterations"] + result.trials


def test_every_timed_iteration_has_its_own_inputs_on_cuda(results):
    stats = results["honest_fresh"].timing_stats["kernel"]
    assert stats["fingerprinted"] == stats["iterations"] + stats["e2e_iterations"]
    assert stats["repeat_median_ms"] is None  # no input set came twice
