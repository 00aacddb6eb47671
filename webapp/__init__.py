"""KernelCourt's Django project: the only package that imports Django."""

from .celery import app as celery_app

__all__ = ["celery_app"]
