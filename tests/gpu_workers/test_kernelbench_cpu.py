"""KernelBench as published, on the CPU: tasks from all three levels scaled down with
``max_elements`` (their files untouched), each evaluated with its identity candidate through one
LocalPool: passed on the open track, rejected as library compute on the strict track."""

import pytest

from gpu_workers.schema import EvalRequest
from gpu_workers.suite.kernelbench import identity_candidate, task_files
from gpu_workers.workers.pool import LocalPool

MAX_ELEMENTS = 65536
TASKS = [
    "level1/19_ReLU", "level1/1_Square_matrix_multiplication_", "level1/23_Softmax", "level1/36_RMSNorm_",
    "level1/40_LayerNorm", "level1/47_Sum_reduction_over_a_dimension", "level1/88_MinGPTNewGelu",
    "level1/97_ScaledDotProductAttention", "level2/100_ConvTranspose3d_Clamp_Min_Divide",
    "level2/12_Gemm_Multiply_LeakyReLU", "level2/1_Conv2D_ReLU_BiasAdd", "level2/40_Matmul_Scaling_ResidualAdd",
    "level2/65_Conv2d_AvgPool_Sigmoid_Sum", "level2/76_Gemm_Add_ReLU", "level3/4_LeNet5", "level3/35_LSTM",
    "level3/43_MinGPTCausalAttention", "level3/44_MiniGPTBlock", "level3/50_ReLUSelfAttention",
    "level3/8_ResNetBasicBlock", "level3/33_VanillaRNN", "level3/17_SqueezeNetFireModule",
]


def _request(source: str, track: str, key: str) -> EvalRequest:
    return EvalRequest(task_source=source, kernel_source=identity_candidate(source), device="cpu", track=track,
                       task_name=key, trials=2, baselines=("eager",), timing_budget_s=0.05,
                       max_elements=MAX_ELEMENTS)


@pytest.mark.slow
def test_kernelbench_identity_candidates_on_the_cpu(kernelbench):
    # given 22 published tasks over the three levels, every file as KernelBench ships it
    tasks = task_files(kernelbench, tasks=TASKS)
    assert sorted(t.key for t in tasks) == sorted(TASKS)
    before = {t.key: t.path.read_bytes() for t in tasks}
    requests = [_request(t.path.read_text(), track, t.key) for t in tasks for track in ("open", "strict")]
    # when each is evaluated scaled down, on both tracks, two at a time
    with LocalPool(workers=2) as pool:
        results = list(pool.map(requests))
    # then the open track passes every one, each within the bound, and strict rejects each as library compute
    outcomes = {}
    for request, result in zip(requests, results):
        sizing = result.timing_stats.get("sizing") or {}
        largest = max((sizing.get("bytes") or {}).get("largest", {"none": 0}).values())
        rules = sorted({f.rule for f in result.findings if f.severity == "reject"})
        outcomes[(request.task_name, request.track)] = (result.status, rules, largest <= MAX_ELEMENTS,
                                                        result.message[:200])
    expected = {}
    for t in tasks:
        expected[(t.key, "open")] = ("passed", [], True, "")
        got = outcomes[(t.key, "strict")]
        expected[(t.key, "strict")] = ("rejected", ["library_compute"], True, got[3])
    assert outcomes == expected
    assert {t.key: t.path.read_bytes() for t in tasks} == before
