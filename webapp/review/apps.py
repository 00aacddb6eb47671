from django.apps import AppConfig


class ReviewConfig(AppConfig):
    name = "webapp.review"
    label = "review"
    verbose_name = "Human review"
    default_auto_field = "django.db.models.BigAutoField"
