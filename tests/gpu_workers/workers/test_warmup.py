"""A worker's warm-up: the zygote, a compile child and the light-build bridge before any evaluation."""

from __future__ import annotations

import os
import threading
import time

import pytest

from gpu_workers import EvalRequest, evaluate
from gpu_workers.build import compile as build
from gpu_workers.build import light as litebuild
from gpu_workers.build import pch as buildcache
from gpu_workers.build import toolchain
from gpu_workers.sandbox import process as sandbox
from gpu_workers.sandbox import refpool, zygote
from gpu_workers.workers import warmup

TASK = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(256)]


def get_init_inputs():
    return []
"""
CANDIDATE = """
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.clamp_min(x, 0.0)
"""


def test_warm_up_starts_the_zygote_and_leaves_the_bridge_and_the_header_built(kernelcourt_cache_dir):
    refpool.close_all()
    steps = warmup.warm_up("cpu", references=2)
    assert set(steps) == {"probe", "compile_child", "references", "pch"} and all(s >= 0 for s in steps.values())
    kept = refpool.idle_pids()
    assert len(kept) == (2 if refpool.enabled() else 0)
    result = evaluate(EvalRequest(task_source=TASK, kernel_source=CANDIDATE, device="cpu", track="open",
                                  baselines=(), timing_budget_s=0.05))
    assert result.status == "passed", result.message
    if refpool.enabled():  # reference children started and waiting: the first evaluations take them
        assert "reference: reused" in [label for label, _ in result.timing_stats["timeline"]]
        assert refpool.idle_pids() == kept  # it went back after
    # what the evaluation cost, by who (no build here: nothing compiled)
    cpu = result.timing_stats["cpu_s"]
    assert {"reference", "candidate", "parent", "judge", "total"} <= set(cpu) and "compile" not in cpu
    if sandbox.thread_clock(os.getpid()) is not None:  # the parent read the scheduler around the timing
        assert 0.0 <= result.timing_stats["descheduled_ms"] <= result.timing_stats["wall_ms"]
    assert cpu["candidate"] > 0 and cpu["total"] == pytest.approx(sum(v for k, v in cpu.items() if k != "total"),
                                                                 abs=0.01)
    assert any(z.alive for z in zygote.running())
    # its compile child had a build folder of its own, as a candidate's has: there the bridge is loaded
    assert toolchain.extension_dir(warmup.WARM_UP_SOURCE, "cpu", None).is_dir()
    if litebuild.enabled():
        assert list((kernelcourt_cache_dir / "lite").glob("kernelcourt_bridge_*/bridge.ok"))
    if buildcache._pch_place(kernelcourt_cache_dir, "cpu") is not None:  # GCC here: the headers are ready
        assert buildcache.pch_dir(kernelcourt_cache_dir, "cpu", wait=False) is not None
        assert buildcache.pch_dir(kernelcourt_cache_dir, "cpu", wait=False, kind="lite") is not None
    with build._spares_lock:
        assert build._spares  # the next compile finds a child ready


def test_warm_up_in_the_background_reports_what_it_did(capfd):
    warmup.warm_up_in_background("cpu", who="test worker").join(timeout=600)
    err = capfd.readouterr().err
    assert "test worker" in err and "warmed up for cpu: probe" in err


def test_the_warm_up_device_is_named_or_none(monkeypatch):
    monkeypatch.delenv("KERNELCOURT_WARM_UP", raising=False)
    assert warmup.configured_device() is None
    for value, expected in (("cuda", "cuda"), (" CPU ", "cpu"), ("0", None), ("off", None)):
        assert warmup.configured_device(value) == expected
    with pytest.raises(ValueError, match="cuda, cpu or empty"):
        warmup.configured_device("tpu")



FAKE_GCC = """#!/bin/sh
# stands in for g++ precompiling a header: slow on purpose, then writes its -o file
[ "$1" = --version ] && { echo "g++ (stand-in) 12"; exit 0; }
while [ $# -gt 0 ]; do [ "$1" = -o ] && out=$2; shift; done
sleep 2; echo built > "$out"
"""


def test_an_evaluation_never_waits_for_the_header_a_warm_up_does(tmp_path, monkeypatch):
    compiler = tmp_path / "g++"
    compiler.write_text(FAKE_GCC)
    compiler.chmod(0o755)
    monkeypatch.setenv("CXX", str(compiler))
    cache = tmp_path / "cache"
    before = [t.name for t in threading.enumerate()].count("kernelcourt-pch")
    started = time.monotonic()
    assert buildcache.pch_dir(cache, "cpu", wait=False) is None  # not built: a thread builds it
    assert buildcache.pch_dir(cache, "cpu", wait=False) is None  # ... one thread, however often asked
    assert time.monotonic() - started < 1.5
    assert [t.name for t in threading.enumerate()].count("kernelcourt-pch") == before + 1
    folder = buildcache.pch_dir(cache, "cpu")  # waits for that build (its lock), builds nothing again
    assert folder is not None and (folder / "torch" / "extension.h.gch").read_text() == "built\n"
    assert (folder / "torch" / "extension.h").resolve().name == "extension.h"  # the real header beside it
    assert buildcache.pch_dir(cache, "cpu", wait=False) == folder


def _gpus() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:  # noqa: BLE001 - no CUDA build, no driver
        return 0


@pytest.mark.gpu
@pytest.mark.skipif(_gpus() < 2, reason="needs two CUDA GPUs (the 2-GPU machine kind)")
def test_a_warm_up_over_several_gpus_leaves_reference_children_on_each(kernelcourt_cache_dir):
    refpool.close_all()
    steps = warmup.warm_up("cuda", references=1, gpus=[0, 1])
    assert set(steps) >= {"probe", "compile_child", "references"}
    assert len(refpool.idle_pids()) == 2  # one for each GPU
    for index in (1, 0):  # the second GPU's first evaluation finds its reference child as the first's does
        result = evaluate(EvalRequest(task_source=TASK, kernel_source=CANDIDATE, device="cuda", track="open",
                                      baselines=(), timing_budget_s=0.05, gpu_index=index))
        assert result.status == "passed", result.message
        assert result.hardware["gpu"]["index"] == index
        assert "reference: reused" in [label for label, _ in result.timing_stats["timeline"]]
    refpool.close_all()
