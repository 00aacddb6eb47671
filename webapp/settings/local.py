"""A laptop: SQLite under ./var/, the embedded worker, DEBUG on unless told otherwise."""

import os

from .base import *  # noqa: F403

DEBUG = os.environ.get("DEBUG", "1") == "1"
