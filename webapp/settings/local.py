"""A laptop: SQLite under ./var/, the embedded worker. DEBUG stays off (styled error pages, no URL
lists on 404s) unless asked for with DEBUG=1."""

from .base import *  # noqa: F403
