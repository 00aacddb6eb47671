"""The evaluator's settings: one frozen object, read from the environment once per process.

``current()`` reads ``KERNELCOURT_*`` the first time it is called and returns the same object ever
after; the evaluator hands it down and stores its values on every result (``EvalResult.settings``).
A child process gets what it needs from its parent: the values the parent wrote into the child's
environment (``build.compile.child_env``) or its setup message, never the worker's own environment.
The old ``KERNELARENA_*`` names are still read, with a DeprecationWarning that names the new one.
The table of settings is in docs/evaluator.md.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

PREFIX = "KERNELCOURT_"
OLD_PREFIX = "KERNELARENA_"
WARM_UP_DEVICES = ("", "cpu", "cuda")
TIMING_CPUS = ("", "gpu-local")


@dataclass(frozen=True)
class EvaluatorSettings:
    """What an operator may set; every field is one ``KERNELCOURT_<FIELD>`` variable."""

    cache_dir: str = str(Path.home() / ".cache" / "kernelcourt")
    judge_threads: int = 1
    gpu_shared_max: int = 0
    warm_up: str = ""
    compile_nice: int = 10
    compile_spares: int = 16
    baseline_samples: int = 5
    timing_cpus: str = ""
    settle_within: float = 0.01
    host_warm_s: float = 1.0
    pair_host_timed: bool = True
    reference_reuse: bool = True
    lite: bool = True
    split: bool = True
    pch: bool = True
    gpu_hold_floor_s: float = 120.0
    device_compare_bytes: int = 256 << 20
    gpu_memory_wait_s: float = 3600.0

    def __post_init__(self) -> None:
        checks = {
            "judge_threads": self.judge_threads >= 1,
            "gpu_shared_max": self.gpu_shared_max >= 0,
            "warm_up": self.warm_up in WARM_UP_DEVICES,
            "compile_nice": 0 <= self.compile_nice <= 19,
            "compile_spares": self.compile_spares >= 0,
            "baseline_samples": self.baseline_samples >= 1,
            "timing_cpus": self.timing_cpus in TIMING_CPUS,
            "settle_within": 0.0 <= self.settle_within <= 0.5,
            "host_warm_s": 0.0 <= self.host_warm_s <= 10.0,
            "cache_dir": bool(self.cache_dir),
            "gpu_hold_floor_s": self.gpu_hold_floor_s >= 0.1,
            "device_compare_bytes": self.device_compare_bytes >= 0,
            "gpu_memory_wait_s": self.gpu_memory_wait_s >= 1.0,
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"{PREFIX}{bad[0].upper()}={getattr(self, bad[0])!r} is out of range")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def child_env(self) -> dict[str, str]:
        """What a compile or candidate child reads of these (its light and split builds, the cache)."""
        return {f"{PREFIX}CACHE_DIR": self.cache_dir, f"{PREFIX}LITE": "1" if self.lite else "0",
                f"{PREFIX}SPLIT": "1" if self.split else "0"}


def _parse(name: str, kind: type, text: str) -> Any:
    text = text.strip()
    if kind is bool:
        if text.lower() in ("1", "true", "yes", "on"):
            return True
        if text.lower() in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"{PREFIX}{name.upper()}={text!r}: expected 1 or 0")
    try:
        return kind(text.lower() if kind is str and name != "cache_dir" else text)
    except ValueError:
        what = {"int": "an integer", "float": "a number"}.get(kind.__name__, "text")
        raise ValueError(f"{PREFIX}{name.upper()}={text!r}: expected {what}") from None


def from_environ(environ: Mapping[str, str]) -> EvaluatorSettings:
    """The settings that ``environ`` asks for; unset ones keep their defaults. A ``KERNELARENA_*``
    name is read where its ``KERNELCOURT_*`` one is unset, with a DeprecationWarning."""
    kinds = {"str": str, "int": int, "float": float, "bool": bool}
    values: dict[str, Any] = {}
    for item in dataclasses.fields(EvaluatorSettings):
        new, old = PREFIX + item.name.upper(), OLD_PREFIX + item.name.upper()
        if new in environ:
            text = environ[new]
        elif old in environ:
            warnings.warn(f"{old} is deprecated: set {new} instead", DeprecationWarning, stacklevel=3)
            text = environ[old]
        else:
            continue
        if text.strip() == "":
            continue
        values[item.name] = _parse(item.name, kinds[str(item.type)], text)
    return EvaluatorSettings(**values)


@lru_cache(maxsize=1)
def current() -> EvaluatorSettings:
    """This process's settings, read from its environment on the first call only."""
    return from_environ(os.environ)
