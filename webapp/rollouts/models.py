"""Agent rollouts: one row per rollout (the job row is the truth), its trajectory events, and the
LLM endpoints staff registered (users choose among them; nobody types a URL the server would call).

An API key is never stored here: an endpoint names the environment variable that holds it, read by
the worker when the rollout runs.
"""

from __future__ import annotations

import re
from urllib.parse import urlparse

from django.conf import settings as django_settings
from django.core.exceptions import ValidationError
from django.db import models

from webapp.arena.models import Evaluation, Kernel, Submitter, Task
from webapp.core.models import Job
from webapp.core.text import validate_name


def validate_env_name(value: str) -> None:
    if value and not re.fullmatch(r"[A-Z_][A-Z0-9_]{0,127}", value):
        raise ValidationError("An environment variable name: capital letters, digits and _.")


def validate_base_url(value: str) -> None:
    parsed = urlparse(value)
    if parsed.scheme not in ("http", "https") or not parsed.hostname or any(c.isspace() for c in value):
        raise ValidationError(
            "An http:// or https:// URL of an OpenAI-compatible API, e.g. http://host:8000/v1."
        )


class LlmEndpoint(models.Model):
    """An OpenAI-compatible chat-completions API that rollouts may use, registered by staff."""

    name = models.CharField(max_length=64, unique=True, validators=[validate_name])
    base_url = models.CharField(max_length=500, validators=[validate_base_url])
    model = models.CharField(max_length=255)  # the model name sent with every request
    # the environment variable (of the worker) holding the API key; empty: no key
    api_key_env = models.CharField(max_length=128, blank=True, validators=[validate_env_name])
    description = models.TextField(blank=True)
    enabled = models.BooleanField(default=True)
    builtin = models.BooleanField(default=False)  # the app's own scripted policy (see builtin_policy)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "LLM endpoint"

    def __str__(self) -> str:
        return f"{self.name} ({self.model})"


class RolloutBatch(models.Model):
    """A suite launched at once: one Rollout per task, same endpoint, model and settings."""

    suite = models.CharField(max_length=64)
    level = models.PositiveSmallIntegerField(null=True, blank=True)
    submitter = models.ForeignKey(Submitter, on_delete=models.CASCADE, related_name="rollout_batches")
    endpoint = models.ForeignKey(
        LlmEndpoint, on_delete=models.PROTECT, null=True, blank=True, related_name="rollout_batches"
    )
    base_url = models.CharField(max_length=500)
    model = models.CharField(max_length=255)
    settings = models.JSONField(default=dict, blank=True)
    created_by = models.ForeignKey(
        django_settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created", "-id"]
        verbose_name_plural = "rollout batches"

    def __str__(self) -> str:
        return f"batch {self.pk} ({self.suite})"


class Rollout(Job):
    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        # the loop ran to a stop of its own (see stop_reason; ``passed``: it found a passing kernel)
        SUCCEEDED = "succeeded"
        FAILED = "failed"  # the endpoint or the worker failed (see error)
        CANCELLED = "cancelled"

    FINISHED = (Status.SUCCEEDED, Status.FAILED, Status.CANCELLED)

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="rollouts")
    submitter = models.ForeignKey(Submitter, on_delete=models.CASCADE, related_name="rollouts")
    batch = models.ForeignKey(
        RolloutBatch, on_delete=models.SET_NULL, null=True, blank=True, related_name="rollouts"
    )
    # base_url and model are copied from the endpoint at launch (what this rollout asked)
    endpoint = models.ForeignKey(
        LlmEndpoint, on_delete=models.PROTECT, null=True, blank=True, related_name="rollouts"
    )
    base_url = models.CharField(max_length=500)
    model = models.CharField(max_length=255)
    # {"config": RolloutConfig.to_dict(), "contrastive": bool}; never an API key
    settings = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED, db_index=True)
    stop_reason = models.CharField(max_length=32, blank=True)
    turns = models.PositiveIntegerField(default=0)
    evaluations = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)
    passed = models.BooleanField(default=False)
    best_speedup = models.FloatField(null=True, blank=True)
    best_reward = models.FloatField(null=True, blank=True)
    best_kernel = models.ForeignKey(
        Kernel, on_delete=models.SET_NULL, null=True, blank=True, related_name="rollouts"
    )
    best_evaluation = models.ForeignKey(
        Evaluation, on_delete=models.SET_NULL, null=True, blank=True, related_name="rollouts"
    )
    summary = models.JSONField(default=dict, blank=True)  # RolloutSummary.to_dict() without the kernel
    created_by = models.ForeignKey(
        django_settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        ordering = ["-created", "-id"]

    def __str__(self) -> str:
        return f"rollout {self.pk} ({self.status})"

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def config(self) -> dict:
        return dict(self.settings.get("config") or {})


class RolloutEvent(models.Model):
    """One agent.events.TrajectoryEvent, stored before anyone is told about it."""

    rollout = models.ForeignKey(Rollout, on_delete=models.CASCADE, related_name="events")
    seq = models.PositiveIntegerField()
    kind = models.CharField(max_length=16)
    role = models.CharField(max_length=16, blank=True)
    turn = models.PositiveIntegerField(default=0)
    content = models.TextField(blank=True)
    tool_call = models.JSONField(null=True, blank=True)
    evaluation = models.JSONField(null=True, blank=True)  # EvalResult.to_dict()
    reward = models.FloatField(null=True, blank=True)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    elapsed_s = models.FloatField(default=0.0)
    data = models.JSONField(default=dict, blank=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["rollout", "seq"]
        constraints = [models.UniqueConstraint(fields=["rollout", "seq"], name="rollout_event_unique_seq")]

    def __str__(self) -> str:
        return f"rollout {self.rollout_id} #{self.seq} {self.kind}"
