from __future__ import annotations

import hashlib
import math
import secrets
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from .models import ApiToken, UsageEvent


def token_hash(raw: str) -> str:
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()


def api_token_create(*, user: AbstractBaseUser, name: str = "") -> tuple[ApiToken, str]:
    """Create a token; the raw value is returned once and never stored."""
    raw = "ka_" + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(user=user, name=name, key_hash=token_hash(raw), prefix=raw[:8])
    return token, raw


class LimitExceeded(Exception):
    """A rate limit or queue cap refused the request; the message says which and when to retry
    (API: 429 with it as ``detail``; pages: 429 with it as a message)."""


def now() -> Any:
    """The limits' clock (tests replace it to count a window without waiting for one)."""
    return timezone.now()


def _exempt(user: Any) -> bool:
    return user is None or not getattr(user, "is_authenticated", False) or user.is_staff


def _user_lock(user: Any) -> None:
    """Serialise one user's counted requests (a row lock, held until the transaction ends)."""
    get_user_model().objects.select_for_update().filter(pk=user.pk).first()


def rate_limit_take(*, user: Any, action: str, limit: int, window_s: int = 60, what: str = "") -> None:
    """Count one ``action`` of ``user`` in a sliding window, or raise LimitExceeded when ``limit``
    actions are already in it. Users' rows are locked while counting, so concurrent requests of
    one user are counted one after the other. ``limit`` 0: no limit. Staff are not limited."""
    if limit <= 0 or _exempt(user):
        return
    current = now()
    start = current - timedelta(seconds=window_s)
    with transaction.atomic():
        _user_lock(user)
        UsageEvent.objects.filter(user=user, action=action, at__lte=start).delete()
        used = UsageEvent.objects.filter(user=user, action=action, at__gt=start).order_by("at")
        count = used.count()
        if count >= limit:
            oldest = used.values_list("at", flat=True).first()
            retry = max(1, math.ceil((oldest - start).total_seconds())) if oldest else window_s
            raise LimitExceeded(
                f"rate limit: at most {limit} {what or action} per {window_s} s per user; "
                f"try again in {retry} s"
            )
        UsageEvent.objects.create(user=user, action=action, at=current)


def queue_cap_check(*, user: Any, count: Callable[[], int], adding: int, cap: int, what: str) -> None:
    """Refuse ``adding`` more jobs when ``user`` already has ``count()`` queued or running and the sum
    would pass ``cap`` (0: no cap). Staff are not capped. Call it inside the transaction that
    creates the jobs: the user's row stays locked until it commits, so two requests of one user
    cannot both take the last place."""
    if cap <= 0 or _exempt(user):
        return
    with transaction.atomic():  # a savepoint in the caller's transaction; the lock lasts until it ends
        _user_lock(user)
        queued = count()
    if queued + adding > cap:
        raise LimitExceeded(
            f"queue cap: at most {cap} {what} queued or running per user; you have {queued}"
            + (f" and asked for {adding} more" if adding > 1 else "")
            + "; wait for some to finish"
        )
