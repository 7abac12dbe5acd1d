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


class Isolation(models.TextChoices):
    """Where a task's agents work in a static repository: in it (none), or each task in a git
    worktree of its own on a branch of its own (branch)."""

    NONE = "none", "None"
    BRANCH = "branch", "Branch per task"


PARALLEL_TASKS_MAX = 16


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
    isolation = models.CharField(max_length=10, choices=Isolation.choices, default=Isolation.NONE)
    # Branch per task: the branch new task branches start from and merge into ("" = the
    # repository's current branch, read when a task starts).
    base_branch = models.CharField(max_length=200, blank=True, default="")
    # Run once in each new worktree (argv by shlex.split, no shell), e.g. "npm ci".
    setup_command = models.TextField(blank=True, default="")
    # Checks (issue 30): the project's own commands, run in order before a task may go In
    # Review: [{"name", "command", "timeout_minutes"}] (workspaces.checks cleans them).
    checks = models.JSONField(default=list, blank=True, db_default=[])
    # Failed rounds of checks in a row before the task goes In Review anyway ("Checks failing").
    checks_attempts = models.PositiveIntegerField(default=3, db_default=3)
    # Branch per task: keep a task's branch once it is merged (its worktree goes either way).
    keep_merged_branches = models.BooleanField(default=False, db_default=False)
    # How many tasks run at once (more than 1 only with isolation).
    parallel_tasks = models.PositiveIntegerField(default=1)
    # Done tasks are kept unless the person turns this on (issue 29).
    auto_delete_done_tasks = models.BooleanField(default=False)
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
            choices_check("isolation", Isolation.choices),
            choices_check("notify_on_error", NotifySetting.choices),
            choices_check("notify_on_in_review", NotifySetting.choices),
        ]

    def __str__(self) -> str:
        return self.title

    @property
    def isolated(self) -> bool:
        return (
            self.isolation == Isolation.BRANCH
            and self.working_directory_mode == WorkingDirectoryMode.STATIC
        )

    @property
    def parallel_limit(self) -> int:
        """Tasks that may run at once: the setting with isolation, else one (the spec's rule)."""
        return max(1, self.parallel_tasks) if self.isolated else 1
