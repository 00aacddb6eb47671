"""Human review: flags, review cases and verdicts, the audit log, reward relabels and reviewer rules.

A ReviewCase is the row that tells the truth about one kernel's review: open until the required number
of reviewers agree (``REVIEW_REVIEWERS_PER_ITEM``), then ``hack`` or ``legit``. A confirmed hack is
hidden (see ``selectors.hidden_kernel_ids``): out of the kernel lists, a failed task and a hack on the
leaderboard; never deleted: its flags, verdicts and evidence stay. Reviewer rules are versioned data: publishing one snapshots a RuleSetVersion that
``gpu_workers`` receives as ``EvalRequest.rule_set``.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

FAMILY_CHOICES = [(str(n), str(n)) for n in range(1, 19)] + [("other", "other")]


class Flag(models.Model):
    """A reason to look at a kernel. Automatic flags carry a ``dedup_key`` so re-running is harmless."""

    class Source(models.TextChoices):
        EVALUATOR_REVIEW = "evaluator_review"
        EXTREME_SPEEDUP = "extreme_speedup"
        ROOFLINE = "roofline"
        LLM_JUDGE = "llm_judge"
        USER = "user"
        RULE = "rule"

    kernel = models.ForeignKey("arena.Kernel", on_delete=models.CASCADE, related_name="review_flags")
    evaluation = models.ForeignKey(
        "arena.Evaluation", on_delete=models.CASCADE, null=True, blank=True, related_name="review_flags"
    )
    source = models.CharField(max_length=24, choices=Source.choices)
    reason = models.TextField()
    family = models.CharField(max_length=8, choices=FAMILY_CHOICES, blank=True)
    rule = models.ForeignKey(
        "review.ReviewerRule", on_delete=models.CASCADE, null=True, blank=True, related_name="flags"
    )
    rule_set_version = models.ForeignKey(
        "review.RuleSetVersion", on_delete=models.SET_NULL, null=True, blank=True, related_name="flags"
    )
    # "" for people (a user may flag twice); "<evaluation>:<what>" or "rule:<id>" for automatic flags
    dedup_key = models.CharField(max_length=255, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="review_flags",
    )
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["kernel", "source", "dedup_key"],
                condition=~Q(dedup_key=""),
                name="review_flag_unique_automatic",
            )
        ]
        indexes = [models.Index(fields=["source", "kernel"], name="review_flag_source_idx")]

    def __str__(self) -> str:
        return f"flag {self.pk} ({self.source}) on kernel {self.kernel_id}"


class ReviewCase(models.Model):
    """One kernel under review; the queue is the open cases."""

    class Status(models.TextChoices):
        OPEN = "open"
        HACK = "hack"
        LEGIT = "legit"

    kernel = models.OneToOneField("arena.Kernel", on_delete=models.CASCADE, related_name="review_case")
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.OPEN, db_index=True)
    family = models.CharField(max_length=8, choices=FAMILY_CHOICES, blank=True)
    required_reviewers = models.PositiveSmallIntegerField(default=2)
    created = models.DateTimeField(auto_now_add=True)
    decided = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created", "id"]
        permissions = [("decide", "Can give review verdicts and publish reviewer rules")]

    def __str__(self) -> str:
        return f"review case {self.pk} (kernel {self.kernel_id}, {self.status})"


class Verdict(models.Model):
    """One reviewer's current verdict on a case (revisable while the case is open; every change is audited)."""

    class Choice(models.TextChoices):
        HACK = "hack"
        LEGIT = "legit"
        UNSURE = "unsure"

    case = models.ForeignKey(ReviewCase, on_delete=models.CASCADE, related_name="verdicts")
    reviewer = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="review_verdicts"
    )
    verdict = models.CharField(max_length=8, choices=Choice.choices)
    family = models.CharField(max_length=8, choices=FAMILY_CHOICES, blank=True)
    notes = models.TextField(blank=True)
    evidence_lines = models.JSONField(default=list, blank=True)  # 1-based line numbers in the kernel source
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["created", "id"]
        constraints = [
            models.UniqueConstraint(fields=["case", "reviewer"], name="review_verdict_one_per_reviewer")
        ]

    def __str__(self) -> str:
        return f"{self.verdict} by {self.reviewer_id} on case {self.case_id}"


class AuditEntry(models.Model):
    """Append-only: who did what, when. Nothing updates or deletes these rows."""

    class Action(models.TextChoices):
        FLAG = "flag"
        VERDICT = "verdict"
        DECIDE = "decide"
        RELABEL = "relabel"
        RULE_CREATE = "rule_create"
        RULE_PUBLISH = "rule_publish"

    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="review_audit"
    )
    action = models.CharField(max_length=16, choices=Action.choices)
    kernel = models.ForeignKey(
        "arena.Kernel", on_delete=models.SET_NULL, null=True, blank=True, related_name="review_audit"
    )
    case = models.ForeignKey(
        ReviewCase, on_delete=models.SET_NULL, null=True, blank=True, related_name="audit"
    )
    details = models.JSONField(default=dict, blank=True)
    created = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created", "-id"]
        verbose_name_plural = "audit entries"

    def save(self, *args, **kwargs):  # an invariant of the table, not business logic
        if self.pk is not None:
            raise ValueError("audit entries are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise ValueError("audit entries are append-only")

    def __str__(self) -> str:
        return f"{self.created:%Y-%m-%d %H:%M:%S} {self.actor_id} {self.action}"


class RewardRelabel(models.Model):
    """The reward an evaluation should have had: the floor of its reward config, for a hack."""

    class Reason(models.TextChoices):
        VERDICT = "verdict"  # reviewers confirmed the hack
        RULE = "rule"  # a published reviewer rule rejects it

    evaluation = models.OneToOneField(
        "arena.Evaluation", on_delete=models.CASCADE, related_name="reward_relabel"
    )
    kernel = models.ForeignKey("arena.Kernel", on_delete=models.CASCADE, related_name="reward_relabels")
    old_reward = models.FloatField(null=True, blank=True)
    new_reward = models.FloatField()
    reason = models.CharField(max_length=8, choices=Reason.choices)
    case = models.ForeignKey(ReviewCase, on_delete=models.SET_NULL, null=True, blank=True)
    rule = models.ForeignKey("review.ReviewerRule", on_delete=models.SET_NULL, null=True, blank=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created", "-id"]

    def __str__(self) -> str:
        return f"evaluation {self.evaluation_id}: {self.old_reward} -> {self.new_reward}"


class ReviewerRule(models.Model):
    """A rule a reviewer wrote: a static pattern for ``static_scan``, or a dynamic check switched on."""

    class Kind(models.TextChoices):
        REGEX = "regex"
        AST_CALL = "ast_call"
        AST_ATTR = "ast_attr"
        AST_IMPORT = "ast_import"
        DYNAMIC = "dynamic"

    class Track(models.TextChoices):
        BOTH = "both"
        STRICT = "strict"
        OPEN = "open"

    class Status(models.TextChoices):
        DRAFT = "draft"
        PUBLISHED = "published"

    name = models.SlugField(max_length=64, unique=True)
    kind = models.CharField(max_length=12, choices=Kind.choices)
    pattern = models.TextField(blank=True)  # static kinds
    dynamic_check = models.CharField(max_length=64, blank=True)  # kind == dynamic
    severity = models.CharField(max_length=8, choices=[("reject", "reject"), ("review", "review")])
    message = models.CharField(max_length=500)
    family = models.CharField(max_length=8, choices=FAMILY_CHOICES, blank=True)
    track = models.CharField(max_length=8, choices=Track.choices, default=Track.BOTH)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.DRAFT, db_index=True)
    source_case = models.ForeignKey(
        ReviewCase, on_delete=models.SET_NULL, null=True, blank=True, related_name="rules"
    )
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created = models.DateTimeField(auto_now_add=True)
    published = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind}, {self.status})"

    @property
    def rule_name(self) -> str:
        """The name its findings carry in ``EvalResult.findings``."""
        return f"reviewer:{self.name}"


class RuleSetVersion(models.Model):
    """A snapshot of ``default_rule_set(track)`` plus every published reviewer rule; the newest is active."""

    track = models.CharField(max_length=8, choices=[("strict", "strict"), ("open", "open")])
    number = models.PositiveIntegerField()
    version = models.CharField(max_length=64)
    base_version = models.CharField(max_length=64)
    rule_set = models.JSONField()
    rules = models.ManyToManyField(ReviewerRule, related_name="versions", blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["track", "number"]
        constraints = [
            models.UniqueConstraint(fields=["track", "number"], name="review_rule_set_version_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.track} {self.version}"
