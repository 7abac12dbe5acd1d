from django.contrib import admin

from core.admin_site import SearchLimitedAdmin
from workspaces.models import Workspace


@admin.register(Workspace)
class WorkspaceAdmin(SearchLimitedAdmin):
    list_display = ("title", "working_directory_mode", "last_activity_at", "created_at")
    list_filter = ("working_directory_mode", "auto_delete_done_tasks")
    search_fields = ("title", "description", "id")
    readonly_fields = ("id", "created_at", "updated_at", "last_activity_at")
