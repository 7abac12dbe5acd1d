from django.contrib import admin

from core.admin_site import SearchLimitedAdmin
from core.models import Marker, OutboxEvent, Setting


@admin.register(Setting)
class SettingAdmin(SearchLimitedAdmin):
    list_display = ("key",)
    search_fields = ("key",)
    # Values can hold secrets (Mailgun key, CLI env): edit them on the settings page instead.
    exclude = ("value",)


@admin.register(OutboxEvent)
class OutboxEventAdmin(SearchLimitedAdmin):
    list_display = ("id", "type", "created_at")
    list_filter = ("type",)
    search_fields = ("type",)
    date_hierarchy = "created_at"


@admin.register(Marker)
class MarkerAdmin(SearchLimitedAdmin):
    list_display = ("name", "created_at")
