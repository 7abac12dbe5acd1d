from django.db import models
from django.utils import timezone

from core.fields import choices_check, icontains_search, id_field

# Beyond these a date computation overflows (the daily cleanup) or the value means "never".
RETENTION_DAYS_MAX = 36_500  # 100 years
STALL_KILL_MINUTES_MAX = 525_600  # a year

# The core Marker set when the user dismisses the home page's first-run checklist.
FIRST_RUN_DISMISSED = "first_run_checklist_dismissed"


class WorkingDirectoryMode(models.TextChoices):
    STATIC = "static", "Static directory"
    TEMP = "temp", "Temp folder"


class NotifySetting(models.TextChoices):
    """A workspace's email/webhook switch: follow the global setting, or its own on/off."""

    INHERIT = "inherit", "Inherit"
    ON = "on", "On"
    OFF = "off", "Off"


class WorkspaceQuerySet(models.QuerySet):
    def search(self, query: str | None):
        return icontains_search(self, "title", query)

    def by_activity(self):
        return self.order_by("-last_activity_at", "-created_at")


class Workspace(models.Model):
    id = id_field()
    title = models.CharField(max_length=200)
    description = models.TextField(blank=True, default="")
    working_directory_mode = models.CharField(
        max_length=10, choices=WorkingDirectoryMode.choices, default=WorkingDirectoryMode.TEMP
    )
    working_directory_path = models.TextField(null=True, blank=True)
    auto_delete_done_tasks = models.BooleanField(default=True)
    retention_days = models.PositiveIntegerField(default=7)
    # "inherit" follows the global setting of the same name (workspaces.selectors.notify_effective).
    notify_on_error = models.CharField(
        max_length=7, choices=NotifySetting.choices, default=NotifySetting.INHERIT
    )
    notify_on_in_review = models.CharField(
        max_length=7, choices=NotifySetting.choices, default=NotifySetting.INHERIT
    )
    # Kill a run that printed nothing for this long (minutes; 0 = never, only warn).
    stall_kill_minutes = models.FloatField(default=0)
    # "Give agents Malamar's tools": runs get the `malamar mcp` server for this workspace.
    mcp_tools_enabled = models.BooleanField(default=False)
    last_activity_at = models.DateTimeField(default=timezone.now)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    objects = WorkspaceQuerySet.as_manager()

    class Meta:
        db_table = "workspaces"
        constraints = [
            choices_check("working_directory_mode", WorkingDirectoryMode.choices),
            choices_check("notify_on_error", NotifySetting.choices),
            choices_check("notify_on_in_review", NotifySetting.choices),
        ]

    def __str__(self) -> str:
        return self.title
