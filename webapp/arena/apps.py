from django.apps import AppConfig


class ArenaConfig(AppConfig):
    name = "webapp.arena"
    label = "arena"
    verbose_name = "Arena: tasks, kernels, evaluations, leaderboard"

    def ready(self) -> None:
        from webapp.core.runner import job_kind_register

        from .services import EVALUATION_JOB

        job_kind_register(EVALUATION_JOB)
