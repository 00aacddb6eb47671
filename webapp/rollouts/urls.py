from django.urls import path

from . import views

app_name = "rollouts"
urlpatterns = [
    path("", views.rollout_list, name="list"),
    path("new/", views.launch, name="launch"),
    path("<int:rollout_id>/", views.rollout_detail, name="detail"),
    path("<int:rollout_id>/cancel/", views.cancel, name="cancel"),
]
