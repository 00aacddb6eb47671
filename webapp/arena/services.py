"""Writes: tasks, submitters, kernels, evaluation requests and the evaluation job itself."""

from __future__ import annotations

import logging
import re
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from gpu_workers.schema import source_hash  # the evaluator's own content hash (sha256 of UTF-8)
from webapp.accounts.services import queue_cap_check, rate_limit_take
from webapp.core.models import ErrorKind
from webapp.core.permissions import NotAllowed, is_staff
from webapp.core.runner import JobContext, JobKind, job_claim, job_enqueue_kind, job_run, worker_id
from webapp.core.text import name_problem

from . import hooks
from .doorbell import evaluation_ring
from .models import Evaluation, Hardware, Kernel, Submitter, Task
from .validation import kernel_source_errors, task_source_errors

logger = logging.getLogger(__name__)


class InvalidInput(ValueError):
    """Input that cannot be stored; the message says why (shown to the user as is)."""


class Conflict(InvalidInput):
    """The input contradicts a stored row (e.g. a submitter's kind); API: 409."""


def task_upsert(
    *,
    suite: str,
    name: str,
    source: str,
    level: int | None = None,
    ops: list[str] | None = None,
    description: str = "",
    data_source: str = "",
) -> tuple[Task, bool]:
    """Create or update the task (suite, name); the source is validated first. Returns (task, created)."""
    errors = task_source_errors(source)
    if errors:
        raise InvalidInput("; ".join(errors))
    if not name:
        raise InvalidInput("a task needs a name")
    task, created = Task.objects.update_or_create(
        suite=suite,
        name=name,
        defaults={
            "level": level,
            "source": source,
            "source_hash": source_hash(source),
            "ops": list(ops or []),
            "description": description,
            "data_source": data_source,
        },
    )
    return task, created


def submitter_name_check(name: str) -> str:
    """The name, stripped, if it is a valid submitter name (a slug of at most 64 characters)."""
    name = (name or "").strip()
    if not name:
        raise InvalidInput("a submitter needs a name")
    problem = name_problem(name)
    if problem:
        raise InvalidInput(f"submitter name {name[:80]!r} {problem}")
    return name


def _kind_check(kind: str) -> None:
    if kind not in Submitter.Kind.values:
        raise InvalidInput(f"submitter kind must be one of {', '.join(Submitter.Kind.values)}")


def submitter_get_or_create(
    *, name: str, kind: str = Submitter.Kind.MODEL, metadata: dict | None = None, created_by: Any = None
) -> Submitter:
    """The submitter called ``name``, created (owned by ``created_by``, if given) when missing. For
    trusted callers (commands, the demo, a training run's checkpoints); a user's request goes
    through submitter_for_user."""
    name = submitter_name_check(name)
    _kind_check(kind)
    owner = created_by if getattr(created_by, "is_authenticated", False) else None
    submitter, created = Submitter.objects.get_or_create(
        name=name, defaults={"kind": kind, "metadata": metadata or {}, "created_by": owner}
    )
    if created and owner is not None:
        submitter.members.add(owner)
    return submitter


def submitter_can_post(*, submitter: Submitter, user: Any) -> bool:
    """Staff, the submitter's creator and its members may post under it."""
    if is_staff(user):
        return True
    if not getattr(user, "is_authenticated", False):
        return False
    return submitter.created_by_id == user.pk or submitter.members.filter(pk=user.pk).exists()


def submitter_for_user(
    *, name: str, user: Any, kind: str | None = None, default_kind: str = Submitter.Kind.MODEL
) -> Submitter:
    """The submitter a user posts under: an existing one they may use, or a new one they own.

    ``kind`` None: the existing submitter's kind (``default_kind`` for a new one); a kind that
    differs from the stored one is a Conflict. Someone else's submitter: NotAllowed."""
    name = submitter_name_check(name)
    if kind is not None:
        _kind_check(kind)
    submitter = submitter_get_or_create(name=name, kind=kind or default_kind, created_by=user)
    if not submitter_can_post(submitter=submitter, user=user):
        raise NotAllowed(
            f"submitter {name!r} belongs to other users; choose another name, or ask a staff user "
            "to add you to its members"
        )
    if kind is not None and submitter.kind != kind:
        raise Conflict(f"submitter {name!r} has kind {submitter.kind}, not {kind}; leave submitter_kind out")
    return submitter


def submitter_update(*, name: str, user: Any, metadata: dict[str, Any]) -> Submitter:
    """Replace a submitter's metadata (its members or staff)."""
    submitter = Submitter.objects.get(name=name)
    if not submitter_can_post(submitter=submitter, user=user):
        raise NotAllowed(f"only the members of submitter {name!r} or a staff user can edit it")
    submitter.metadata = dict(metadata)
    submitter.save(update_fields=["metadata"])
    return submitter


def submitter_member_add(*, name: str, username: str, by: Any) -> Submitter:
    """Staff let another user post under a submitter."""
    from django.contrib.auth import get_user_model

    if not is_staff(by):
        raise NotAllowed("only a staff user can change a submitter's members")
    submitter = Submitter.objects.get(name=name)
    member = get_user_model().objects.filter(username=username, is_active=True).first()
    if member is None:
        raise InvalidInput(f"no active user {username[:80]!r}")
    submitter.members.add(member)
    return submitter


def submitter_member_remove(*, name: str, username: str, by: Any) -> Submitter:
    if not is_staff(by):
        raise NotAllowed("only a staff user can change a submitter's members")
    submitter = Submitter.objects.get(name=name)
    submitter.members.remove(*submitter.members.filter(username=username))
    return submitter


def submissions_limit_take(*, user: Any, adding: int = 1) -> None:
    """A user's kernel submissions: the per-minute rate and the cap on queued evaluations
    (settings LIMIT_SUBMISSIONS_PER_MINUTE, LIMIT_QUEUED_EVALUATIONS); raises LimitExceeded."""
    if user is None:
        return
    queue_cap_check(
        user=user,
        count=lambda: Evaluation.objects.filter(
            requested_by=user, status__in=[Evaluation.Status.QUEUED, Evaluation.Status.RUNNING]
        ).count(),
        adding=adding,
        cap=settings.LIMIT_QUEUED_EVALUATIONS,
        what="evaluations",
    )
    rate_limit_take(
        user=user, action="submission", limit=settings.LIMIT_SUBMISSIONS_PER_MINUTE, what="submissions"
    )


def kernel_create(
    *,
    task: Task,
    submitter: Submitter,
    source: str,
    origin: str = Kernel.Origin.UPLOAD,
    metadata: dict | None = None,
) -> tuple[Kernel, bool]:
    """Store a kernel once per (task, submitter, source hash). Returns (kernel, created)."""
    errors = kernel_source_errors(source)
    if errors:
        raise InvalidInput("; ".join(errors))
    return Kernel.objects.get_or_create(
        task=task,
        submitter=submitter,
        source_hash=source_hash(source),
        defaults={"source": source, "origin": origin, "metadata": metadata or {}},
    )


# Verdicts that say something about the machine as much as about the source (a build that waited on a
# dead worker's lock, a loaded machine, the evaluator's own failure): never reused for a resubmission
# of the same source, which is evaluated again instead.
MACHINE_DEPENDENT_STATUSES = (Evaluation.Status.ERROR, Evaluation.Status.TIMEOUT)
_OUT_OF_MEMORY = re.compile(r"out of memory|CUDA error: out of memory|OutOfMemoryError", re.IGNORECASE)


def evaluation_reusable() -> Q:
    """The evaluations a request for the same kernel, track and device may return instead of a new one."""
    return ~Q(status__in=MACHINE_DEPENDENT_STATUSES) & ~Q(error_kind=ErrorKind.INFRASTRUCTURE)


def evaluation_request(
    *,
    kernel_id: int,
    track: str = "strict",
    device: str | None = None,
    force: bool = False,
    requested_by: Any = None,
) -> Evaluation:
    """Queue an evaluation of a kernel on a track; the job starts after this transaction commits.

    Idempotent: an evaluation of the same kernel, track and device that is queued, running or has
    a verdict of the kernel's own is returned instead of a new one, unless ``force`` (e.g. new
    hardware, new rules). A verdict the infrastructure caused (``evaluation_reusable``) is not reused.
    """
    if track not in Evaluation.Track.values:
        raise InvalidInput(f"track must be one of {', '.join(Evaluation.Track.values)}")
    device = device or settings.EVAL_DEVICE
    with transaction.atomic():
        kernel = Kernel.objects.select_for_update().get(pk=kernel_id)
        if not force:
            existing = (
                Evaluation.objects.filter(kernel=kernel, track=track, device=device)
                .filter(evaluation_reusable())
                .order_by("-id")
                .first()
            )
            if existing is not None:
                return existing
        evaluation = Evaluation.objects.create(
            kernel=kernel,
            track=track,
            device=device,
            requested_by=requested_by if getattr(requested_by, "is_authenticated", False) else None,
        )
        job_enqueue_kind(EVALUATION_JOB, evaluation.pk)
    return evaluation


def kernel_submit(
    *,
    task: Task,
    submitter_name: str,
    source: str,
    submitter_kind: str | None = None,
    track: str = "strict",
    origin: str = Kernel.Origin.API,
    metadata: dict | None = None,
    user: Any = None,
) -> tuple[Kernel, Evaluation]:
    """Store a kernel and queue its evaluation, all or nothing. With ``user`` (a request's): under a
    submitter that user may use (NotAllowed otherwise), within their limits (LimitExceeded)."""
    with transaction.atomic():
        if user is not None:
            submitter = submitter_for_user(name=submitter_name, user=user, kind=submitter_kind)
            submissions_limit_take(user=user)
        else:
            submitter = submitter_get_or_create(
                name=submitter_name, kind=submitter_kind or Submitter.Kind.MODEL
            )
        kernel, _ = kernel_create(
            task=task, submitter=submitter, source=source, origin=origin, metadata=metadata
        )
        evaluation = evaluation_request(kernel_id=kernel.pk, track=track, requested_by=user)
    return kernel, evaluation


def hardware_get_or_create(*, info: dict[str, Any]) -> Hardware | None:
    key = str(info.get("key") or "")
    if not key:
        return None
    hardware, _ = Hardware.objects.get_or_create(
        key=key,
        defaults={
            "name": str(info.get("name") or key)[:255],
            "torch": str(info.get("torch") or "")[:64],
            "cuda": str(info.get("cuda") or "")[:64],
        },
    )
    return hardware


def _error_kind_of(data: dict[str, Any]) -> str:
    """A verdict the infrastructure caused: the evaluator says so (``infrastructure:``: a neighbour's
    out-of-memory that persisted, a GPU that never had room), or the accelerator ran out of memory
    under the kernel (the sandbox's own memory limit on the candidate is the kernel's doing, and says
    so differently)."""
    from gpu_workers.schema import is_infrastructure

    if is_infrastructure(data.get("message")):  # the evaluator says so itself
        return ErrorKind.INFRASTRUCTURE
    text = "\n".join(str(data.get(k) or "") for k in ("message", "run_log"))[-20_000:]
    return ErrorKind.INFRASTRUCTURE if _OUT_OF_MEMORY.search(text) else ErrorKind.NONE


def evaluation_store_result(*, evaluation_id: int, result: Any) -> Evaluation:
    """Write an EvalResult onto its row (the row is the truth users see), and run the registered
    ``hooks.evaluation_stored`` (the review flags) in the same transaction: both or neither."""
    data = result.to_dict()
    hardware = hardware_get_or_create(info=data.get("hardware") or {})
    speedup = data.get("speedup") or {}
    logs = "\n".join(part for part in (data.get("compile_log") or "", data.get("run_log") or "") if part)
    findings = data.get("findings") or []
    with transaction.atomic():
        evaluation = Evaluation.objects.select_for_update().get(pk=evaluation_id)
        evaluation.hardware = hardware
        evaluation.status = data["status"]
        evaluation.correct = bool(data.get("correct"))
        evaluation.findings = findings
        evaluation.needs_review = any(f.get("severity") == "review" for f in findings)
        evaluation.timings_ms = data.get("timings_ms") or {}
        evaluation.speedup_eager = speedup.get("eager")
        evaluation.speedup_compile = speedup.get("compile")
        evaluation.reward = data.get("reward")
        evaluation.reward_config_name = str((data.get("reward_config") or {}).get("name", ""))[:64]
        evaluation.reward_config_version = str((data.get("reward_config") or {}).get("version", ""))[:64]
        evaluation.rule_set_name = str((data.get("rule_set") or {}).get("name", ""))[:64]
        evaluation.rule_set_version = str((data.get("rule_set") or {}).get("version", ""))[:64]
        evaluation.message = data.get("message") or ""
        evaluation.logs = logs[-200_000:]
        evaluation.error = ""
        evaluation.error_kind = _error_kind_of(data)
        evaluation.result = data
        evaluation.finished = timezone.now()
        evaluation.save()
        for hook in hooks.evaluation_stored_hooks():
            hook(evaluation_id=evaluation_id)
        evaluation_ring(evaluation_id=evaluation_id)
    return evaluation


def evaluation_claim(*, evaluation_id: int) -> bool:
    """Claim the row for this process (see webapp.core.runner.job_claim). False if there is nothing to run."""
    return job_claim(EVALUATION_JOB, evaluation_id, worker=worker_id()) is not None


def evaluation_gpu(*, evaluation_id: int, device: str) -> int | None:
    """Which of the worker's EVAL_GPUS a CUDA evaluation runs on: spread by id, so a stream of
    evaluations keeps every GPU busy (each GPU's slot serialises its measurements)."""
    if device != "cuda":
        return None
    return evaluation_id % settings.EVAL_GPUS


def _evaluation_execute(ctx: JobContext) -> Any:
    from gpu_workers import EvalRequest, evaluate

    evaluation = Evaluation.objects.select_related("kernel__task").get(pk=ctx.job_id)
    request = EvalRequest(
        rule_set=hooks.rule_set_for(evaluation.track),  # reviewers' published rules apply at once
        task_source=evaluation.kernel.task.source,
        kernel_source=evaluation.kernel.source,
        device=evaluation.device,
        track=evaluation.track,
        task_name=evaluation.kernel.task.name,
        baselines=tuple(settings.EVAL_BASELINES),
        trials=settings.EVAL_TRIALS,
        max_elements=settings.EVAL_MAX_ELEMENTS,
        gpu_index=evaluation_gpu(evaluation_id=ctx.job_id, device=evaluation.device),
    )
    if settings.EVAL_POOL == "ray":
        from gpu_workers.workers.pool import shared_ray_pool

        return shared_ray_pool().evaluate(request)  # one actor per GPU, fed by every gpu-queue process
    return evaluate(request)


def _evaluation_store(ctx: JobContext, result: Any) -> Evaluation:
    return evaluation_store_result(evaluation_id=ctx.job_id, result=result)


def evaluation_run(*, evaluation_id: int) -> Evaluation | None:
    """The job: claim the row, call gpu_workers.evaluate, store the verdict and its flags. Idempotent.

    A kernel's verdict (compile error, wrong result, hack) is a normal result, never an exception.
    Only failures of the evaluator itself end as status ``error`` (an infrastructure error).
    """
    return job_run(EVALUATION_JOB, evaluation_id, execute=_evaluation_execute, store=_evaluation_store)


EVALUATION_JOB = JobKind(
    name="evaluation",
    model=Evaluation,
    task="webapp.arena.tasks.evaluation_run_task",
    ring=lambda evaluation_id: evaluation_ring(evaluation_id=evaluation_id),
    time_limit_s=lambda: settings.EVAL_SOFT_TIME_LIMIT_S,
    execute_error_kind=ErrorKind.INFRASTRUCTURE,  # the evaluator's own error, never the kernel's verdict
)
