"""isolation: the judge's operations with the candidate's modes off, the operator snapshot, output
reads and fingerprints."""

from __future__ import annotations

import ctypes
import mmap

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from gpu_workers.child.isolation import (
    Fingerprint,
    OperatorSnapshot,
    copy_at_return,
    judge_ops,
    process_cpu_s,
    read_all,
)
from gpu_workers.judge import fingerprint_mismatch


class CountingDispatch(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


class CountingFunction(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.seen.append(getattr(func, "__name__", "?"))
        return func(*args, **(kwargs or {}))


class Loud(torch.Tensor):
    calls = 0

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        cls.calls += 1
        return super().__torch_function__(func, types, args, kwargs or {})


def test_judge_ops_runs_with_every_candidate_mode_off_and_puts_them_back():
    # given a dispatch mode and a function mode installed by "the candidate"
    dispatch, function = CountingDispatch(), CountingFunction()
    x = torch.randn(8)
    with dispatch, function:
        # when the judge copies and clones inside judge_ops
        with judge_ops():
            y = torch.empty(8)
            torch.Tensor.copy_(y, x)
            z = torch.Tensor.clone(y)
        # then neither mode saw the judge's work, and both are active again afterwards
        assert dispatch.seen == [] and function.seen == []
        torch.Tensor.clone(z)
    assert "clone" in dispatch.seen and "clone" in function.seen
    assert torch.equal(z, x)


def test_judge_ops_skips_a_subclass_torch_function():
    loud = torch.randn(4).as_subclass(Loud)
    Loud.calls = 0
    with judge_ops():
        torch.Tensor.clone(loud)
    assert Loud.calls == 0
    torch.Tensor.clone(loud)
    assert Loud.calls > 0


def test_operator_snapshot_sees_a_kernel_registered_over_a_judge_op():
    # given a snapshot taken before "the candidate's import"
    snapshot = OperatorSnapshot()
    assert snapshot.changed() == []
    # when a kernel is registered over aten::clone for a key it had none for (Python, any spelling)
    lib = torch.library.Library("aten", "IMPL")
    try:
        lib.impl("clone", lambda *args, **kwargs: None, "Meta")
        # then the snapshot says so
        assert snapshot.changed() == ["aten::clone (a kernel registered over it)"]
    finally:
        lib._destroy()


def test_read_all_reads_every_output_byte_and_fills_a_lazily_mapped_output():
    # given an output over a mapping whose pages exist only once touched (an anonymous mmap)
    length = mmap.PAGESIZE * 4
    buf = mmap.mmap(-1, length)
    out = torch.frombuffer(buf, dtype=torch.float32)
    # when every byte is read (with other outputs that are not tensors or are empty)
    read_all([out, 3, torch.zeros(0)])
    # then every page of it is resident (mincore: all pages touched)
    libc = ctypes.CDLL(None)
    vec = (ctypes.c_ubyte * 4)()
    address = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    assert libc.mincore(ctypes.c_void_p(address), ctypes.c_size_t(length), vec) == 0
    assert [v & 1 for v in vec] == [1, 1, 1, 1]
    del out


def test_an_output_without_readable_memory_is_found_without_touching_it():
    # given a tensor over a mapping without access (as a fault handler would fill later)
    length = mmap.PAGESIZE * 2
    buf = mmap.mmap(-1, length, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    address = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    libc = ctypes.CDLL(None)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    readable = torch.frombuffer(buf, dtype=torch.float32)
    readable.copy_(torch.arange(readable.numel(), dtype=torch.float32))
    copies, unreadable = copy_at_return([readable], lambda leaf: leaf.clone())
    assert unreadable == [] and torch.equal(copies[0], readable)
    assert libc.mprotect(ctypes.c_void_p(address), length, 0) == 0  # PROT_NONE
    try:
        # then the first read names it, and falls back to the judge's clone only after saying so
        # (here the clone must not run: it would fault)
        def refuse(leaf):
            return "not read"
        copies, unreadable = copy_at_return([readable, 3], refuse)
        assert len(unreadable) == 1 and unreadable[0].startswith("output 0: bytes from ")
        assert copies == ["not read", "not read"]
    finally:
        libc.mprotect(ctypes.c_void_p(address), length, mmap.PROT_READ | mmap.PROT_WRITE)
        del readable


def test_the_first_read_keeps_a_view_s_strides_and_values():
    # given outputs that are views: transposed, expanded (stride 0), offset into a larger storage
    base = torch.randn(6, 8, dtype=torch.float64)
    views = [base.t(), torch.randn(5).expand(4, 5), base[2:, 3:], torch.zeros(0), torch.randn(3, dtype=torch.cfloat)]
    copies, unreadable = copy_at_return(views, lambda leaf: leaf.clone())
    assert unreadable == []
    for view, copy in zip(views, copies):
        # then each copy holds the same values in the same layout, in memory of its own
        assert copy.shape == view.shape and copy.stride() == view.stride() and torch.equal(copy, view)
        if view.numel():
            assert copy.data_ptr() != view.data_ptr()
    base.zero_()
    assert torch.count_nonzero(copies[0]) > 0


def test_fingerprints_pass_outputs_within_tolerance_and_fail_others():
    fp = Fingerprint(seed=20261201)
    ref = torch.randn(50_000)
    want, bounds = fp.of([ref]), Fingerprint.bounds([ref], atol=1e-2, rtol=1e-2)
    # an output within the tolerance everywhere (even with its error's sign chosen per element) passes
    within = ref + 0.0099 * torch.sign(torch.randn(50_000))
    assert fingerprint_mismatch(fp.of([within]), want, bounds) is None
    assert fingerprint_mismatch(Fingerprint(20261201).of([ref.clone()]), want, bounds) is None
    # another input's answer, a shifted one, a half-written one and NaN fail
    for wrong in (torch.randn(50_000), ref.roll(1), torch.cat([ref[:25_000], torch.zeros(25_000)]),
                  torch.full((50_000,), float("nan"))):
        assert fingerprint_mismatch(fp.of([wrong]), want, bounds) is not None
    assert fingerprint_mismatch(fp.of([ref, ref]), want, bounds) == "2 outputs, the reference has 1"


def test_process_cpu_time_counts_other_threads():
    import threading

    before = process_cpu_s()
    done = threading.Event()

    def spin():
        x = torch.randn(256, 256)
        for _ in range(30):
            x = torch.tanh(x)
        done.set()

    worker = threading.Thread(target=spin)
    worker.start()
    worker.join()
    assert done.is_set() and process_cpu_s() > before
