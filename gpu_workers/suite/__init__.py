"""KernelCourt's own task suite ("arena"): KernelBench-format tasks with honest reference kernels.

Each task is a KernelBench-style file under ``tasks/`` (``Model``, ``get_inputs``, ``get_init_inputs``
and ``PROFILES`` with a ``cpu`` and a ``cuda`` size profile), plus two reference kernels under
``kernels/``: ``<name>_cpu.py`` (C++ through ``load_inline``) and ``<name>_cuda.py`` (CUDA). The task
metadata (level, ops, description) is data, in ``manifest.json``.

This module imports no torch: the web app lists tasks without it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

SUITE_NAME = "arena"
SUITE_DIR = Path(__file__).resolve().parent
TASKS_DIR = SUITE_DIR / "tasks"
KERNELS_DIR = SUITE_DIR / "kernels"
MANIFEST_PATH = SUITE_DIR / "manifest.json"


@dataclass(frozen=True)
class SuiteTask:
    """One task of the suite; the sources are read from disk when asked for."""

    name: str
    level: int
    ops: tuple[str, ...]
    description: str
    task_path: Path
    cpu_kernel_path: Path
    cuda_kernel_path: Path

    @property
    def task_source(self) -> str:
        return self.task_path.read_text(encoding="utf-8")

    @property
    def cpu_kernel_source(self) -> str:
        return self.cpu_kernel_path.read_text(encoding="utf-8")

    @property
    def cuda_kernel_source(self) -> str:
        return self.cuda_kernel_path.read_text(encoding="utf-8")

    def kernel_source(self, device: str) -> str:
        """The reference kernel for ``device`` ("cpu" or "cuda")."""
        if device == "cpu":
            return self.cpu_kernel_source
        if device == "cuda":
            return self.cuda_kernel_source
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")


def load_manifest() -> dict[str, dict]:
    """The manifest as data: ``{name: {"level", "ops", "description"}}``."""
    with MANIFEST_PATH.open(encoding="utf-8") as fh:
        data = json.load(fh)
    return data["tasks"]


@lru_cache(maxsize=1)
def _tasks() -> tuple[SuiteTask, ...]:
    tasks = [
        SuiteTask(
            name=name,
            level=int(meta["level"]),
            ops=tuple(meta["ops"]),
            description=str(meta["description"]),
            task_path=TASKS_DIR / f"{name}.py",
            cpu_kernel_path=KERNELS_DIR / f"{name}_cpu.py",
            cuda_kernel_path=KERNELS_DIR / f"{name}_cuda.py",
        )
        for name, meta in load_manifest().items()
    ]
    return tuple(sorted(tasks, key=lambda t: (t.level, t.name)))


def list_tasks() -> list[SuiteTask]:
    """All tasks of the suite, sorted by (level, name)."""
    return list(_tasks())


def get_task(name: str) -> SuiteTask:
    """The task called ``name``; KeyError naming the known tasks otherwise."""
    for task in _tasks():
        if task.name == name:
            return task
    known = ", ".join(t.name for t in _tasks())
    raise KeyError(f"no suite task {name!r}; known tasks: {known}")


__all__ = ["SUITE_NAME", "SuiteTask", "get_task", "list_tasks", "load_manifest"]
