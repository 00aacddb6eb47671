"""Admin: read-mostly; decisions go through the review pages (services), and the audit log is append-only."""

from django.contrib import admin

from .models import AuditEntry, Flag, ReviewCase, ReviewerRule, RewardRelabel, RuleSetVersion, Verdict


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Flag)
class FlagAdmin(admin.ModelAdmin):
    list_display = ("id", "kernel", "source", "family", "created_by", "created")
    list_filter = ("source",)
    raw_id_fields = ("kernel", "evaluation", "rule", "rule_set_version", "created_by")


@admin.register(ReviewCase)
class ReviewCaseAdmin(ReadOnlyAdmin):
    list_display = ("id", "kernel", "status", "family", "required_reviewers", "created", "decided")
    list_filter = ("status", "family")


@admin.register(Verdict)
class VerdictAdmin(ReadOnlyAdmin):
    list_display = ("id", "case", "reviewer", "verdict", "family", "updated")
    list_filter = ("verdict",)


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    list_display = ("created", "actor", "action", "kernel", "case")
    list_filter = ("action",)


@admin.register(RewardRelabel)
class RewardRelabelAdmin(ReadOnlyAdmin):
    list_display = ("evaluation", "kernel", "old_reward", "new_reward", "reason", "created")


@admin.register(ReviewerRule)
class ReviewerRuleAdmin(ReadOnlyAdmin):
    list_display = ("name", "kind", "severity", "track", "status", "created_by", "published")
    list_filter = ("status", "kind")


@admin.register(RuleSetVersion)
class RuleSetVersionAdmin(ReadOnlyAdmin):
    list_display = ("track", "version", "created_by", "created")
