from django.contrib import admin

from core.admin_site import SearchLimitedAdmin
from tasks.models import Task, TaskComment, TaskDependency, TaskLog, TaskQueueItem


@admin.register(Task)
class TaskAdmin(SearchLimitedAdmin):
    list_display = ("summary", "workspace", "status", "is_priority", "failure_streak", "updated_at")
    list_filter = ("status", "is_priority", "workspace")
    search_fields = ("summary", "description", "id")
    readonly_fields = ("id", "created_at", "updated_at")


@admin.register(TaskComment)
class TaskCommentAdmin(SearchLimitedAdmin):
    list_display = ("task", "kind", "user_id", "agent_id", "created_at")
    list_filter = ("kind", "workspace")
    search_fields = ("content", "task__summary")


@admin.register(TaskLog)
class TaskLogAdmin(SearchLimitedAdmin):
    list_display = ("task", "event_type", "actor_type", "created_at")
    list_filter = ("event_type", "actor_type")
    search_fields = ("task__summary", "task__id")


@admin.register(TaskQueueItem)
class TaskQueueItemAdmin(SearchLimitedAdmin):
    list_display = ("task", "status", "is_priority", "pid", "stop_requested_at", "updated_at")
    list_filter = ("status", "is_priority")
    search_fields = ("task__summary", "task__id")


@admin.register(TaskDependency)
class TaskDependencyAdmin(SearchLimitedAdmin):
    list_display = ("task", "blocker", "workspace", "created_at")
    list_select_related = ("task", "blocker", "workspace")
    search_fields = ("task__summary", "blocker__summary", "task__id", "blocker__id")
    raw_id_fields = ("task", "blocker")
