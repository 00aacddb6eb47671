from django.contrib import admin

from .models import Evaluation, Hardware, Kernel, Submitter, Task


@admin.register(Task)
class TaskAdmin(admin.ModelAdmin):
    list_display = ("name", "suite", "level", "data_source", "created")
    list_filter = ("suite", "level")
    search_fields = ("name", "description")
    readonly_fields = ("source_hash", "created")


@admin.register(Submitter)
class SubmitterAdmin(admin.ModelAdmin):
    """Members may post under the submitter (with its creator); staff add them here."""

    list_display = ("name", "kind", "created_by", "created")
    list_filter = ("kind",)
    search_fields = ("name", "created_by__username", "members__username")
    raw_id_fields = ("created_by",)
    filter_horizontal = ("members",)


@admin.register(Kernel)
class KernelAdmin(admin.ModelAdmin):
    list_display = ("id", "task", "submitter", "origin", "created")
    list_filter = ("origin", "task__suite")
    list_select_related = ("task", "submitter")
    search_fields = ("task__name", "submitter__name", "source_hash")
    raw_id_fields = ("task", "submitter")
    readonly_fields = ("source_hash", "created")


@admin.register(Hardware)
class HardwareAdmin(admin.ModelAdmin):
    list_display = ("key", "name", "torch", "cuda")
    search_fields = ("key", "name")


@admin.register(Evaluation)
class EvaluationAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "kernel",
        "track",
        "hardware",
        "status",
        "correct",
        "speedup_eager",
        "speedup_compile",
        "needs_review",
        "created",
        "finished",
    )
    list_filter = ("status", "track", "needs_review", "hardware")
    list_select_related = ("kernel__task", "kernel__submitter", "hardware")
    raw_id_fields = ("kernel", "requested_by")
    # the job runner's fields: written by the job that runs the row, never by hand
    readonly_fields = (
        "created",
        "started",
        "heartbeat",
        "finished",
        "worker",
        "attempts",
        "time_limit_s",
        "error_kind",
        "result",
    )
    search_fields = ("kernel__task__name", "kernel__submitter__name")
