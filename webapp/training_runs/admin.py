"""Admin: launch (the add view is the launch form, through the service), cancel action, and
read-only metrics, samples and checkpoints (with an action that puts a checkpoint on the leaderboard)."""

from __future__ import annotations

from django.contrib import admin, messages
from django.shortcuts import redirect
from django.template.response import TemplateResponse

from . import conf, services
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
    actions = ["evaluate_on_leaderboard"]

    @admin.action(description="Evaluate on the leaderboard (the agent on the built-in suite)")
    def evaluate_on_leaderboard(self, request, queryset):
        for checkpoint in queryset:
            try:
                batch = services.training_checkpoint_leaderboard(
                    run_id=checkpoint.run_id, step=checkpoint.step, suite=conf.leaderboard_suite(),
                    created_by=request.user,
                )
            except services.InvalidInput as exc:
                self.message_user(request, f"{checkpoint}: {exc}", messages.ERROR)
            else:
                self.message_user(request, f"{checkpoint}: rollout batch {batch.pk} queued.", messages.INFO)


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
