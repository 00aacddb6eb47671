from django.contrib import admin
from django.urls import include, path

from webapp.api import api

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("api/", api.urls),
    path("review/", include("webapp.review.urls")),
    path("rollouts/", include("webapp.rollouts.urls")),
    path("training/", include("webapp.training_runs.urls")),
    path("", include("webapp.arena.urls")),
]
