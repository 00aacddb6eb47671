from django.urls import path

from . import views

app_name = "arena"
urlpatterns = [
    path("", views.leaderboard, name="leaderboard"),
    path("entries/", views.entries, name="entries"),
    path("tasks/", views.task_list, name="task_list"),
    path("tasks/<int:task_id>/", views.task_detail, name="task_detail"),
    path("kernels/<int:kernel_id>/", views.kernel_detail, name="kernel_detail"),
    path("submitters/<path:name>/", views.submitter_detail, name="submitter_detail"),
]
