"""A KernelBench checkout as the evaluator's benchmark: its task files by level, the identity
candidate of a task (its reference copied as ``ModelNew``) and KernelBench's own baseline times.
Reads files only; never runs them."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_MODEL = re.compile(r"\bModel\b")


@dataclass(frozen=True)
class KernelBenchTask:
    level: int
    name: str  # the file's stem, "19_ReLU"
    path: Path

    @property
    def key(self) -> str:
        """``level1/19_ReLU``: how a sweep and a manifest name a task."""
        return f"level{self.level}/{self.name}"

    @property
    def number(self) -> int:
        head = self.name.split("_", 1)[0]
        return int(head) if head.isdigit() else 0


def task_files(root: Path, levels: list[int] | None = None, tasks: list[str] | None = None) -> list[KernelBenchTask]:
    """The task files under ``root`` (``level1``..``level4``, or the same under ``root/KernelBench``),
    by level and task number. ``tasks``: keys (``level1/19_ReLU``), stems or task numbers with their
    level (``1/19``); any match keeps a task."""
    found: list[KernelBenchTask] = []
    for base in (root, root / "KernelBench"):
        for level in (1, 2, 3, 4):
            folder = base / f"level{level}"
            if folder.is_dir() and (levels is None or level in levels):
                found.extend(KernelBenchTask(level, f.stem, f) for f in folder.glob("*.py"))
        if found:
            break
    found.sort(key=lambda t: (t.level, t.number, t.name))
    if tasks:
        wanted = set(tasks)
        found = [t for t in found if {t.key, t.name, f"{t.level}/{t.number}", f"{t.key}.py"} & wanted]
    return found


def identity_candidate(task_source: str) -> str:
    """The task's own code with its ``Model`` class renamed ``ModelNew`` (the class, ``super(Model,
    self)`` and any other use): a candidate that computes exactly what the reference computes, by the
    same code, so its speedup over eager measures the evaluator, not a kernel."""
    return _MODEL.sub("ModelNew", task_source)


def baseline_times(root: Path, which: str = "torch") -> dict[str, dict[str, Any]]:
    """KernelBench's published times (ms) per task key, from ``baseline_times/<hardware>/
    baseline_time_<which>.json`` (``torch`` or ``torch_compile_inductor_default``): the first
    hardware folder found, with its name under ``hardware``."""
    folder = root / "baseline_times"
    out: dict[str, dict[str, Any]] = {}
    for hardware in sorted(p for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []:
        path = hardware / f"baseline_time_{which}.json"
        if not path.exists():
            continue
        data = json.loads(path.read_text())
        for level, entries in data.items():
            for file, entry in entries.items():
                out[f"{level}/{Path(file).stem}"] = {**entry, "folder": hardware.name}
        break
    return out
