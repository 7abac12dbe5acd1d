from django.db import models
from django.utils import timezone


class QueueStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    IN_PROGRESS = "in_progress", "In progress"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"


class QueueItemQuerySet(models.QuerySet):
    """The worker's side of a queue (task passes and chat replies alike). Only the worker
    changes an item's status after the claim; every change is one UPDATE guarded by the
    status it expects, so a claim or a finish never races another writer."""

    def queued(self):
        return self.filter(status=QueueStatus.QUEUED)

    def running(self):
        return self.filter(status=QueueStatus.IN_PROGRESS)

    def finished(self):
        return self.filter(status__in=[QueueStatus.COMPLETED, QueueStatus.FAILED])

    def claim(self, item_id: str) -> bool:
        """queued → in_progress in one statement; False if another claim (or a cancel) won."""
        return bool(
            self.filter(id=item_id, status=QueueStatus.QUEUED).update(
                status=QueueStatus.IN_PROGRESS, updated_at=timezone.now()
            )
        )

    def finish(self, item_id: str, status: str) -> None:
        """in_progress → completed/failed, forgetting the process (it has ended)."""
        self.filter(id=item_id, status=QueueStatus.IN_PROGRESS).update(
            status=status, pid=None, pgid=None, updated_at=timezone.now()
        )

    def record_process(self, item_id: str, *, pid: int, pgid: int, started_at: float) -> None:
        """The CLI that runs this item, so a restarted worker can kill it if we die."""
        self.filter(id=item_id).update(pid=pid, pgid=pgid, process_started_at=started_at)

    def requeue(self, item_id: str, *, stopped: bool) -> None:
        """After a crash: an interrupted item runs again, unless it was stopped (then failed)."""
        status = QueueStatus.FAILED if stopped else QueueStatus.QUEUED
        self.filter(id=item_id).update(
            status=status, pid=None, pgid=None, updated_at=timezone.now()
        )

    def prune_finished(self, *, before) -> int:
        """Housekeeping: finished items last changed before `before` go; returns how many."""
        return self.finished().filter(updated_at__lt=before).delete()[0]

    def unstopped(self):
        """Running items nobody asked to stop."""
        return self.filter(status=QueueStatus.IN_PROGRESS, stop_requested_at__isnull=True)

    def wanted(self):
        """Running items whose run is still wanted (a kind may add conditions)."""
        return self.unstopped()

    def still_wanted(self, item_ids) -> set[str]:
        """Of these running items, the ones still wanted (and that still exist)."""
        return set(self.wanted().filter(id__in=list(item_ids)).values_list("id", flat=True))


class QueueItem(models.Model):
    """What task queue items and chat queue items share: one run the worker claims, may be
    asked to stop, and records the process of (DESIGN "One run pipeline")."""

    status = models.CharField(
        max_length=12, choices=QueueStatus.choices, default=QueueStatus.QUEUED
    )
    # Set by the server to ask the worker to stop this run (cancel, move, delete).
    stop_requested_at = models.DateTimeField(null=True, blank=True)
    # The running CLI, so a restarted worker can kill survivors of a crashed one.
    pid = models.IntegerField(null=True, blank=True)
    pgid = models.IntegerField(null=True, blank=True)
    process_started_at = models.FloatField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    objects = QueueItemQuerySet.as_manager()

    class Meta:
        abstract = True


class CliHealthStatus(models.TextChoices):
    NOT_CHECKED = "not_checked", "Not checked yet"
    HEALTHY = "healthy", "Healthy"
    UNHEALTHY = "unhealthy", "Unhealthy"
    # A CLI that was healthy timed out twice on the health prompt: probably our own load, so
    # it stays available; a second slow round in a row makes it unhealthy.
    SLOW = "slow", "Slow to answer"


# The marks a health check leaves on a CLI and a successful real run clears.
HEALTH_MARKS = (CliHealthStatus.UNHEALTHY, CliHealthStatus.SLOW)


class CliHealth(models.Model):
    """The worker's latest health check per CLI, stored for the server to read."""

    # One of the four CLIs, or "custom:<agent id>" for a custom-command agent's own check.
    cli_type = models.CharField(primary_key=True, max_length=40)
    status = models.CharField(
        max_length=12, choices=CliHealthStatus.choices, default=CliHealthStatus.NOT_CHECKED
    )
    error = models.TextField(blank=True, default="")
    version = models.CharField(max_length=200, blank=True, default="")
    binary_path = models.TextField(blank=True, default="")
    # What the CLI answered to the last health prompt (the "Test" button shows it).
    answer = models.TextField(blank=True, default="")
    checked_at = models.DateTimeField(null=True, blank=True)
    # Set by the server to ask for a check with the real prompt; the worker clears it once a
    # check that started after it has ended.
    refresh_requested_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "cli_health"

    def __str__(self) -> str:
        return f"{self.cli_type}: {self.status}"

    @property
    def is_available(self) -> bool:
        # DESIGN: "Not checked yet" counts as available so chats aren't blocked at startup.
        return self.status != CliHealthStatus.UNHEALTHY


class RunStatus(models.TextChoices):
    RUNNING = "running", "Running"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"
    STOPPED = "stopped", "Stopped"
    INTERRUPTED = "interrupted", "Interrupted"


class AgentRun(models.Model):
    """One CLI invocation for a task step or a chat reply, with its usage and trace."""

    id = models.CharField(primary_key=True, max_length=21)
    workspace = models.ForeignKey(
        "workspaces.Workspace", on_delete=models.CASCADE, related_name="runs"
    )
    task = models.ForeignKey(
        "tasks.Task", on_delete=models.CASCADE, null=True, blank=True, related_name="runs"
    )
    chat = models.ForeignKey(
        "chats.Chat", on_delete=models.CASCADE, null=True, blank=True, related_name="runs"
    )
    agent_id = models.CharField(max_length=21, null=True, blank=True)
    agent_name = models.CharField(max_length=200)
    cli_type = models.CharField(max_length=10)
    # The model used: what the CLI's stream reported, else the agent's setting ("" = the CLI's
    # default, not reported).
    model = models.CharField(max_length=200, blank=True, default="")
    status = models.CharField(max_length=12, choices=RunStatus.choices, default=RunStatus.RUNNING)
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    last_output_at = models.DateTimeField(null=True, blank=True)
    stalled_at = models.DateTimeField(null=True, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    input_tokens = models.BigIntegerField(null=True, blank=True)
    output_tokens = models.BigIntegerField(null=True, blank=True)
    cost_usd = models.FloatField(null=True, blank=True)
    current_action = models.TextField(blank=True, default="")
    trace_count = models.IntegerField(default=0)

    class Meta:
        db_table = "agent_runs"
        indexes = [
            models.Index(fields=["task", "started_at"]),
            models.Index(fields=["chat", "started_at"]),
            models.Index(fields=["workspace", "started_at"]),
            models.Index(fields=["status"]),
        ]

    def __str__(self) -> str:
        return f"{self.agent_name} {self.cli_type} {self.status}"


class TraceEvent(models.Model):
    id = models.BigAutoField(primary_key=True)
    run = models.ForeignKey(AgentRun, on_delete=models.CASCADE, related_name="traces")
    seq = models.IntegerField()
    kind = models.CharField(max_length=12)
    action_kind = models.CharField(max_length=20, blank=True, default="")
    text = models.TextField()
    detail = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        db_table = "trace_events"
        indexes = [models.Index(fields=["run", "seq"])]

    def __str__(self) -> str:
        return f"{self.kind}: {self.text[:60]}"
