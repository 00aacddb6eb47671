"""Hardware keys and the ceilings used by the roofline floor.

The parent never initialises CUDA: GPU facts come from a short probe subprocess.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import subprocess
import sys
import threading
from typing import Any

# Peak memory bandwidth (bytes/s) and the most generous FLOP rate a kernel of that dtype may use
# (fp32 tasks may legitimately be served by TF32 tensor cores only under review, so the floor uses it).
_GPU_CEILINGS: tuple[tuple[str, float, float], ...] = (
    ("H200", 4.8e12, 989e12),
    ("H100", 3.35e12, 989e12),
    ("H800", 3.35e12, 989e12),
    ("GH200", 4.9e12, 989e12),
    ("B200", 8.0e12, 2250e12),
    ("A100", 2.04e12, 312e12),
    ("L40", 0.86e12, 362e12),
    ("A10", 0.6e12, 125e12),
    ("4090", 1.0e12, 330e12),
)
_UNKNOWN_GPU = (10e12, 5000e12)
# A CPU never streams faster than this from cache or memory on the machines we run on; generous on
# purpose so that the floor only catches the impossible.
_CPU_CEILING = (1.0e12, 20e12)


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


_PROBE = r"""
import json, torch
idx = int(__import__('sys').argv[1])
p = torch.cuda.get_device_properties(idx)
print(json.dumps({"name": torch.cuda.get_device_name(idx), "capability": f"{p.major}.{p.minor}",
  "l2_bytes": int(getattr(p, "L2_cache_size", 0)), "memory_bytes": int(p.total_memory),
  "sm_count": int(p.multi_processor_count), "torch": torch.__version__, "cuda": torch.version.cuda,
  "uuid": str(getattr(p, "uuid", "") or ""), "count": torch.cuda.device_count(),
  "pci": "%04x:%02x:%02x.0" % (getattr(p, "pci_domain_id", 0), getattr(p, "pci_bus_id", 0), getattr(p, "pci_device_id", 0))
         if hasattr(p, "pci_bus_id") else ""}))
"""


def parse_cpu_list(text: str) -> list[int]:
    """The kernel's CPU list format ("0-7,16-23") as numbers."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        cpus.extend(range(int(low), int(high or low) + 1))
    return cpus


def gpu_host_side(pci: str) -> dict[str, Any]:
    """The NUMA node and CPUs the GPU at PCI address ``pci`` hangs off (sysfs; empty where unknown).
    A process timing on another node's CPUs reaches the GPU through the socket interconnect."""
    if not pci:
        return {}
    folder = f"/sys/bus/pci/devices/{pci.lower()}"
    facts: dict[str, Any] = {"pci": pci}
    try:
        with open(f"{folder}/numa_node", encoding="ascii") as handle:
            facts["numa_node"] = int(handle.read().strip())
        with open(f"{folder}/local_cpulist", encoding="ascii") as handle:
            facts["local_cpus"] = parse_cpu_list(handle.read())
    except (OSError, ValueError):
        pass
    return facts


def placement(result: Any) -> str:
    """Where an evaluation's kernel timing ran on the host, against the GPU's own NUMA node: "local",
    "remote", "mixed" (it moved between nodes' CPUs) or "unknown" (no node facts)."""
    local = set((result.hardware.get("gpu") or {}).get("local_cpus") or ())
    cpus = set((result.timing_stats.get("kernel") or {}).get("host_cpus") or ())
    if not local or not cpus or local >= set(range(os.cpu_count() or 1)):
        return "unknown"
    if cpus <= local:
        return "local"
    return "remote" if not cpus & local else "mixed"


_PROBE_LOCKS: dict[int, threading.Lock] = {}
_PROBE_LOCKS_LOCK = threading.Lock()


def _probe_gpu(index: int) -> dict[str, Any]:
    """GPU ``index``'s facts, probed once per process however many evaluations ask at once: a probe is
    a Python that imports torch and makes a CUDA context (seconds), and a pool's first round asks for
    each GPU from every worker thread together. A failed probe is not kept: the next caller tries again."""
    with _PROBE_LOCKS_LOCK:
        lock = _PROBE_LOCKS.setdefault(index, threading.Lock())
    with lock:
        return _probe_gpu_once(index)


@functools.lru_cache(maxsize=16)
def _probe_gpu_once(index: int) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-c", _PROBE, str(index)], capture_output=True, text=True,
                         timeout=120, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"no usable CUDA device {index}: {out.stderr.strip()[-500:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def hardware_info(device: str, gpu_index: int | None = None) -> dict[str, Any]:
    """{key, name, torch, cuda, ...}: the key never mixes GPUs, torch or CUDA versions."""
    import torch

    if device == "cuda":
        info = _probe_gpu(gpu_index or 0)
        name = info["name"]
        cuda = info["cuda"] or "none"
        extra = {k: info[k] for k in ("capability", "l2_bytes", "memory_bytes", "sm_count")}
        extra["gpu"] = {"index": gpu_index or 0, "uuid": info.get("uuid", ""), "count": int(info.get("count") or 1),
                        **gpu_host_side(info.get("pci", ""))}
    else:
        name = _cpu_name()
        cuda = "none"
        extra = {"cores": os.cpu_count() or 1}
    key = f"{device}:{name}|torch-{torch.__version__}|cuda-{cuda}"
    return {"key": key, "device": device, "name": name, "torch": torch.__version__, "cuda": cuda, **extra}


def timing_cpu(hardware: dict[str, Any]) -> int | None:
    """The CPU a GPU's host-bound timings run on (``pipeline/pairing.py``: both sides of a pair, so
    both meet the same CPU's speed). One timing holds a GPU at a time, so each GPU gets a CPU of its
    own, counted from the last this process may use (of the GPU's own NUMA node, where the machine
    says which). None where fewer than two CPUs are at hand."""
    try:
        mine = set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
    gpu = hardware.get("gpu") or {}
    cpus = sorted((set(gpu.get("local_cpus") or ()) & mine) or mine)
    if len(cpus) < 2:
        return None
    return cpus[-1 - int(gpu.get("index") or 0) % len(cpus)]


# A machine keeps its GPUs' timing CPUs free of children only where this many CPUs or more are at
# hand per GPU: on fewer, one core less for sixteen evaluations' compiles and references costs more
# than a quiet timing CPU gives.
CPUS_PER_TIMING_CPU = 8


def child_cpus(hardware: dict[str, Any]) -> list[int] | None:
    """The CPUs an evaluation's children may run on: every CPU this process may use but the timing
    CPUs of this machine's GPUs (``timing_cpu``), so that neighbours' compiles and references never
    take the CPU a pair times on (on the H100 at 16 workers a reference's paired timing waited 14% of
    it for that CPU while neighbours compiled). None: no restriction (the CPU device, a small machine)."""
    if hardware.get("device") != "cuda":
        return None
    try:
        mine = set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
    gpu = hardware.get("gpu") or {}
    own = int(gpu.get("index") or 0)
    reserved: set[int] = set()
    for index in range(max(int(gpu.get("count") or 1), own + 1)):
        try:
            facts = hardware if index == own else hardware_info("cuda", index)
        except (RuntimeError, OSError, ValueError, subprocess.SubprocessError):
            continue  # a GPU that cannot be probed gets no evaluations either
        cpu = timing_cpu(facts)
        if cpu is not None:
            reserved.add(cpu)
    if not reserved or len(mine) < CPUS_PER_TIMING_CPU * len(reserved):
        return None
    return sorted(mine - reserved)


def ceilings(hardware: dict[str, Any]) -> tuple[float, float]:
    """(bytes per second, FLOP per second) that nothing on this hardware can beat."""
    if hardware.get("device") != "cuda":
        return _CPU_CEILING
    name = str(hardware.get("name", ""))
    for marker, bandwidth, flops in _GPU_CEILINGS:
        if marker in name:
            return bandwidth, flops
    return _UNKNOWN_GPU


def visible_device(gpu_index: int | None) -> str:
    """The CUDA_VISIBLE_DEVICES entry a child gets for our GPU ``gpu_index``: indices count within
    what this process was given (Ray and schedulers hand out GPUs this way)."""
    index = gpu_index or 0
    given = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if not given:
        return str(index)
    if index >= len(given):
        raise RuntimeError(f"GPU {index} requested but this worker was given only {len(given)} ({','.join(given)})")
    return given[index]


def cuda_arch_list(hardware: dict[str, Any]) -> str | None:
    cap = hardware.get("capability")
    return str(cap) if cap else None
