"""Training tasks: our suite, Ops-6K-style JSONL rows, synthetic tasks, and a contamination check.

CUDA Agent built its training set (CUDA-Agent-Ops-6K) from composed torch operators and removed any
task too similar to KernelBench's evaluation tasks. We do the same on normalised source: comments,
docstrings and layout removed, local identifiers renamed in order of appearance (so renaming a
variable does not hide a copy), then token 5-gram Jaccard similarity (or difflib's ratio).
"""

from __future__ import annotations

import builtins
import difflib
import io
import json
import keyword
import tokenize
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class TrainingTask:
    name: str
    task_source: str
    reference_kernel: str | None = None  # an honest ModelNew, for SFT
    ops: tuple[str, ...] = ()
    data_source: str = ""
    level: int | None = None
    # correct kernels for the task with their measured speedups (CUDA-L1's stage-1 data)
    variants: list[dict[str, Any]] = field(default_factory=list)

    def sft_kernels(self) -> list[str]:
        """Every known correct kernel of the task: its variants, else its reference kernel."""
        if self.variants:
            return [v["source"] for v in self.variants]
        return [self.reference_kernel] if self.reference_kernel else []

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "task_source": self.task_source, "reference_kernel": self.reference_kernel,
                "ops": list(self.ops), "data_source": self.data_source, "level": self.level,
                "variants": [dict(v) for v in self.variants]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainingTask:
        return cls(name=data["name"], task_source=data["task_source"],
                   reference_kernel=data.get("reference_kernel"), ops=tuple(data.get("ops", ())),
                   data_source=data.get("data_source", ""), level=data.get("level"),
                   variants=[dict(v) for v in data.get("variants", [])])


def suite_tasks(device: str = "cpu", names: Sequence[str] | None = None) -> list[TrainingTask]:
    """Our suite (``gpu_workers.suite``), with its honest reference kernels for ``device``."""
    from gpu_workers.suite import list_tasks

    out = []
    for t in list_tasks():
        if names and t.name not in names:
            continue
        try:
            reference: str | None = t.kernel_source(device)
        except OSError:  # a task whose reference kernel is not written yet still trains by RL
            reference = None
        out.append(TrainingTask(name=t.name, task_source=t.task_source, reference_kernel=reference,
                                ops=tuple(t.ops), data_source="suite", level=t.level))
    return out


def ops_jsonl_tasks(path: str | Path) -> list[TrainingTask]:
    """Ops-6K-style rows: ``{"ops": [...], "data_source": "...", "code": "<KernelBench task file>"}``
    (optional ``name`` and ``reference_kernel``)."""
    out = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{number}: not JSON: {exc}") from exc
        if "code" not in row:
            raise ValueError(f"{path}:{number}: row has no 'code'")
        ops = row.get("ops", [])
        if isinstance(ops, str):
            ops = json.loads(ops) if ops.startswith("[") else [ops]
        name = row.get("name") or f"{Path(path).stem}_{number:05d}"
        out.append(TrainingTask(name=name, task_source=row["code"], ops=tuple(ops),
                                data_source=str(row.get("data_source", "")),
                                reference_kernel=row.get("reference_kernel")))
    return out


def variants_jsonl_tasks(path: str | Path) -> list[TrainingTask]:
    """CUDA-L1's stage-1 data: one row per correct variant of a task,
    ``{"name": ..., "code": "<KernelBench task file>", "kernel": "<ModelNew file>", "speedup": 1.7}``
    (``kernel_source`` or ``reference_kernel`` for ``kernel``; ``speedup`` over eager, optional).
    Rows of one task (same ``name``) become one task with every variant; a row without a kernel is
    an error, since this stage learns from correct kernels only."""
    tasks: dict[str, TrainingTask] = {}
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{number}: not JSON: {exc}") from exc
        if not isinstance(row, dict) or not isinstance(row.get("code"), str):
            raise ValueError(f"{path}:{number}: row has no 'code' (the task file)")
        kernel = next((row[k] for k in ("kernel", "kernel_source", "reference_kernel")
                       if isinstance(row.get(k), str) and row[k].strip()), None)
        if kernel is None:
            raise ValueError(f"{path}:{number}: row has no reference kernel ('kernel'): CUDA-L1's first stage "
                             "trains on correct variants of each task, so every row needs one (Ops-6K rows have "
                             "none: generate and verify variants first, or use a 'jsonl' source with an rl stage)")
        name = str(row.get("name") or f"{Path(path).stem}_{number:05d}")
        speedup = row.get("speedup")
        if speedup is not None and not isinstance(speedup, int | float):
            raise ValueError(f"{path}:{number}: 'speedup' must be a number")
        task = tasks.get(name)
        if task is None:
            task = tasks[name] = TrainingTask(name=name, task_source=row["code"], data_source="variants",
                                              ops=tuple(row.get("ops", ())))
        elif task.task_source != row["code"]:
            raise ValueError(f"{path}:{number}: task {name!r} appears with two different task files")
        task.variants.append({"source": kernel, "speedup": float(speedup) if speedup is not None else None,
                              "status": "passed"})
    for task in tasks.values():
        task.reference_kernel = max(task.variants, key=lambda v: v["speedup"] or 0.0)["source"]
    return list(tasks.values())


def synthetic_tasks(n: int) -> list[TrainingTask]:
    """Tiny placeholder tasks for synthetic-reward runs (prompts stay short for byte-level models)."""
    return [TrainingTask(name=f"synthetic_{i}", task_source=f"# synthetic task {i}\n", data_source="synthetic")
            for i in range(n)]


# ---------------------------------------------------------------------------------------------
# Contamination

_KEEP = set(keyword.kwlist) | set(dir(builtins)) | {"self", "torch", "nn", "F", "Model", "ModelNew",
                                                     "forward", "get_inputs", "get_init_inputs"}


def normalise_source(source: str) -> list[str]:
    """Python source → tokens without comments, docstrings or layout, local names renamed.

    Names after a dot (``torch.matmul``; but ``self.<name>`` is renamed), keywords, builtins and the KernelBench interface keep their
    spelling; every other identifier becomes ``v0, v1, …`` in order of first appearance. Source that
    does not tokenise falls back to whitespace-split words.
    """
    tokens: list[str] = []
    renames: dict[str, str] = {}
    prev = before_prev = ""
    try:
        stream = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return source.split()
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
            tokenize.ENDMARKER, tokenize.ENCODING}
    last_type = tokenize.NEWLINE  # of the previous token that is not NL or a comment
    for tok in stream:
        starts_statement = last_type in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)
        if tok.type not in (tokenize.NL, tokenize.COMMENT):
            last_type = tok.type
        if tok.type in skip:
            continue
        if tok.type == tokenize.STRING:
            if starts_statement:  # a string statement on its own: a docstring
                continue
            tokens.append("<str>")
            before_prev, prev = prev, "<str>"
            continue
        text = tok.string
        attribute = prev == "." and before_prev != "self"  # an API name (torch.matmul), not self.weight
        if tok.type == tokenize.NAME and text not in _KEEP and not attribute:
            text = renames.setdefault(text, f"v{len(renames)}")
        tokens.append(text)
        before_prev, prev = prev, tok.string
    return tokens


def _ngrams(tokens: Sequence[str], n: int) -> set[tuple[str, ...]]:
    if len(tokens) < n:
        return {tuple(tokens)} if tokens else set()
    return {tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)}


def similarity(a: str, b: str, *, method: str = "jaccard", n: int = 5) -> float:
    """Similarity in [0, 1] of two sources after ``normalise_source``."""
    ta, tb = normalise_source(a), normalise_source(b)
    if method == "jaccard":
        ga, gb = _ngrams(ta, n), _ngrams(tb, n)
        if not ga and not gb:
            return 1.0
        return len(ga & gb) / len(ga | gb)
    if method == "difflib":
        return difflib.SequenceMatcher(None, ta, tb, autojunk=False).ratio()
    raise ValueError(f"unknown similarity method {method!r}")


@dataclass
class ContaminationReport:
    kept: list[TrainingTask] = field(default_factory=list)
    refused: list[dict[str, Any]] = field(default_factory=list)  # {task, closest_eval_task, score}
    threshold: float = 0.0
    method: str = "jaccard"

    def to_dict(self) -> dict[str, Any]:
        return {"kept": [t.name for t in self.kept], "refused": self.refused,
                "threshold": self.threshold, "method": self.method}


def check_contamination(
    train: Iterable[TrainingTask], eval_sources: dict[str, str], *, threshold: float = 0.6,
    method: str = "jaccard", n: int = 5,
) -> ContaminationReport:
    """Refuse every training task whose similarity to some evaluation task is ≥ ``threshold``."""
    report = ContaminationReport(threshold=threshold, method=method)
    for task in train:
        best_name, best = "", 0.0
        for eval_name, eval_source in eval_sources.items():
            score = similarity(task.task_source, eval_source, method=method, n=n)
            if score > best:
                best_name, best = eval_name, score
        if best >= threshold:
            report.refused.append({"task": task.name, "closest_eval_task": best_name, "score": round(best, 4)})
        else:
            report.kept.append(task)
    return report
