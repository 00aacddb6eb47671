"""Settings: ``base`` plus small per-integration modules; ``local`` (default) and ``test`` on top."""
