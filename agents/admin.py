from django.contrib import admin

from agents.models import Agent
from core.admin_site import SearchLimitedAdmin


@admin.register(Agent)
class AgentAdmin(SearchLimitedAdmin):
    list_display = ("name", "workspace", "order", "cli_type", "updated_at")
    list_filter = ("cli_type", "workspace")
    search_fields = ("name", "instruction", "id")
    ordering = ("workspace", "order")
    readonly_fields = ("id", "created_at", "updated_at")
