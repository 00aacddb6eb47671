"""Object-level permissions shared by the apps: who may change a row, who may read its errors."""

from __future__ import annotations

from typing import Any

from .text import scrub_paths


class NotAllowed(Exception):
    """The user may not do this to this row; the message says why (API: 403, pages: 403)."""


def is_staff(user: Any) -> bool:
    return bool(getattr(user, "is_authenticated", False) and user.is_staff)


def is_owner(user: Any, owner_id: int | None) -> bool:
    return bool(getattr(user, "is_authenticated", False) and owner_id is not None and user.pk == owner_id)


def can_manage(user: Any, owner_id: int | None) -> bool:
    """Cancel, resume, delete, edit: the row's owner or a staff user."""
    return is_staff(user) or is_owner(user, owner_id)


def manage_check(user: Any, owner_id: int | None, what: str) -> None:
    if not can_manage(user, owner_id):
        raise NotAllowed(f"only the owner of {what} or a staff user can do this")


def visible_error(text: str, *, user: Any, owner_id: int | None) -> str:
    """A job's error as ``user`` may see it: staff the full text, the owner the text without server
    paths, anyone else nothing."""
    if not text:
        return ""
    if is_staff(user):
        return text
    if is_owner(user, owner_id):
        return scrub_paths(text)
    return ""
