from django.urls import path

from . import views

app_name = "training_runs"
urlpatterns = [
    path("", views.run_list, name="list"),
    path("<int:run_id>/", views.run_detail, name="detail"),
    path("<int:run_id>/cancel/", views.cancel, name="cancel"),
]
