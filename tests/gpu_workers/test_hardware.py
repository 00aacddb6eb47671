"""Host facts about a GPU: the NUMA node and CPUs it hangs off, and where a timing ran against them."""

from __future__ import annotations

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
