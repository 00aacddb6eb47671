"""GPU memory admission (the per-GPU ledger) and who a CUDA out-of-memory is on."""

import subprocess
import sys
import threading

import pytest

from gpu_workers.sandbox.gpumemory import (
    DoesNotFit,
    GpuLedger,
    classify_oom,
    evaluation_bytes,
    host_limit_mb,
    is_cuda_oom,
)

GIB = 1 << 30


def test_admits_what_fits_and_refuses_what_does_not(tmp_path):
    ledger = GpuLedger("gpu0", 10 * GIB, tmp_path, margin=0.1)  # 9 GiB usable
    first = ledger.try_admit(5 * GIB)
    assert first is not None
    assert ledger.try_admit(5 * GIB) is None  # 10 > 9
    second = ledger.try_admit(4 * GIB)
    assert second is not None
    assert ledger.held() == 9 * GIB
    ledger.release(first)
    assert ledger.held() == 4 * GIB


def test_more_than_the_whole_gpu_never_fits(tmp_path):
    ledger = GpuLedger("gpu0", 10 * GIB, tmp_path, margin=0.1)
    with pytest.raises(DoesNotFit, match=r"announced 10737418240 bytes; the GPU has 10737418240"):
        ledger.try_admit(10 * GIB)


def test_a_waiting_evaluation_is_admitted_when_room_is_released(tmp_path):
    # given a GPU whose room is held by one evaluation
    ledger = GpuLedger("gpu0", 10 * GIB, tmp_path, margin=0.0, poll_s=5.0)
    holder = ledger.try_admit(8 * GIB)
    waiting, admitted = threading.Event(), []

    def second() -> None:
        admitted.append(ledger.admit(4 * GIB, timeout_s=60, on_wait=waiting.set))

    thread = threading.Thread(target=second)
    thread.start()
    # when the second one finds no room, then is released into it
    assert waiting.wait(30)
    assert admitted == []
    ledger.release(holder)
    thread.join(30)
    # then it holds its bytes (woken by the release, not by the 5 s poll)
    assert len(admitted) == 1
    assert ledger.held() == 4 * GIB


def test_a_wait_past_its_timeout_says_what_is_held(tmp_path):
    ledger = GpuLedger("gpu0", 10 * GIB, tmp_path, margin=0.0, poll_s=0.01)
    ledger.try_admit(8 * GIB)
    with pytest.raises(TimeoutError, match=r"no room for 4294967296 bytes within 0.05 s \(8589934592 of"):
        ledger.admit(4 * GIB, timeout_s=0.05)


def test_a_dead_process_holds_nothing(tmp_path):
    # given a process that reserved room and died without releasing it
    code = ("import sys; from pathlib import Path; from gpu_workers.sandbox.gpumemory import GpuLedger; "
            f"GpuLedger('gpu0', {10 * GIB}, Path({str(tmp_path)!r}), margin=0.0).try_admit({8 * GIB})")
    subprocess.run([sys.executable, "-c", code], check=True)
    # then its entry is gone at the next read
    ledger = GpuLedger("gpu0", 10 * GIB, tmp_path, margin=0.0)
    assert ledger.held() == 0
    assert ledger.try_admit(8 * GIB) is not None


def test_two_ledgers_of_one_gpu_share_their_reservations(tmp_path):
    a = GpuLedger("gpu0", 10 * GIB, tmp_path, margin=0.0)
    b = GpuLedger("gpu0", 10 * GIB, tmp_path, margin=0.0)
    other = GpuLedger("gpu1", 10 * GIB, tmp_path, margin=0.0)
    a.try_admit(6 * GIB)
    assert b.try_admit(6 * GIB) is None
    assert other.try_admit(6 * GIB) is not None


@pytest.mark.parametrize("text", [
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    "RuntimeError: CUDA error: out of memory",
    "RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED",
    "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
])
def test_cuda_out_of_memory_spellings(text):
    assert is_cuda_oom(text)
    assert classify_oom(text, announced_bytes=GIB, admitted=True) == "neighbour"
    assert classify_oom(text, announced_bytes=GIB, admitted=False) == "own"


def test_other_errors_are_not_out_of_memory():
    assert classify_oom("RuntimeError: shape mismatch", GIB, True) is None
    assert classify_oom("MemoryError", GIB, True) is None  # the host's, bounded by the child's own limit


def test_evaluation_bytes_follow_the_task_with_one_input_set_live_at_a_time():
    task = {"input_bytes": GIB, "output_bytes": GIB, "parameter_bytes": 0}
    small = evaluation_bytes(task, kept=0)
    large = evaluation_bytes({k: 2 * v for k, v in task.items()}, kept=0)
    assert large["total"] > small["total"]
    assert small["total"] == small["reference"] + small["candidate"]
    # one input set at a time in each child, whatever the number of trials and timed sets: KernelBench's
    # 6.4 GB elementwise tasks (level1/19_ReLU) fit on one H200 (150,109,880,320 bytes, less the 10% margin)
    # with the float64 reference
    relu = {"input_bytes": 4096 * 393216 * 4, "output_bytes": 4096 * 393216 * 4, "parameter_bytes": 0}
    assert evaluation_bytes(relu, kept=0)["total"] < 0.9 * 150_109_880_320
    # timed outputs kept whole, and the float64 reference, cost what they hold
    assert evaluation_bytes(task, kept=6)["candidate"] == small["candidate"] + 6 * GIB
    assert evaluation_bytes(task, kept=6)["reference"] == small["reference"] + 6 * GIB  # its baselines copy them too
    narrow = evaluation_bytes(task, kept=0, fp64=False)
    assert narrow["candidate"] == small["candidate"] and narrow["reference"] < small["reference"]
    weights = evaluation_bytes({**task, "parameter_bytes": GIB}, kept=0)
    assert weights["reference"] - small["reference"] == 6 * GIB  # two configurations, fp32 and fp64
    # a forward whose own tensors hold 5 GiB at once (activations) works in that, not in its output
    deep = evaluation_bytes({**task, "working_bytes": 5 * GIB}, kept=0)
    assert deep["reference"] - small["reference"] == 2 * 4 * GIB  # the working set in fp64
    assert deep["candidate"] - small["candidate"] == 4 * GIB
    assert evaluation_bytes({**task, "working_bytes": GIB // 2}, kept=0) == small  # never less than I + O


def test_host_limit_has_a_floor_and_grows_with_the_outputs():
    assert host_limit_mb({"input_bytes": 0, "output_bytes": 0, "parameter_bytes": 0}, 5, 5, "cuda") == 4096
    big = host_limit_mb({"input_bytes": GIB, "output_bytes": GIB, "parameter_bytes": 0}, 5, 5, "cuda")
    assert big == 2 * (3 * 5 + 5 + 2) * 1024 + 2 * 2 * 1024
    # outputs compared on the device are never reported to the host
    kept_on_gpu = host_limit_mb({"input_bytes": GIB, "output_bytes": 8 * GIB, "parameter_bytes": 0}, 5, 0, "cuda",
                                on_device=True)
    assert kept_on_gpu == 2 * 2 * 1024
    # the parameters: two configurations' state dicts and one model being built on the host (level3/1_MLP
    # exceeded a bound of twice its parameters on the H200)
    weights = host_limit_mb({"input_bytes": 0, "output_bytes": 0, "parameter_bytes": 4 * GIB}, 5, 0, "cuda",
                            on_device=True)
    assert weights == 2 * 3 * 4 * 1024
