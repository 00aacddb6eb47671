"""API tokens: ``Authorization: Bearer <token>``; only a SHA-256 of the token is stored."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class ApiToken(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=128, blank=True)
    key_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=8)  # first characters, to tell tokens apart in the admin
    created = models.DateTimeField(auto_now_add=True)
    last_used = models.DateTimeField(null=True, blank=True)
    revoked = models.BooleanField(default=False)

    class Meta:
        ordering = ["-created"]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user})"


class UsageEvent(models.Model):
    """One rate-limited action of a user (a submission, a launch), counted over a sliding window by
    webapp.accounts.services.rate_limit_take; rows older than the window are deleted as it counts."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    action = models.CharField(max_length=32)
    at = models.DateTimeField()

    class Meta:
        ordering = ["-at"]
        indexes = [models.Index(fields=["user", "action", "at"], name="usage_event_window_idx")]

    def __str__(self) -> str:
        return f"{self.action} by {self.user_id} at {self.at:%H:%M:%S}"
