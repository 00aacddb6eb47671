"""Says plainly what ``make test`` needs before the suite starts: PostgreSQL is required, Redis and Chromium are
used by the integration and page tests (which skip without them, and fail under CI=true)."""

from __future__ import annotations

import os
import shutil
import socket
import sys
from urllib.parse import urlparse


def reachable(url: str, default_port: int) -> bool:
    parsed = urlparse(url)
    try:
        with socket.create_connection((parsed.hostname or "127.0.0.1", parsed.port or default_port), timeout=2):
            return True
    except OSError:
        return False


def main() -> int:
    database = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    redis = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    chromium = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    missing = []
    if urlparse(database).scheme.startswith("postgres") and not reachable(database, 5432):
        print(f"make test needs PostgreSQL at {database} (set DATABASE_URL, or start it: "
              "`pg_ctlcluster <version> main start`; `bash .ci/run` starts it for you)", file=sys.stderr)
        return 1
    if not reachable(redis, 6379):
        missing.append(f"Redis at {redis} (REDIS_URL; `redis-server --daemonize yes`)")
    if not (shutil.which(chromium) or os.path.exists(chromium)):
        missing.append("Debian's chromium (`apt-get install chromium`)")
    for what in missing:
        print(f"note: without {what} its tests skip here and fail under CI=true", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
