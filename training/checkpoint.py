"""Checkpoints: model(s), optimisers, progress, RNG states and the run's config, written atomically.

Layout: ``OUT/checkpoints/step_000012/{state.json, policy.pt, policy_opt.pt, critic.pt, critic_opt.pt,
rng.pt}``. A checkpoint is written to a temporary directory and renamed into place, so a crash while
saving leaves the previous checkpoint intact; ``latest_checkpoint`` only sees complete ones.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

STATE_FILE = "state.json"


@dataclass
class RunState:
    step: int = 0  # global steps completed
    stage_index: int = 0
    stage_step: int = 0  # steps completed within stage_index
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. the contrastive exemplar buffer

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "stage_index": self.stage_index, "stage_step": self.stage_step,
                "extra": self.extra}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunState:
        return cls(step=int(data["step"]), stage_index=int(data["stage_index"]),
                   stage_step=int(data["stage_step"]), extra=dict(data.get("extra", {})))


def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(),
                             "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def checkpoint_dir(out_dir: Path, step: int) -> Path:
    return out_dir / "checkpoints" / f"step_{step:06d}"


def save_checkpoint(out_dir: Path, *, state: RunState, config: dict[str, Any], modules: dict[str, Any],
                    keep: int = 2) -> Path:
    """``modules``: name → object with ``state_dict()`` (models and optimisers); None values skipped."""
    final = checkpoint_dir(out_dir, state.step)
    tmp = final.with_name(final.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    for name, obj in modules.items():
        if obj is not None:
            torch.save(obj.state_dict(), tmp / f"{name}.pt")
    torch.save(rng_state(), tmp / "rng.pt")
    (tmp / STATE_FILE).write_text(json.dumps({"state": state.to_dict(), "config": config}, indent=2),
                                  encoding="utf-8")
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    _prune(out_dir, keep)
    return final


def _complete(path: Path) -> bool:
    return path.is_dir() and not path.name.endswith(".tmp") and (path / STATE_FILE).exists()


def list_checkpoints(out_dir: Path) -> list[Path]:
    root = out_dir / "checkpoints"
    if not root.exists():
        return []
    return sorted(p for p in root.iterdir() if _complete(p))


def latest_checkpoint(out_dir: Path) -> Path | None:
    found = list_checkpoints(out_dir)
    return found[-1] if found else None


def _prune(out_dir: Path, keep: int) -> None:
    if keep <= 0:
        return
    for old in list_checkpoints(out_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def load_checkpoint(path: Path) -> tuple[RunState, dict[str, Any]]:
    data = json.loads((path / STATE_FILE).read_text(encoding="utf-8"))
    return RunState.from_dict(data["state"]), data["config"]


def load_into(path: Path, name: str, obj: Any) -> bool:
    """Load ``name.pt`` from the checkpoint into ``obj``; False when the file is absent."""
    file = path / f"{name}.pt"
    if not file.exists():
        return False
    obj.load_state_dict(torch.load(file, map_location="cpu", weights_only=False))
    return True


def restore_rng(path: Path) -> None:
    set_rng_state(torch.load(path / "rng.pt", weights_only=False))
