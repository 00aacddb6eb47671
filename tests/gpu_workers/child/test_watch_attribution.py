"""watch.attribute: which of kineto's events belong to a forward call, on hand-made events (no GPU).

The events mirror kineto's: a framework event (an operator, the forward's range) has its own id and
no link; a runtime call and the device work it launched share CUPTI's id, and link to the innermost
framework event open on the launching thread (nothing, on a thread with none open). The two id
spaces are counted separately, so the same number turns up in both, as it does on a real device.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from pathlib import Path

from gpu_workers.child.watch import attribute

LABEL = "kernelcourt.forward.test"
MAIN_THREAD, OTHER_THREAD = 11, 12
TIMER_STREAM, SIDE_STREAM = 7, 13


class DeviceType(enum.Enum):  # str() is "DeviceType.CPU", as torch's own enum prints
    CPU = 0
    CUDA = 1


@dataclass(frozen=True)
class Event:
    """The methods of torch's _KinetoEvent that the attribution reads."""

    event_name: str
    start: int
    duration: int
    device: DeviceType
    own_id: int
    link: int
    resource: int  # the thread on the host, the stream on the device
    kind: str
    annotation: bool = False

    def name(self) -> str:
        return self.event_name

    def start_ns(self) -> int:
        return self.start

    def duration_ns(self) -> int:
        return self.duration

    def device_type(self) -> DeviceType:
        return self.device

    def correlation_id(self) -> int:
        return self.own_id

    def linked_correlation_id(self) -> int:
        return self.link

    def device_resource_id(self) -> int:
        return self.resource

    def start_thread_id(self) -> int:
        return self.resource if self.device is DeviceType.CPU else 0

    def activity_type(self) -> str:
        return self.kind

    def is_user_annotation(self) -> bool:
        return self.annotation


def _recorded(f: dict) -> Event:
    """An event as bench/watch_events.py wrote it down (torch 2.11's records have no activity type)."""
    device = DeviceType.CPU if f["device_type"].endswith("CPU") else DeviceType.CUDA
    return Event(f["name"], f["start_ns"], f["duration_ns"], device, f["correlation_id"], f["linked_correlation_id"],
                 f["device_resource_id"], "", annotation=bool(f["is_user_annotation"]))


def forward_range(start: int, end: int, own_id: int, thread: int = MAIN_THREAD) -> Event:
    return Event(LABEL, start, end - start, DeviceType.CPU, own_id, 0, thread, "user_annotation", annotation=True)


def op(name: str, start: int, own_id: int, thread: int = MAIN_THREAD) -> Event:
    return Event(name, start, 5, DeviceType.CPU, own_id, 0, thread, "cpu_op")


def launch(start: int, cupti_id: int, link: int, thread: int = MAIN_THREAD) -> Event:
    return Event("cudaLaunchKernel", start, 3, DeviceType.CPU, cupti_id, link, thread, "cuda_runtime")


def kernel(name: str, start: int, cupti_id: int, link: int, stream: int = TIMER_STREAM) -> Event:
    return Event(name, start, 20, DeviceType.CUDA, cupti_id, link, stream, "kernel")


def launched(name: str, at: int, cupti_id: int, link: int, stream: int = TIMER_STREAM,
             thread: int = MAIN_THREAD) -> list[Event]:
    """A runtime call at ``at`` and its kernel, which runs on the device after the call returns."""
    return [launch(at, cupti_id, link, thread), kernel(name, at + 500, cupti_id, link, stream)]


def test_a_kernel_linked_to_an_op_inside_the_range_is_the_forwards_even_when_it_runs_after_it():
    # given an op inside the range that launches a kernel, which runs on the device once the range has closed
    events = [forward_range(100, 200, own_id=1), op("aten::mul", 110, own_id=2),
              *launched("mul_kernel", 120, cupti_id=40, link=2)]
    # when the events are attributed
    ops, kernels, _, _ = attribute(events, LABEL)
    # then the op and its kernel are the forward's, and the runtime call is no op
    assert ops == {"aten::mul": 1}
    assert kernels == {"mul_kernel": 1}


def test_a_judge_kernel_is_not_the_forwards_even_when_its_cupti_id_is_an_ops_id_inside_the_range():
    # given the forward's op with framework id 3, and the judge's read after the call, whose CUPTI id is also 3
    events = [forward_range(100, 200, own_id=1), op("aten::mul", 110, own_id=3),
              *launched("mul_kernel", 120, cupti_id=9, link=3),
              op("aten::sum", 300, own_id=4), *launched("judge_reduce_kernel", 310, cupti_id=3, link=4)]
    # when the events are attributed
    ops, kernels, _, _ = attribute(events, LABEL)
    # then only the forward's own kernel is counted: the ids of the two spaces are never compared
    assert ops == {"aten::mul": 1}
    assert kernels == {"mul_kernel": 1}


def test_a_synchronisation_inside_the_range_lends_its_cupti_id_to_no_framework_event():
    # given a forward that synchronises (CUPTI reports it on the host, unlinked, with CUPTI's id 4) and
    # the judge's fingerprint after the call, an op whose framework id is also 4, and its kernels
    sync = Event("cudaStreamSynchronize", 150, 10, DeviceType.CPU, 4, 0, MAIN_THREAD, "cuda_sync")
    events = [forward_range(100, 200, own_id=1), op("aten::mul", 110, own_id=3),
              *launched("mul_kernel", 120, cupti_id=9, link=3), sync,
              op("aten::dot", 300, own_id=4), *launched("dot_kernel", 310, cupti_id=12, link=4)]
    # when the events are attributed
    ops, kernels, _, _ = attribute(events, LABEL)
    # then the judge's kernel is not the forward's (on the H200 such a collision counted the judge's
    # fingerprints as the candidate's library compute); the synchronisation is a host event of the
    # forward's, which the verdict does not count as an operator (the dispatcher does not know it)
    assert kernels == {"mul_kernel": 1}
    assert ops == {"aten::mul": 1, "cudaStreamSynchronize": 1}


def test_a_judge_kernel_launched_outside_every_framework_event_is_not_the_forwards_when_its_id_is_an_ops():
    # given the judge's spin, launched just before a timed call with no framework event open (its call and
    # kernel link to nothing), whose CUPTI id 3 is also the framework id of the forward's op inside the range
    events = [*launched("spin_kernel", 90, cupti_id=3, link=0),
              forward_range(100, 200, own_id=1), op("aten::mul", 110, own_id=3),
              *launched("mul_kernel", 120, cupti_id=9, link=3)]
    # when the events are attributed
    ops, kernels, _, _ = attribute(events, LABEL)
    # then the spin is not the forward's (on the H200 it was, once in a timing's 120 calls): an op is
    # never the call that launched a kernel
    assert kernels == {"mul_kernel": 1}
    assert ops == {"aten::mul": 1}


def test_a_judge_kernel_whose_link_names_an_op_of_the_forwards_is_known_by_its_launch_after_the_call():
    # given a judge kernel whose link carries the number of an op inside the range (however that came
    # about on a real device), launched by a runtime call after the range closed
    events = [forward_range(100, 200, own_id=1), op("aten::mul", 110, own_id=3),
              *launched("mul_kernel", 120, cupti_id=9, link=3),
              *launched("dot_kernel", 310, cupti_id=12, link=3)]
    # when the events are attributed
    _, kernels, _, _ = attribute(events, LABEL)
    # then only the kernel launched while the forward ran is its
    assert kernels == {"mul_kernel": 1}


def test_the_records_of_a_real_h200_are_attributed_call_by_call():
    # given what the profiler recorded on an H200 for three watched calls (bench/watch_events.py): torch
    # 2.11's events carry no activity type, CUPTI's module-loading records carry framework ids, and
    # CUPTI's and the framework's ids overlap (the relu's kernel has CUPTI id 24, the judge's as_strided op
    # framework id 24)
    recorded = json.loads((Path(__file__).parent / "data" / "h200_watch_events.json").read_text())
    events = [_recorded(dict(zip(recorded["fields"], row))) for row in recorded["events"]]
    # when they are attributed
    ops, kernels, elsewhere, _ = attribute(events, recorded["label"])
    # then every call's elementwise kernels and cuBLAS launches are the forward's, and none of the judge's
    # reads (reductions, the add, the memset and copy of .item()) is
    elementwise = [n for n in kernels if "vectorized_elementwise" in n]
    gemm = [n for n in kernels if "gemm" in n]
    assert sum(kernels[n] for n in elementwise) == 6 and sum(kernels[n] for n in gemm) == 6
    assert set(kernels) == set(elementwise) | set(gemm)
    assert {k: ops[k] for k in ("aten::mul", "aten::relu", "aten::clamp_min", "aten::matmul", "aten::mm")} == \
        {"aten::mul": 3, "aten::relu": 3, "aten::clamp_min": 3, "aten::matmul": 3, "aten::mm": 3}
    assert not {"aten::sum", "aten::add", "aten::item"} & set(ops)
    assert elsewhere == {}
    # and each call's device time is its own kernels' (some 11 us), none of the judge's reads in it
    spans = attribute(events, recorded["label"]).spans_ns
    assert len(spans) == 3 and all(8_000 < span < 20_000 for span in spans), spans


def test_a_kernel_launched_directly_inside_the_range_links_to_the_range_and_is_the_forwards():
    # given a launch made inside the range with no operator around it (an extension's own launch)
    events = [forward_range(100, 200, own_id=5), *launched("my_kernel", 150, cupti_id=5, link=5),
              op("aten::copy_", 300, own_id=6), *launched("judge_copy_kernel", 310, cupti_id=6, link=6)]
    # when the events are attributed
    ops, kernels, _, _ = attribute(events, LABEL)
    # then the kernel is the forward's through the range's own id, and the range is not one of its ops
    assert ops == {}
    assert kernels == {"my_kernel": 1}


def test_an_unlinked_kernel_is_the_forwards_when_its_runtime_call_started_inside_the_range():
    # given a native thread of the candidate's (no framework event open, so neither its call nor its kernel
    # links to anything) launching inside the range, and the same thread launching once after it
    events = [forward_range(100, 200, own_id=1), *launched("native_kernel", 150, cupti_id=8, link=0,
                                                           thread=OTHER_THREAD),
              *launched("native_kernel", 250, cupti_id=2, link=0, thread=OTHER_THREAD)]
    # and a judge kernel linked to the framework id that equals the inside call's CUPTI id
    events += [op("aten::sum", 300, own_id=8), *launched("judge_reduce_kernel", 310, cupti_id=30, link=8)]
    # when the events are attributed
    ops, kernels, _, _ = attribute(events, LABEL)
    # then only the launch made inside the range counts, and the judge's op is not the forward's
    assert "aten::sum" not in ops
    assert kernels == {"native_kernel": 1}


def test_the_ranges_own_device_side_annotation_is_not_a_kernel():
    # given the range's span on the device (kineto's gpu_user_annotation), linked to the range, beside a kernel
    device_span = Event(LABEL, 600, 90, DeviceType.CUDA, 50, 1, TIMER_STREAM, "gpu_user_annotation", annotation=True)
    events = [forward_range(100, 200, own_id=1), device_span, *launched("my_kernel", 150, cupti_id=51, link=1)]
    # when the events are attributed
    _, kernels, _, _ = attribute(events, LABEL)
    # then only the kernel is one
    assert kernels == {"my_kernel": 1}


def test_an_op_on_another_thread_inside_the_range_is_the_forwards_and_one_between_calls_is_not():
    # given two calls; a worker thread's op (and its kernel) inside the first, the judge's op between the two
    events = [forward_range(100, 200, own_id=1), forward_range(400, 500, own_id=20),
              op("aten::sigmoid", 150, own_id=2, thread=OTHER_THREAD),
              *launched("sigmoid_kernel", 160, cupti_id=21, link=2, thread=OTHER_THREAD),
              op("aten::tanh", 300, own_id=3), *launched("judge_tanh_kernel", 310, cupti_id=2, link=3),
              op("aten::relu", 450, own_id=4), *launched("relu_kernel", 460, cupti_id=3, link=4)]
    # when the events are attributed
    ops, kernels, _, _ = attribute(events, LABEL)
    # then the worker's op counts, the judge's between the calls does not
    assert ops == {"aten::sigmoid": 1, "aten::relu": 1}
    assert kernels == {"sigmoid_kernel": 1, "relu_kernel": 1}


def test_forward_kernels_on_a_stream_the_judge_never_used_are_reported_as_on_another_stream():
    # given forward kernels on the timer's stream and on a side stream, and the judge's read on the timer's stream
    events = [forward_range(100, 200, own_id=1), op("aten::mul", 110, own_id=2),
              *launched("mul_kernel", 120, cupti_id=10, link=2, stream=TIMER_STREAM),
              *launched("side_kernel", 130, cupti_id=11, link=2, stream=SIDE_STREAM),
              *launched("side_kernel", 140, cupti_id=12, link=1, stream=SIDE_STREAM),
              op("aten::sum", 300, own_id=3), *launched("judge_reduce_kernel", 310, cupti_id=2, link=3)]
    # when the events are attributed
    _, kernels, elsewhere, _ = attribute(events, LABEL)
    # then the side stream's kernels are the forward's and reported as elsewhere; the timer stream's are not
    assert kernels == {"mul_kernel": 1, "side_kernel": 2}
    assert elsewhere == {"side_kernel": 2}


def test_with_no_device_work_of_the_judges_no_stream_is_called_another():
    # given forward kernels on a side stream and no device work of the judge's to say which stream is its own
    events = [forward_range(100, 200, own_id=1), *launched("side_kernel", 130, cupti_id=4, link=1, stream=SIDE_STREAM)]
    # when the events are attributed
    _, kernels, elsewhere, _ = attribute(events, LABEL)
    # then the kernel is the forward's, and nothing is said to be on another stream
    assert kernels == {"side_kernel": 1}
    assert elsewhere == {}


def test_each_calls_device_span_is_the_union_of_its_kernels_by_their_own_timestamps():
    # given two calls: the first launches two kernels whose runs overlap on two streams (610-630 and
    # 620-640: 30 ns of device time, not 40), the second one kernel of 20 ns; and a judge kernel after each
    first = [forward_range(100, 200, own_id=1), *launched("a_kernel", 110, cupti_id=20, link=1),
             launch(120, cupti_id=21, link=1), kernel("b_kernel", 620, cupti_id=21, link=1, stream=SIDE_STREAM),
             op("aten::sum", 300, own_id=2), *launched("judge_reduce_kernel", 310, cupti_id=22, link=2)]
    second = [forward_range(1000, 1100, own_id=3), *launched("a_kernel", 1010, cupti_id=23, link=3),
              op("aten::sum", 1200, own_id=4), *launched("judge_reduce_kernel", 1210, cupti_id=24, link=4)]
    # when they are attributed
    spans = attribute(first + second, LABEL).spans_ns
    # then each call has the device time its own kernels ran, the judge's left out
    assert spans == [30, 20]
