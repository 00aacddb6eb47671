"""The abstract job row: what every evaluation, rollout and training run records about its life cycle.

The fields live on each app's own table (an abstract base, no table of its own). The row is the truth
users see; only the job runner (``webapp.core.runner``) moves a row between ``queued`` and ``running``
and writes its heartbeat, worker, attempts and infrastructure failures.
"""

from __future__ import annotations

from django.db import models


class ErrorKind(models.TextChoices):
    NONE = "", "none"
    # the job's own input or outcome failed it (a bad config, an LLM endpoint that refused)
    JOB = "job", "job"
    # not the input's fault: the worker died, the time limit, out of memory, the runner's own error
    INFRASTRUCTURE = "infrastructure", "infrastructure"


class Job(models.Model):
    QUEUED = "queued"
    RUNNING = "running"
    # Subclasses name their final statuses: the one an infrastructure failure ends in, and the one a
    # cancel ends in (None: this kind of job cannot be cancelled).
    FAILED_STATUS: str = "failed"
    CANCELLED_STATUS: str | None = "cancelled"

    status = models.CharField(max_length=16, default=QUEUED, db_index=True)  # subclasses add choices
    attempts = models.PositiveIntegerField(default=0)  # claims so far, the running one included
    created = models.DateTimeField(auto_now_add=True)
    started = models.DateTimeField(null=True, blank=True)  # when the current (or last) attempt began
    heartbeat = models.DateTimeField(null=True, blank=True)  # last sign of life of the running attempt
    finished = models.DateTimeField(null=True, blank=True)
    worker = models.CharField(max_length=255, blank=True)  # "host:pid" of the process running it
    error = models.TextField(blank=True)
    error_kind = models.CharField(max_length=16, choices=ErrorKind.choices, default=ErrorKind.NONE, blank=True)
    time_limit_s = models.PositiveIntegerField(null=True, blank=True)  # the limit its attempts ran under
    cancel_requested = models.BooleanField(default=False)

    class Meta:
        abstract = True

    @property
    def is_finished(self) -> bool:
        return self.status not in (self.QUEUED, self.RUNNING)
