"""Settings from the environment: DATABASE_URL parsing and the laptop default."""

from __future__ import annotations

from pathlib import Path

import pytest

from webapp.settings.database import database_from_url


def test_no_url_means_sqlite_under_var(tmp_path):
    config = database_from_url(None, sqlite_path=tmp_path / "var" / "db.sqlite3")

    assert config["ENGINE"] == "django.db.backends.sqlite3"
    assert config["NAME"] == str(tmp_path / "var" / "db.sqlite3")
    assert (tmp_path / "var").is_dir()


def test_postgres_url_is_parsed():
    config = database_from_url(
        "postgres://arena:p%40ss@db.local:6543/arena?sslmode=require", sqlite_path=Path("unused")
    )

    assert {k: config[k] for k in ("ENGINE", "NAME", "USER", "PASSWORD", "HOST", "PORT", "OPTIONS")} == {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "arena",
        "USER": "arena",
        "PASSWORD": "p@ss",
        "HOST": "db.local",
        "PORT": "6543",
        "OPTIONS": {"sslmode": "require"},
    }


def test_unknown_scheme_is_refused():
    with pytest.raises(ValueError, match="mysql"):
        database_from_url("mysql://x/y", sqlite_path=Path("unused"))
