"""One store of correct kernels per task, shared by every stage of a run (CUDA-L1's exemplars).

Filled from stage 1 on (the SFT variants, then every passing kernel a rollout produced), kept in the
run state so checkpoints carry it, deduplicated by source hash (a kernel seen again keeps its best
measured speedup). A rollout gets the task's whole list as its ``contrastive_variants`` and the
agent's loop picks ``contrastive_k`` of them with ``agent.prompts.sample_contrastive``, which spreads
them across speed buckets.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agent.prompts import Variant
from gpu_workers import source_hash

DEFAULT_CAPACITY = 64  # per task: the slowest are dropped first when it is full


class ExemplarStore:
    def __init__(self, data: dict[str, Any] | None = None, *, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self._by_task: dict[str, dict[str, dict[str, Any]]] = {}
        for task, entries in (data or {}).items():
            for entry in entries:
                self.add(task, entry["source"], entry.get("speedup"))

    def add(self, task: str, source: str, speedup: float | None) -> bool:
        """Remember a correct kernel; False when its source was already stored (its best speedup kept)."""
        key = source_hash(source)
        entries = self._by_task.setdefault(task, {})
        if key in entries:
            old = entries[key]["speedup"]
            if speedup is not None and (old is None or speedup > old):
                entries[key]["speedup"] = speedup
            return False
        entries[key] = {"hash": key, "source": source, "speedup": speedup}
        if len(entries) > self.capacity:
            slowest = min(entries.values(), key=lambda e: (e["speedup"] is not None, e["speedup"] or 0.0))
            del entries[slowest["hash"]]
        return True

    def add_many(self, task: str, variants: Iterable[dict[str, Any]]) -> int:
        return sum(1 for v in variants if self.add(task, v["source"], v.get("speedup")))

    def variants(self, task: str) -> list[Variant]:
        return [Variant(source=e["source"], speedup=e["speedup"], status="passed")
                for e in self._by_task.get(task, {}).values()]

    def __len__(self) -> int:
        return sum(len(v) for v in self._by_task.values())

    def to_dict(self) -> dict[str, Any]:
        return {task: list(entries.values()) for task, entries in self._by_task.items()}
