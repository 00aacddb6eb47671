"""RL training runs: the job row (the truth), its per-step metrics (the events, seq = step), sampled
trajectories and checkpoints. Checkpoints become leaderboard submitters (kind ``checkpoint``)."""

from __future__ import annotations

from django.conf import settings as django_settings
from django.db import models

from webapp.arena.models import Submitter
from webapp.core.models import Job
from webapp.core.text import validate_name


class TrainingRun(Job):
    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        CANCELLED = "cancelled"

    FINISHED = (Status.SUCCEEDED, Status.FAILED, Status.CANCELLED)

    name = models.CharField(max_length=128)
    recipe = models.CharField(max_length=64, blank=True)  # the built-in recipe it started from, if any
    config = models.JSONField()  # training.recipes.RunConfig.to_dict(), after overrides
    config_hash = models.CharField(max_length=16, db_index=True)
    base_model = models.CharField(max_length=500)  # "tiny:tiny_llama,hidden_size=64,…" or a path / hub name
    task_set = models.CharField(max_length=500)  # e.g. "synthetic:4", "suite", "jsonl:data/ops6k.jsonl"
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED, db_index=True)
    step = models.PositiveIntegerField(default=0)  # last step whose metrics are stored
    total_steps = models.PositiveIntegerField(default=0)
    resumed_from_step = models.PositiveIntegerField(null=True, blank=True)  # last resume's checkpoint step
    out_dir = models.CharField(max_length=1000, blank=True)
    created_by = models.ForeignKey(
        django_settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        ordering = ["-created", "-id"]

    def __str__(self) -> str:
        return f"training run {self.pk} {self.name} ({self.status})"


class TrainingMetric(models.Model):
    """One training.metrics.RunMetrics (every field in ``data``); the run's events, seq = step."""

    run = models.ForeignKey(TrainingRun, on_delete=models.CASCADE, related_name="metrics")
    step = models.PositiveIntegerField()
    stage = models.CharField(max_length=64, blank=True)
    data = models.JSONField()
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "step"]
        constraints = [models.UniqueConstraint(fields=["run", "step"], name="training_metric_unique_step")]

    def __str__(self) -> str:
        return f"run {self.run_id} step {self.step}"


class TrainingSample(models.Model):
    """One sampled trajectory (training.metrics.TrajectorySample) of a step; ``position`` is its
    place among the step's emitted samples. Everything the model wrote is in ``response``/``turns``."""

    run = models.ForeignKey(TrainingRun, on_delete=models.CASCADE, related_name="samples")
    step = models.PositiveIntegerField()
    position = models.PositiveIntegerField()
    task = models.CharField(max_length=255)
    group = models.PositiveIntegerField(default=0)
    index = models.PositiveIntegerField(default=0)  # within its group
    reward = models.FloatField(null=True, blank=True)
    status = models.CharField(max_length=32, blank=True)  # the best turn's evaluator status
    speedup_eager = models.FloatField(null=True, blank=True)
    speedup_compile = models.FloatField(null=True, blank=True)
    response = models.TextField(blank=True)  # the first turn's text
    turns = models.JSONField(default=list)  # [{text, observation, reward, status, outcome, action_tokens}]
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "step", "position"]
        constraints = [
            models.UniqueConstraint(
                fields=["run", "step", "position"], name="training_sample_unique_position"
            )
        ]

    def __str__(self) -> str:
        return f"run {self.run_id} step {self.step} #{self.position}"


class TrainingCheckpoint(models.Model):
    run = models.ForeignKey(TrainingRun, on_delete=models.CASCADE, related_name="checkpoints")
    step = models.PositiveIntegerField()
    stage = models.CharField(max_length=64, blank=True)
    path = models.CharField(max_length=1000)
    config_hash = models.CharField(max_length=16, blank=True)
    submitter = models.ForeignKey(
        Submitter, on_delete=models.SET_NULL, null=True, blank=True, related_name="training_checkpoints"
    )
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "step"]
        constraints = [
            models.UniqueConstraint(fields=["run", "step"], name="training_checkpoint_unique_step")
        ]

    def __str__(self) -> str:
        return f"run {self.run_id} checkpoint @ step {self.step}"


class RegisteredTaskSet(models.Model):
    """A task set users may train on, by name; ``spec`` is where it is on the server, in the launch
    syntax (``jsonl:/data/ops6k.jsonl``, ``suite:gelu,silu``, ``synthetic:8``). Staff manage these
    (admin); only staff may give a spec directly."""

    name = models.CharField(max_length=64, unique=True, validators=[validate_name])
    spec = models.CharField(max_length=500)
    description = models.TextField(blank=True)
    enabled = models.BooleanField(default=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class RegisteredModel(models.Model):
    """A base model users may train, by name; ``location`` is a server path, a hub name or a
    ``tiny:<kind>[,key=value…]`` label. Staff manage these; only staff may give a location directly."""

    name = models.CharField(max_length=64, unique=True, validators=[validate_name])
    location = models.CharField(max_length=500)
    description = models.TextField(blank=True)
    enabled = models.BooleanField(default=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name
