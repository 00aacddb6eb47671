"""Settings shared by every environment; everything comes from the environment with laptop defaults."""

from __future__ import annotations

import os
from pathlib import Path

from .database import database_from_url
from .evaluator import *  # noqa: F403
from .limits import *  # noqa: F403
from .queue import *  # noqa: F403

BASE_DIR = Path(__file__).resolve().parents[2]
VAR_DIR = Path(os.environ.get("KERNELCOURT_VAR", BASE_DIR / "var"))

SECRET_KEY = os.environ.get("SECRET_KEY", "dev-only-insecure-key-change-me-for-any-shared-deployment")
DEBUG = os.environ.get("DEBUG", "0") == "1"
ALLOWED_HOSTS = [h for h in os.environ.get("ALLOWED_HOSTS", "127.0.0.1,localhost,testserver").split(",") if h]
CSRF_TRUSTED_ORIGINS = [o for o in os.environ.get("CSRF_TRUSTED_ORIGINS", "").split(",") if o]

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "ninja",  # serves Swagger UI from static files (no CDN)
    "webapp.core",
    "webapp.accounts",
    "webapp.arena",
    "webapp.review",
    "webapp.rollouts",
    "webapp.training_runs",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "webapp.core.inputguard.UnstorableTextMiddleware",
    "webapp.core.middleware.ContentSecurityPolicyMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "webapp.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "webapp" / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    }
]
ASGI_APPLICATION = "webapp.asgi.application"
WSGI_APPLICATION = "webapp.wsgi.application"

DATABASES = {
    "default": database_from_url(os.environ.get("DATABASE_URL"), sqlite_path=VAR_DIR / "kernelcourt.sqlite3")
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = VAR_DIR / "static"
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    # plotly.js comes from the plotly Python package (no CDN: GPU nodes and CI have no internet)
    "webapp.core.staticfinders.PlotlyFinder",
]
# Serve static files from the ASGI app itself (daphne has no static handler; one container is enough).
SERVE_STATIC = os.environ.get("SERVE_STATIC", "1") == "1"

# django-ninja
NINJA_PAGINATION_MAX_PER_PAGE_SIZE = 100

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"webapp": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")}},
}

LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/"
