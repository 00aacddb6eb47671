from django.apps import AppConfig


class ArenaConfig(AppConfig):
    name = "webapp.arena"
    label = "arena"
    verbose_name = "Arena: tasks, kernels, evaluations, leaderboard"
