from django.apps import AppConfig


class TrainingRunsConfig(AppConfig):
    name = "webapp.training_runs"
    label = "training_runs"
    verbose_name = "RL training runs"
