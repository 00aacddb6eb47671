from __future__ import annotations

import hashlib
import secrets

from django.contrib.auth.models import AbstractBaseUser

from .models import ApiToken


def token_hash(raw: str) -> str:
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()


def api_token_create(*, user: AbstractBaseUser, name: str = "") -> tuple[ApiToken, str]:
    """Create a token; the raw value is returned once and never stored."""
    raw = "ka_" + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(user=user, name=name, key_hash=token_hash(raw), prefix=raw[:8])
    return token, raw
