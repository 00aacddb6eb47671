"""Host facts about a GPU: the NUMA node and CPUs it hangs off, and where a timing ran against them."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest

from gpu_workers import hardware


def test_cpu_lists_read_as_the_kernel_writes_them():
    assert hardware.parse_cpu_list("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert hardware.parse_cpu_list("") == []


def test_a_pci_device_names_its_node_and_cpus_from_sysfs():
    assert hardware.gpu_host_side("") == {}
    devices = sorted(os.listdir("/sys/bus/pci/devices")) if os.path.isdir("/sys/bus/pci/devices") else []
    if not devices:
        pytest.skip("no PCI devices in sysfs here")
    facts = hardware.gpu_host_side(devices[0])
    assert facts["pci"] == devices[0]
    assert set(facts["local_cpus"]) <= set(range(os.cpu_count() or 1)) and isinstance(facts["numa_node"], int)
    assert hardware.gpu_host_side("ffff:ff:1f.7") == {"pci": "ffff:ff:1f.7"}  # no such device: nothing claimed


def _result(local: list[int], cpus: list[int]) -> SimpleNamespace:
    return SimpleNamespace(hardware={"gpu": {"local_cpus": local}}, timing_stats={"kernel": {"host_cpus": cpus}})


def test_where_a_timing_ran_against_the_gpus_node(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    assert hardware.placement(_result(list(range(8)), [2, 5])) == "local"
    assert hardware.placement(_result(list(range(8)), [9])) == "remote"
    assert hardware.placement(_result(list(range(8)), [7, 8])) == "mixed"
    assert hardware.placement(_result(list(range(16)), [3])) == "unknown"  # one node: nothing to tell apart
    assert hardware.placement(_result([], [3])) == "unknown"
    assert hardware.placement(SimpleNamespace(hardware={}, timing_stats={})) == "unknown"


def test_a_gpu_is_probed_once_however_many_ask_at_once_and_a_failed_probe_is_not_kept(monkeypatch):
    """A pool's first round asks for each GPU's facts from every worker thread together; each probe is
    a Python with CUDA (seconds). The probe process stands in here for a GPU this machine lacks."""
    import threading
    import time

    calls: list[int] = []

    def probe(argv, **_):
        index = int(argv[-1])
        calls.append(index)
        time.sleep(0.2)
        if index == 98:
            return SimpleNamespace(returncode=1, stdout="", stderr="no device 98")
        return SimpleNamespace(returncode=0, stderr="", stdout=json.dumps({"name": "Stand-in GPU", "index": index}) + "\n")

    monkeypatch.setattr(hardware.subprocess, "run", probe)
    hardware._probe_gpu_once.cache_clear()
    try:
        facts: list[dict] = []
        threads = [threading.Thread(target=lambda: facts.append(hardware._probe_gpu(97))) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert calls == [97] and len(facts) == 8 and all(f["name"] == "Stand-in GPU" for f in facts)
        for _ in range(2):  # each caller after a failure tries again
            with pytest.raises(RuntimeError, match="no usable CUDA device 98"):
                hardware._probe_gpu(98)
        assert calls == [97, 98, 98]
    finally:
        hardware._probe_gpu_once.cache_clear()


def test_each_gpu_times_on_a_cpu_of_its_own_and_children_are_kept_off_those_cpus(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    one = {"device": "cuda", "gpu": {"index": 0, "count": 1}}
    assert hardware.timing_cpu(one) == 15
    assert hardware.child_cpus(one) == list(range(15))
    from gpu_workers.build.compile import child_env
    from gpu_workers.schema import EvalRequest

    cuda = EvalRequest(task_source="", kernel_source="", device="cuda")
    assert child_env(cuda, one, None, hide_gpu=False)["KERNELCOURT_CHILD_CPUS"] == ",".join(map(str, range(15)))
    cpu = EvalRequest(task_source="", kernel_source="", device="cpu")
    assert "KERNELCOURT_CHILD_CPUS" not in child_env(cpu, {"device": "cpu"}, None, hide_gpu=True)
    # two GPUs on two nodes: each a CPU of its own node (counted back by its index), neither a child's
    nodes = {0: list(range(8)), 1: list(range(8, 16))}
    facts = {i: {"device": "cuda", "gpu": {"index": i, "count": 2, "local_cpus": nodes[i]}} for i in (0, 1)}
    monkeypatch.setattr(hardware, "hardware_info", lambda device, index: facts[index])
    assert [hardware.timing_cpu(facts[i]) for i in (0, 1)] == [7, 14]
    assert hardware.child_cpus(facts[0]) == hardware.child_cpus(facts[1]) == [*range(7), *range(8, 14), 15]
    # nothing held back on the CPU device, nor where a timing CPU would cost a small machine a core in four
    assert hardware.child_cpus({"device": "cpu"}) is None
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert hardware.timing_cpu(one) == 3 and hardware.child_cpus(one) is None


def test_a_child_keeps_to_the_cpus_it_was_given_and_so_do_the_threads_it_starts():
    mine = sorted(os.sched_getaffinity(0))
    if len(mine) < 2:
        pytest.skip("one CPU here: nothing to keep a child off")
    given = mine[:1]
    probe = ("import json, os, threading\n"
             "from gpu_workers.child.harden import keep_to_cpus\n"
             "keep_to_cpus()\n"
             "seen = []\n"
             "t = threading.Thread(target=lambda: seen.append(sorted(os.sched_getaffinity(threading.get_native_id()))))\n"
             "t.start(); t.join()\n"
             "print(json.dumps([sorted(os.sched_getaffinity(0)), seen[0]]))\n")
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONPATH": root, "KERNELCOURT_CHILD_CPUS": ",".join(map(str, given))}
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [given, given]
    # a CPU it may not use leaves it where it was, never without one
    env["KERNELCOURT_CHILD_CPUS"] = "100000"
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [mine, mine]
