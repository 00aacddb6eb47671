"""Tasks, submitters, kernels, evaluations and the hardware they ran on.

An Evaluation row is the truth about one run of the evaluator: its status, timestamps and error are
written by the job that runs it (webapp.arena.services.evaluation_run, on webapp.core.runner).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from webapp.core.models import Job
from webapp.core.text import validate_name


class Task(models.Model):
    suite = models.CharField(max_length=64)
    level = models.PositiveSmallIntegerField(null=True, blank=True)
    name = models.CharField(max_length=255)
    source = models.TextField()
    source_hash = models.CharField(max_length=64, db_index=True)
    ops = models.JSONField(default=list, blank=True)
    description = models.TextField(blank=True)
    data_source = models.CharField(max_length=128, blank=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["suite", "level", "name"]
        constraints = [models.UniqueConstraint(fields=["suite", "name"], name="task_unique_suite_name")]

    def __str__(self) -> str:
        return (
            f"{self.suite}/L{self.level}/{self.name}"
            if self.level is not None
            else f"{self.suite}/{self.name}"
        )


class Submitter(models.Model):
    class Kind(models.TextChoices):
        MODEL = "model"
        AGENT = "agent"
        CHECKPOINT = "checkpoint"
        HUMAN = "human"

    # a slug of at most 64 characters (the column is wider for names stored before that rule)
    name = models.CharField(max_length=128, unique=True, validators=[validate_name])
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.MODEL)
    metadata = models.JSONField(default=dict, blank=True)
    # Who may post under this name: its creator and the members a staff user adds (and staff).
    # No creator (imports, checkpoints of a deleted user's run): staff only.
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="submitters_created",
    )
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="submitters")
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Kernel(models.Model):
    class Origin(models.TextChoices):
        UPLOAD = "upload"
        API = "api"
        ROLLOUT = "rollout"
        IMPORT = "import"

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="kernels")
    submitter = models.ForeignKey(Submitter, on_delete=models.CASCADE, related_name="kernels")
    source = models.TextField()
    source_hash = models.CharField(max_length=64)
    origin = models.CharField(max_length=16, choices=Origin.choices, default=Origin.UPLOAD)
    metadata = models.JSONField(default=dict, blank=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["task", "submitter", "source_hash"], name="kernel_unique_per_task_submitter"
            )
        ]

    def __str__(self) -> str:
        return f"kernel {self.pk} ({self.submitter_id} on {self.task_id})"


class Hardware(models.Model):
    key = models.CharField(max_length=255, unique=True)
    name = models.CharField(max_length=255)
    torch = models.CharField(max_length=64, blank=True)
    cuda = models.CharField(max_length=64, blank=True)

    class Meta:
        ordering = ["key"]
        verbose_name_plural = "hardware"

    def __str__(self) -> str:
        return self.key


class Evaluation(Job):
    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        PASSED = "passed"
        COMPILE_ERROR = "compile_error"
        RUNTIME_ERROR = "runtime_error"
        INCORRECT = "incorrect"
        TIMEOUT = "timeout"
        REJECTED = "rejected"
        # the evaluator itself failed (not the kernel's fault): not counted on the leaderboard
        ERROR = "error"

    FAILED_STATUS = Status.ERROR
    CANCELLED_STATUS = None  # an evaluation runs to its verdict (its own time limits bound it)

    class Track(models.TextChoices):
        STRICT = "strict"
        OPEN = "open"

    kernel = models.ForeignKey(Kernel, on_delete=models.CASCADE, related_name="evaluations")
    track = models.CharField(max_length=16, choices=Track.choices, default=Track.STRICT)
    device = models.CharField(max_length=16, default="cpu")
    hardware = models.ForeignKey(
        Hardware, on_delete=models.PROTECT, null=True, blank=True, related_name="evaluations"
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED, db_index=True)
    correct = models.BooleanField(default=False)
    findings = models.JSONField(default=list, blank=True)
    needs_review = models.BooleanField(default=False)
    timings_ms = models.JSONField(default=dict, blank=True)
    speedup_eager = models.FloatField(null=True, blank=True)
    speedup_compile = models.FloatField(null=True, blank=True)
    reward = models.FloatField(null=True, blank=True)
    reward_config_name = models.CharField(max_length=64, blank=True)
    reward_config_version = models.CharField(max_length=64, blank=True)
    rule_set_name = models.CharField(max_length=64, blank=True)
    rule_set_version = models.CharField(max_length=64, blank=True)
    message = models.TextField(blank=True)
    logs = models.TextField(blank=True)
    result = models.JSONField(default=dict, blank=True)  # the full EvalResult.to_dict()
    # the user whose request queued it (their queue cap counts it); None: seeded, imported by a command
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        ordering = ["-created", "-id"]
        indexes = [
            models.Index(fields=["track", "hardware", "status"], name="evaluation_leaderboard_idx"),
            models.Index(fields=["requested_by", "status"], name="evaluation_requester_idx"),
        ]

    def __str__(self) -> str:
        return f"evaluation {self.pk} ({self.status})"
