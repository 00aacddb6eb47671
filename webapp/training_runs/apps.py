from django.apps import AppConfig


class TrainingRunsConfig(AppConfig):
    name = "webapp.training_runs"
    label = "training_runs"
    verbose_name = "RL training runs"

    def ready(self) -> None:
        from webapp.core.runner import job_kind_register

        from .services import TRAINING_RUN_JOB

        job_kind_register(TRAINING_RUN_JOB)
