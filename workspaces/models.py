from django.db import models
from django.utils import timezone

from core.fields import choices_check, icontains_search, id_field

RETENTION_DAYS_MAX = 36_500  # 100 years
STALL_KILL_MINUTES_MAX = 525_600  # a year


class WorkingDirectoryMode(models.TextChoices):
    STATIC = "static", "Static directory"
    TEMP = "temp", "Temp folder"


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
    notify_on_error = models.BooleanField(default=True)
    notify_on_in_review = models.BooleanField(default=True)
    # Kill a run that printed nothing for this long (minutes; 0 = never, only warn).
    stall_kill_minutes = models.FloatField(default=0)
    last_activity_at = models.DateTimeField(default=timezone.now)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    objects = WorkspaceQuerySet.as_manager()

    class Meta:
        db_table = "workspaces"
        constraints = [choices_check("working_directory_mode", WorkingDirectoryMode.choices)]

    def __str__(self) -> str:
        return self.title
