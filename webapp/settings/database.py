"""DATABASE_URL -> Django's DATABASES; no URL -> a SQLite file under ./var/."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse


def database_from_url(url: str | None, *, sqlite_path: Path) -> dict:
    if not url:
        sqlite_path.parent.mkdir(parents=True, exist_ok=True)
        # timeout: the embedded worker thread and the web requests share one SQLite file
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": str(sqlite_path), "OPTIONS": {"timeout": 30}}
    parsed = urlparse(url)
    if parsed.scheme == "sqlite":
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": unquote(parsed.path) or str(sqlite_path),
            "OPTIONS": {"timeout": 30},
        }
    if parsed.scheme not in ("postgres", "postgresql", "pgsql"):
        raise ValueError(
            f"DATABASE_URL scheme {parsed.scheme!r} is not supported (use postgres:// or sqlite://)"
        )
    options = {k: v[-1] for k, v in parse_qs(parsed.query).items()}
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parsed.path.lstrip("/")) or "postgres",
        "USER": unquote(parsed.username or ""),
        "PASSWORD": unquote(parsed.password or ""),
        "HOST": parsed.hostname or "",
        "PORT": str(parsed.port or ""),
        "OPTIONS": options,
        # Under ASGI (daphne) every request runs its sync code in a thread of its own: a persistent
        # connection stays open in each idle thread, and enough of them exhaust the server's
        # max_connections. 0: a connection lives for one request (or one task) and is then closed.
        "CONN_MAX_AGE": int(os.environ.get("CONN_MAX_AGE", "0")),
        "CONN_HEALTH_CHECKS": True,
    }
