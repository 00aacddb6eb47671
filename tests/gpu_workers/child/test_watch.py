"""watch: one profiler session over every forward call; what started inside a call is the forward's."""

from __future__ import annotations

import threading

import pytest
import torch

from gpu_workers import judge
from gpu_workers.child.watch import ForwardWatch, kernel_base_name, own_kernel_names
from gpu_workers.rules import ALLOCATION_AND_VIEW_OPS, default_rule_set

CPU = torch.device("cpu")


def test_ops_below_the_python_dispatch_key_and_in_other_threads_are_the_forwards():
    # given a watch started before "the candidate" exists, and a worker thread started before any call
    watch = ForwardWatch(CPU, "", allowed_ops=ALLOCATION_AND_VIEW_OPS)
    watch.start()
    x = torch.randn(64)
    go, done = threading.Event(), threading.Event()

    def worker():
        go.wait()
        torch.sigmoid(x)
        done.set()

    thread = threading.Thread(target=worker)
    thread.start()
    torch.tanh(x)  # the judge's own op, outside every call
    # when a call hides one op from the dispatch key and hands another to the worker
    with watch.call():
        with torch._C._DisableTorchDispatch():
            torch.relu(x)
        torch.empty_like(x)
        go.set()
        done.wait()
    thread.join()
    report = watch.stop()
    # then both are library compute of the forward, the allocation is allowed, the judge's op is not there
    assert report["calls"] == 1
    assert report["library_ops"]["aten::relu"] == 1 and report["library_ops"]["aten::sigmoid"] == 1
    assert "aten::empty_like" not in report["library_ops"] and report["ops"]["aten::empty_like"] == 1
    assert "aten::tanh" not in report["ops"]


def test_torchs_other_namespaces_are_library_and_the_candidates_own_op_is_not():
    # given an operator the "candidate" registers after the watch was made, with an allowed body
    watch = ForwardWatch(CPU, "", allowed_ops=ALLOCATION_AND_VIEW_OPS)
    watch.start()
    lib = torch.library.Library("kc_watch_test", "DEF")
    lib.define("copy_of(Tensor x) -> Tensor")
    lib.impl("copy_of", lambda t: torch.Tensor.clone(t), "CPU")
    x = torch.randn(4, 8)
    try:
        with watch.call():
            torch.ops.kc_watch_test.copy_of(x)
            torch.ops.mkldnn._is_mkldnn_bf16_supported()
        report = watch.stop()
    finally:
        lib._destroy()
    # then its own op and the clone inside are not library compute; mkldnn's is
    assert "kc_watch_test::copy_of" in report["own_ops"]
    assert report["library_ops"] == {"mkldnn::_is_mkldnn_bf16_supported": 1}


def test_a_call_that_reaches_numpy_is_seen():
    watch = ForwardWatch(CPU, "", allowed_ops=ALLOCATION_AND_VIEW_OPS)
    watch.start()
    x = torch.randn(8)
    with watch.call():
        x.__array__().sum()
    outside = x.__array__()
    report = watch.stop()
    assert report["numpy"].get("torch numpy", 0) == 1
    assert outside.shape == (8,)


def test_a_forward_cannot_switch_the_operator_records_off_and_the_judges_work_between_calls_is_unrecorded():
    # given a watch, and the switch of the thread's operator records as a candidate would reach it
    switch_name = "_enable_" + "record_function"
    original = getattr(torch.autograd, switch_name)
    watch = ForwardWatch(CPU, "", allowed_ops=ALLOCATION_AND_VIEW_OPS)
    watch.start()
    x = torch.randn(64)
    try:
        # when a call tries to switch them off around library compute, and the judge works between calls
        with watch.call():
            with pytest.raises(RuntimeError, match="records on"):
                getattr(torch.autograd, switch_name)(False)
            with pytest.raises(RuntimeError, match="records on"):
                getattr(torch._C._autograd, switch_name)(False)
            torch.relu(x)
        torch.tanh(x)
        with watch.call():
            torch.sigmoid(x)
    finally:
        report = watch.stop()
    events = {e.name() for e in watch._profiler.profiler.kineto_results.events()}
    # then the compute is seen, the tries are reported and rejected, and the judge's op left no record
    assert report["library_ops"]["aten::relu"] == 1 and report["library_ops"]["aten::sigmoid"] == 1
    assert report["records_switched_off"] == 2
    found = judge.watch_findings(default_rule_set("strict"), report)
    assert [f.rule for f in found] == ["library_compute"] and found[0].severity == "reject"
    assert "tried 2 time(s) to switch the profiler's operator records off" in found[0].message
    assert "aten::tanh" not in events and "aten::relu" in events
    # and once the watch stops, the switch is torch's own again, and on
    assert getattr(torch.autograd, switch_name) is original is getattr(torch._C._autograd, switch_name)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as after:
        torch.tanh(x)
    assert "aten::tanh" in {e.name for e in after.events()}


def test_a_disabled_watch_records_nothing():
    watch = ForwardWatch(CPU, "", enabled=False)
    watch.start()
    with watch.call():
        torch.relu(torch.randn(3))
    assert watch.stop()["library_ops"] == {} and watch.stop()["watched"] is False


def test_own_kernel_names_and_launch_names():
    source = '''
    __global__ void scale_relu(const float* x, float* y, int n) {}
    template <int B> __global__ __launch_bounds__(256) void tile_mm(float* a) {}
    extern "C" __global__ void raw_k(float* a) {}
    @triton.jit
    def fused_add(x_ptr, BLOCK: tl.constexpr):
        pass
    '''
    assert own_kernel_names(source) == {"scale_relu", "tile_mm", "raw_k", "fused_add"}
    assert kernel_base_name("void tile_mm<128>(float*)") == "tile_mm"
    assert kernel_base_name("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
                            "std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)"
                            ) == "vectorized_elementwise_kernel"
    assert kernel_base_name("sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32") == (
        "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32")
