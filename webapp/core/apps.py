from django.apps import AppConfig


class CoreConfig(AppConfig):
    """The shared plumbing: the abstract job row, the job runner and its sweeper (task ``jobs_sweep``)."""

    name = "webapp.core"
    label = "core"
    verbose_name = "Jobs"
