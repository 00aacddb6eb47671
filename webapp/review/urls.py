from django.urls import path

from . import views

app_name = "review"
urlpatterns = [
    path("", views.queue, name="queue"),
    path("next/", views.next_case, name="next"),
    path("cases/<int:case_id>/", views.case_detail, name="case"),
    path("cases/<int:case_id>/verdict/", views.verdict, name="verdict"),
    path("cases/<int:case_id>/rule/", views.rule_new, name="rule_from_case"),
    path("kernels/<int:kernel_id>/flag/", views.flag_kernel, name="flag_kernel"),
    path("rules/", views.rules, name="rules"),
    path("rules/new/", views.rule_new, name="rule_new"),
    path("rules/<int:rule_id>/publish/", views.rule_publish, name="rule_publish"),
    path("checker/", views.checker, name="checker"),
    path("audit/", views.audit, name="audit"),
]
