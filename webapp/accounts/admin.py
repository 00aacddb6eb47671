from django.contrib import admin

from .models import ApiToken


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ("prefix", "user", "name", "created", "last_used", "revoked")
    list_filter = ("revoked",)
    readonly_fields = ("key_hash", "prefix", "created", "last_used")
    search_fields = ("user__username", "name", "prefix")
