"""Admin: rollouts (launch through the launch form, relaunch and cancel actions), batches, events."""

from __future__ import annotations

from django.contrib import admin, messages
from django.shortcuts import redirect

from . import services
from .models import LlmEndpoint, Rollout, RolloutBatch, RolloutEvent


@admin.register(LlmEndpoint)
class LlmEndpointAdmin(admin.ModelAdmin):
    """The endpoints users may choose for a rollout. The key is never stored here: ``api_key_env``
    names the worker's environment variable that holds it."""

    list_display = ("name", "model", "base_url", "api_key_env", "enabled", "builtin", "created")
    list_filter = ("enabled", "builtin")
    search_fields = ("name", "model", "base_url")


@admin.register(Rollout)
class RolloutAdmin(admin.ModelAdmin):
    list_display = ("id", "task", "submitter", "model", "status", "stop_reason", "turns", "passed", "created")
    list_filter = ("status", "stop_reason", "passed")
    list_select_related = ("task", "submitter")
    search_fields = ("task__name", "submitter__name", "model")
    raw_id_fields = ("task", "submitter", "batch", "endpoint", "best_kernel", "best_evaluation", "created_by")
    readonly_fields = [f.name for f in Rollout._meta.fields]
    actions = ["relaunch", "cancel"]

    def add_view(self, request, form_url="", extra_context=None):
        """Launching goes through the service (validation, enqueue after commit): the launch form."""
        return redirect("rollouts:launch")

    @admin.action(description="Launch again (same task, endpoint and settings)")
    def relaunch(self, request, queryset):
        launched = 0
        for rollout in queryset.select_related("task", "submitter", "endpoint"):
            if rollout.endpoint is None:
                self.message_user(
                    request, f"rollout {rollout.pk}: it has no registered endpoint", messages.ERROR
                )
                continue
            config = rollout.config
            settings = {k: v for k, v in config.items() if k in services.USER_SETTINGS}
            settings["contrastive"] = bool(rollout.settings.get("contrastive"))
            try:
                services.rollout_launch(
                    task_id=rollout.task_id,
                    submitter_name=rollout.submitter.name,
                    submitter_kind=rollout.submitter.kind,
                    endpoint=rollout.endpoint.name,
                    settings=settings,
                    created_by=request.user,
                )
                launched += 1
            except services.InvalidInput as exc:
                self.message_user(request, f"rollout {rollout.pk}: {exc}", messages.ERROR)
        self.message_user(request, f"Launched {launched} rollouts.")

    @admin.action(description="Cancel")
    def cancel(self, request, queryset):
        for rollout in queryset:
            services.rollout_cancel(rollout_id=rollout.pk)
        self.message_user(request, f"Cancellation requested for {queryset.count()} rollouts.")


@admin.register(RolloutBatch)
class RolloutBatchAdmin(admin.ModelAdmin):
    list_display = ("id", "suite", "level", "submitter", "model", "created")
    raw_id_fields = ("submitter", "endpoint", "created_by")

    def add_view(self, request, form_url="", extra_context=None):
        return redirect("rollouts:launch")


@admin.register(RolloutEvent)
class RolloutEventAdmin(admin.ModelAdmin):
    list_display = ("rollout", "seq", "kind", "role", "turn", "created")
    list_filter = ("kind",)
    raw_id_fields = ("rollout",)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
