from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser

from .models import ApiToken
from .services import token_hash


def api_token_user(*, raw: str) -> AbstractBaseUser | None:
    """The active user behind a raw token, or None."""
    if not raw:
        return None
    token = (
        ApiToken.objects.select_related("user")
        .filter(key_hash=token_hash(raw), revoked=False, user__is_active=True)
        .first()
    )
    return token.user if token else None
