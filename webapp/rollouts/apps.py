from django.apps import AppConfig


class RolloutsConfig(AppConfig):
    name = "webapp.rollouts"
    label = "rollouts"
    verbose_name = "Agent rollouts"

    def ready(self) -> None:
        from webapp.core.runner import job_kind_register

        from .services import ROLLOUT_JOB

        job_kind_register(ROLLOUT_JOB)
