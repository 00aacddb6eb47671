"""Facts about a task that trusted children measured, kept between evaluations: each baseline's
timing (eager, ``torch.compile``), the task's FLOP count and its sizing (``tasks.budget``).

A baseline timing is kept as several samples, each from a different evaluation, and their lower
median is the one used (``spread.lower_median``), with their spread. The fastest sample was used
before: against a candidate's single median it is biased low by as much as processes differ, while
one sample taken while the host was busier than usual must not raise every later candidate's
speedup either (a majority of busy samples is needed to move the lower median). Until a baseline
has ``samples()`` samples, each new evaluation of the task times it again (under the same exclusive
GPU slot as a candidate's timing).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import statistics
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..build.toolchain import cache_root
from ..child.spread import run_to_run_factors, summary
from ..settings import current

# What a timing means (timing.time_callable and its L2 flush), how kept samples combine (their lower
# median) and how a window's sample is made (the forward's own time, and only what the output's read
# took past an ordinary read: timing.charged_ms), and which of the judge's work a baseline's loop
# does outside its windows (every output fingerprinted and its window's read repeated, and the
# outputs the candidate keeps whole copied, as the candidate's are, so the loop overhead kept with it
# is the candidate's too: judge.timer_finding),
# under the candidate's CPU heap policy (runtime.prepare_torch), after the host is warmed until its
# time is steady (timing.HOST_WARM_MIN_S), the parent's wall clock starting after the warm-up, CPU
# children without glibc's per-thread cache (build.compile.CPU_HEAP_TUNABLES), on CUDA once other
# processes' work has drained from the GPU (timing.await_idle) and stopped once settled from 30 main
# iterations on (timing.CUDA_MIN_TIMED), with the loop's own cost kept as the timing's span (the
# kernel's account of the timing thread: pipeline.accounting.TimedSpan) less every reported time, the
# end-to-end forwards and the spins included (judge.loop_cost_ms): "12".
# Kept baselines are keyed on it, so a baseline kept the old way is never set against a candidate
# timed the new way.
TIMING_METHOD = "12"


# A hardware's run-to-run spread stands once this many tasks' kept baselines (of one kind of timing)
# have three or more samples each: fewer is one task's behaviour, not the machine's.
RUN_TO_RUN_TASKS = 3


def samples() -> int:
    """How many evaluations time a baseline before its kept samples stand
    (``EvaluatorSettings.baseline_samples``)."""
    return current().baseline_samples


def fact_path(parts: list[str], name: str) -> Path:
    """Where one fact is kept; ``parts`` say what it depends on (the task, its profile, the hardware,
    threads, the timing budget)."""
    key = hashlib.sha256("\0".join([*parts, name, TIMING_METHOD]).encode()).hexdigest()
    folder = cache_root() / "baselines"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{key[:32]}.json"


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _write(path: Path, value: Any) -> None:
    """Whole or not at all: concurrent evaluations read these files while others write them."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(handle, "w") as out:
            json.dump(value, out)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _samples_in(kept: Any) -> list[dict[str, Any]]:
    if not isinstance(kept, dict):
        return []
    if "stats" in kept:  # a single timing
        kept = {"samples": [kept]}
    return [s for s in kept.get("samples", []) if isinstance(s, dict) and _median(s) is not None]


def _median(entry: dict[str, Any]) -> float | None:
    try:
        value = float(entry["stats"]["median_ms"])
    except (KeyError, TypeError, ValueError):
        return None
    return value if value > 0 else None


def _fastest(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """The kept sample that stands for them all: their lower median (``spread.lower_median``), with
    every kept sample's median and their spread."""
    ordered = sorted(entries, key=_median)
    chosen = dict(ordered[(len(ordered) - 1) // 2])
    chosen["samples_ms"] = [_median(e) for e in ordered]
    chosen["samples_spread"] = summary(chosen["samples_ms"])
    # the loop's own cost per iteration (judge.timer_finding) moves with the host from one timing to
    # the next, apart from the sample's median: the median over every kept timing
    loops = [float(e["overhead_ms_per_iter"]) for e in ordered if e.get("overhead_ms_per_iter") is not None]
    if loops:
        chosen["overhead_ms_per_iter"] = statistics.median(loops)
    return chosen


def load_baseline(path: Path) -> tuple[dict[str, Any] | None, bool]:
    """(the kept timing that stands, or None; whether enough samples are kept to stop timing it)."""
    entries = _samples_in(_read(path))
    if not entries:
        return None, False
    return _fastest(entries), len(entries) >= samples()


_OF_ONE_EVALUATION = ("samples_ms", "samples_spread", "paired")


def keep_baseline(path: Path, entry: dict[str, Any], spread_path: Path | None = None) -> dict[str, Any]:
    """Add one timing to what is kept (up to ``samples()``, the fastest kept first) and return the
    one that stands for them all, this one included. Where the kept samples are three or more, how
    far they go from their middle is noted for the hardware in ``spread_path`` (``load_run_to_run``)."""
    # a batch evaluates many candidates of one task at once, each timing the baseline until it is
    # kept: unlocked, two of them read the same samples and the later write drops the other's
    with _locked(path):
        entries = _samples_in(_read(path))
        # what says how this one evaluation set its baselines against its kernel is not the timing's:
        # a paired timing (pipeline/pairing.py), kept, is a sample like any other for later ones
        entries.append({k: v for k, v in entry.items() if k not in _OF_ONE_EVALUATION})
        entries.sort(key=_median)
        _write(path, {"samples": entries[:samples()]})
    chosen = _fastest(entries)
    factors = run_to_run_factors(chosen["samples_spread"])
    if spread_path is not None and factors is not None:
        kind = str((entry.get("stats") or {}).get("timed") or "")
        with _locked(spread_path):
            known = _read(spread_path)
            known = known if isinstance(known, dict) else {}
            tasks = known.get(kind) if isinstance(known.get(kind), dict) else {}
            known[kind] = {**tasks, path.stem: list(factors)}
            _write(spread_path, known)
    return chosen


def load_run_to_run(spread_path: Path) -> dict[str, list[float]]:
    """Per kind of timing ("" on the CPU; "kernel side", "host", "end to end" on CUDA), how far one
    evaluation's median typically lies from its task's usual value on this hardware, as ``[fast,
    slow]`` factors: the medians over the tasks whose kept baseline of that kind has three or more
    samples (at least RUN_TO_RUN_TASKS of them). What a timing of a task with fewer kept samples is
    one draw of (``verdict``)."""
    known = _read(spread_path)
    out: dict[str, list[float]] = {}
    for kind, tasks in (known.items() if isinstance(known, dict) else ()):
        pairs = [p for p in (tasks.values() if isinstance(tasks, dict) else ())
                 if isinstance(p, list) and len(p) == 2 and all(isinstance(v, int | float) and v > 0 for v in p)]
        if len(pairs) >= RUN_TO_RUN_TASKS:
            out[kind] = [statistics.median(min(p[0], 1.0) for p in pairs), statistics.median(max(p[1], 1.0) for p in pairs)]
    return out


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An ``flock`` on a file beside ``path`` for a read-modify-write of it: evaluations in several
    workers note their tasks' spreads in the same file."""
    fd = os.open(path.with_suffix(".lock"), os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing it drops the lock


def load_fact(path: Path) -> Any:
    """A kept fact (JSON), or None."""
    return _read(path)


def keep_fact(path: Path, value: Any) -> None:
    _write(path, value)


def _kept_int(path: Path, key: str) -> int | None:
    try:
        return int(_read(path)[key])
    except (KeyError, TypeError, ValueError):
        return None


def load_peak(path: Path) -> int | None:
    """The most GPU memory a task's reference child has held in any evaluation kept so far."""
    return _kept_int(path, "reserved")


def keep_peak(path: Path, reserved: int) -> int:
    """Keep the larger of what is kept and ``reserved``; returns what is kept now."""
    with _locked(path):
        kept = max(load_peak(path) or 0, int(reserved))
        _write(path, {"reserved": kept})
    return kept


def load_flops(path: Path) -> int | None:
    return _kept_int(path, "flops")


def keep_flops(path: Path, flops: int) -> None:
    _write(path, {"flops": int(flops)})
