"""Admin: launch (the add view is the launch form, through the service), cancel action, and
read-only metrics, samples and checkpoints."""

from __future__ import annotations

from django.contrib import admin, messages
from django.shortcuts import redirect
from django.template.response import TemplateResponse

from . import services
from .forms import TrainingLaunchForm
from .models import (
    RegisteredModel,
    RegisteredTaskSet,
    TrainingCheckpoint,
    TrainingMetric,
    TrainingRun,
    TrainingSample,
)


@admin.register(TrainingRun)
class TrainingRunAdmin(admin.ModelAdmin):
    list_display = ("id", "name", "recipe", "base_model", "status", "step", "total_steps", "created")
    list_filter = ("status", "recipe")
    search_fields = ("name", "config_hash", "base_model")
    raw_id_fields = ("created_by",)
    readonly_fields = [f.name for f in TrainingRun._meta.fields]
    actions = ["cancel"]

    def add_view(self, request, form_url="", extra_context=None):
        """Launching goes through the service (validation, enqueue after commit)."""
        if not self.has_add_permission(request):
            return redirect("admin:index")
        form = TrainingLaunchForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            try:
                run = services.training_run_launch(created_by=request.user, **form.launch_kwargs())
            except services.InvalidInput as exc:
                form.add_error(None, str(exc))
            else:
                self.message_user(request, f"Launched training run {run.pk} ({run.name}).")
                return redirect("training_runs:detail", run_id=run.pk)
        context = {
            **self.admin_site.each_context(request),
            "title": "Launch a training run",
            "form": form,
            "opts": self.model._meta,
            **(extra_context or {}),
        }
        return TemplateResponse(
            request, "admin/training_runs/launch.html", context, status=400 if form.errors else 200
        )

    @admin.action(description="Cancel (checkpoint and stop before the next step)")
    def cancel(self, request, queryset):
        for run in queryset:
            services.training_run_cancel(run_id=run.pk)
        self.message_user(request, f"Cancellation requested for {queryset.count()} runs.", messages.INFO)


class _ReadOnly(admin.ModelAdmin):
    raw_id_fields = ("run",)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(TrainingMetric)
class TrainingMetricAdmin(_ReadOnly):
    list_display = ("run", "step", "stage", "created")


@admin.register(TrainingSample)
class TrainingSampleAdmin(_ReadOnly):
    list_display = ("run", "step", "position", "task", "reward", "status")


@admin.register(TrainingCheckpoint)
class TrainingCheckpointAdmin(_ReadOnly):
    list_display = ("run", "step", "stage", "submitter", "path")
    raw_id_fields = ("run", "submitter")


@admin.register(RegisteredTaskSet)
class RegisteredTaskSetAdmin(admin.ModelAdmin):
    """Task sets users may name in a launch; ``spec`` (the server location) is never shown to them."""

    list_display = ("name", "spec", "enabled", "created")
    list_filter = ("enabled",)
    search_fields = ("name", "spec")


@admin.register(RegisteredModel)
class RegisteredModelAdmin(admin.ModelAdmin):
    """Base models users may name in a launch; ``location`` is never shown to them."""

    list_display = ("name", "location", "enabled", "created")
    list_filter = ("enabled",)
    search_fields = ("name", "location")
