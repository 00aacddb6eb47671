"""Importers: KernelBench checkouts, Ops-6K-style training tasks, generated kernels, our suite.

Every row is its own transaction: a bad row is reported with its line (or file) and the reason,
and the good rows still land.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.db import transaction

from .models import Kernel, Submitter, Task
from .services import (
    InvalidInput,
    evaluation_request,
    kernel_create,
    source_hash,
    submissions_limit_take,
    submitter_for_user,
    submitter_get_or_create,
    task_upsert,
)

KERNELBENCH_SUITE = "kernelbench"
BUILTIN_SUITE = "arena"  # gpu_workers.suite.SUITE_NAME
TRAINING_SUITE = "training"


@dataclass
class RowError:
    line: int  # 1-based line of a JSONL file, row number of a Parquet file, or 0 for a file
    reason: str
    where: str = ""

    def __str__(self) -> str:
        place = f"{self.where}:" if self.where else ""
        return f"{place}{self.line}: {self.reason}" if self.line else f"{self.where}: {self.reason}"


@dataclass
class ImportReport:
    created: int = 0
    updated: int = 0
    skipped: int = 0
    queued: int = 0
    errors: list[RowError] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"{self.created} created, {self.updated} updated, {self.skipped} unchanged, "
            f"{self.queued} queued, {len(self.errors)} errors"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "created": self.created,
            "updated": self.updated,
            "skipped": self.skipped,
            "queued": self.queued,
            "errors": [
                {"line": e.line, "reason": f"{e.where}: {e.reason}" if e.where else e.reason}
                for e in self.errors
            ],
        }


def _task_store(report: ImportReport, *, where: str, line: int, **fields: Any) -> None:
    try:
        existing = (
            Task.objects.filter(suite=fields["suite"], name=fields["name"])
            .values_list("source_hash", flat=True)
            .first()
        )
        if existing is not None and existing == source_hash(fields["source"]):
            report.skipped += 1
            return
        with transaction.atomic():
            _, created = task_upsert(**fields)
        if created:
            report.created += 1
        else:
            report.updated += 1
    except InvalidInput as exc:
        report.errors.append(RowError(line, str(exc), where))


# --- KernelBench ---------------------------------------------------------------------------------


def _kernelbench_level_dirs(root: Path) -> list[tuple[int, Path]]:
    for base in (root, root / "KernelBench"):
        found = [(n, base / f"level{n}") for n in (1, 2, 3, 4) if (base / f"level{n}").is_dir()]
        if found:
            return found
    return []


def tasks_import_kernelbench(*, path: str | Path) -> ImportReport:
    """Import ``level1``…``level3`` (and ``level4`` when present) of a KernelBench checkout."""
    root = Path(path)
    report = ImportReport()
    if not root.is_dir():
        raise InvalidInput(f"{root} is not a folder")
    levels = _kernelbench_level_dirs(root)
    if not levels:
        raise InvalidInput(f"no level1..level3 folders under {root} (or {root}/KernelBench)")
    for level, folder in levels:
        for file in sorted(folder.glob("*.py")):
            try:
                source = file.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                report.errors.append(RowError(0, f"unreadable: {exc}", str(file)))
                continue
            _task_store(
                report,
                where=str(file),
                line=0,
                suite=KERNELBENCH_SUITE,
                name=file.stem,
                level=level,
                source=source,
            )
    return report


# --- training tasks (CUDA-Agent-Ops-6K layout) -----------------------------------------------------


def _jsonl_rows(lines: Iterable[str]) -> Iterator[tuple[int, dict | None, str]]:
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            yield number, None, f"not valid JSON: {exc.msg}"
            continue
        if not isinstance(row, dict):
            yield number, None, "a row must be a JSON object"
            continue
        yield number, row, ""


def _parquet_rows(path: Path) -> Iterator[tuple[int, dict | None, str]]:
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise InvalidInput(
            "reading Parquet needs pyarrow: pip install pyarrow (or convert the file to JSONL)"
        ) from exc
    table = pq.read_table(path)
    for number, row in enumerate(table.to_pylist(), start=1):
        yield number, row, ""


def _rows_of(path: Path) -> Iterator[tuple[int, dict | None, str]]:
    if path.suffix == ".parquet":
        return _parquet_rows(path)
    return _jsonl_rows(path.read_text(encoding="utf-8").splitlines())


def _ops_of(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            parsed = [v.strip() for v in value.split(",") if v.strip()]
        value = parsed
    if isinstance(value, list | tuple):
        return [str(v) for v in value]
    raise InvalidInput("ops must be a list of operator names")


def training_task_name(row: dict, code: str) -> str:
    for key in ("name", "task_name", "task_id", "id"):
        if row.get(key) not in (None, ""):
            return str(row[key])[:255]
    return f"ops-{source_hash(code)[:12]}"


def tasks_import_training_rows(
    *, rows: Iterable[tuple[int, dict | None, str]], suite: str = TRAINING_SUITE, where: str = ""
) -> ImportReport:
    report = ImportReport()
    for number, row, problem in rows:
        if row is None:
            report.errors.append(RowError(number, problem, where))
            continue
        code = row.get("code")
        if not isinstance(code, str) or not code.strip():
            report.errors.append(RowError(number, "missing 'code'", where))
            continue
        try:
            ops = _ops_of(row.get("ops"))
        except InvalidInput as exc:
            report.errors.append(RowError(number, str(exc), where))
            continue
        _task_store(
            report,
            where=where,
            line=number,
            suite=suite,
            name=training_task_name(row, code),
            level=None,
            source=code,
            ops=ops,
            data_source=str(row.get("data_source") or "")[:128],
        )
    return report


def tasks_import_training(*, path: str | Path, suite: str = TRAINING_SUITE) -> ImportReport:
    """Rows with ``ops``, ``data_source`` and ``code`` from a JSONL or Parquet file."""
    path = Path(path)
    if not path.is_file():
        raise InvalidInput(f"{path} is not a file")
    return tasks_import_training_rows(rows=_rows_of(path), suite=suite, where=path.name)


# --- generated kernels (CUDA-L1 layout) -----------------------------------------------------------


def _kernelbench_task(level: int, task_id: int, suite: str) -> Task | None:
    return (
        Task.objects.filter(suite=suite, level=level)
        .filter(name__regex=rf"^{task_id}(_|$)")
        .order_by("id")
        .first()
    )


def _kernel_store(
    report: ImportReport,
    *,
    where: str,
    line: int,
    submitter: Submitter,
    level: Any,
    task_id: Any,
    code: Any,
    suite: str,
    track: str,
    metadata: dict,
    requested_by: Any = None,
) -> None:
    try:
        level_n, task_n = int(level), int(task_id)
    except (TypeError, ValueError):
        report.errors.append(RowError(line, "level_id and task_id must be integers", where))
        return
    if not isinstance(code, str) or not code.strip():
        report.errors.append(RowError(line, "missing 'custom_code'", where))
        return
    task = _kernelbench_task(level_n, task_n, suite)
    if task is None:
        report.errors.append(RowError(line, f"no task {task_n} in level {level_n} of suite {suite!r}", where))
        return
    try:
        with transaction.atomic():
            kernel, created = kernel_create(
                task=task, submitter=submitter, source=code, origin=Kernel.Origin.IMPORT, metadata=metadata
            )
            evaluation = evaluation_request(kernel_id=kernel.pk, track=track, requested_by=requested_by)
    except InvalidInput as exc:
        report.errors.append(RowError(line, str(exc), where))
        return
    report.created += int(created)
    report.skipped += int(not created)
    report.queued += int(evaluation.status == evaluation.Status.QUEUED and evaluation.attempts == 0)


_FILE_PATTERNS = (re.compile(r"level_?(?P<level>\d+)[_/\-]+(?:problem_|task_)?(?P<task>\d+)(?:[_\-].*)?$"),)


def kernels_import_rows(
    *,
    submitter_name: str,
    rows: Iterable[tuple[int, dict | None, str]],
    suite: str = KERNELBENCH_SUITE,
    track: str = "strict",
    where: str = "",
    submitter_kind: str = Submitter.Kind.MODEL,
    user: Any = None,
) -> ImportReport:
    """Kernel rows under one submitter, each queued. With ``user`` (an API request's): a submitter
    that user may use, within their limits (one submission per file, one queued evaluation per row)."""
    rows = list(rows)
    if user is not None:
        with transaction.atomic():
            submitter = submitter_for_user(name=submitter_name, user=user)
            submissions_limit_take(user=user, adding=sum(1 for _, row, _ in rows if row is not None))
    else:
        submitter = submitter_get_or_create(name=submitter_name, kind=submitter_kind)
    report = ImportReport()
    for number, row, problem in rows:
        if row is None:
            report.errors.append(RowError(number, problem, where))
            continue
        _kernel_store(
            report,
            where=where,
            line=number,
            submitter=submitter,
            requested_by=user,
            level=row.get("level_id"),
            task_id=row.get("task_id"),
            code=row.get("custom_code"),
            suite=suite,
            track=track,
            metadata={k: v for k, v in row.items() if k != "custom_code" and _is_jsonable(v)},
        )
    return report


def _is_jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def kernels_import(
    *,
    submitter_name: str,
    path: str | Path,
    suite: str = KERNELBENCH_SUITE,
    track: str = "strict",
    submitter_kind: str = Submitter.Kind.MODEL,
) -> ImportReport:
    """Kernels from a JSONL/Parquet file (``level_id``, ``task_id``, ``custom_code``) or from a folder of
    files named ``level1/19_ReLU.py``, ``level_1_problem_19.py`` or ``level1_19.py``; each queued."""
    path = Path(path)
    if path.is_file():
        return kernels_import_rows(
            submitter_name=submitter_name,
            rows=_rows_of(path),
            suite=suite,
            track=track,
            where=path.name,
            submitter_kind=submitter_kind,
        )
    if not path.is_dir():
        raise InvalidInput(f"{path} is neither a file nor a folder")
    submitter = submitter_get_or_create(name=submitter_name, kind=submitter_kind)
    report = ImportReport()
    for file in sorted(path.rglob("*.py")):
        relative = file.relative_to(path).with_suffix("").as_posix()
        match = None
        for pattern in _FILE_PATTERNS:
            match = pattern.search(relative)
            if match:
                break
        if match is None:
            report.errors.append(RowError(0, "cannot tell level and task from the file name", str(file)))
            continue
        try:
            code = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            report.errors.append(RowError(0, f"unreadable: {exc}", str(file)))
            continue
        _kernel_store(
            report,
            where=str(file),
            line=0,
            submitter=submitter,
            level=match["level"],
            task_id=match["task"],
            code=code,
            suite=suite,
            track=track,
            metadata={"file": relative},
        )
    return report


# --- our built-in suite ---------------------------------------------------------------------------


def tasks_import_suite() -> ImportReport:
    """The built-in suite of gpu_workers.suite (name, level, ops, description, task source)."""
    from gpu_workers.suite import list_tasks

    report = ImportReport()
    for number, suite_task in enumerate(list_tasks(), start=1):
        _task_store(
            report,
            where=suite_task.name,
            line=number,
            suite=BUILTIN_SUITE,
            name=suite_task.name,
            level=suite_task.level,
            source=suite_task.task_source,
            ops=list(suite_task.ops or []),
            description=suite_task.description or "",
        )
    return report
