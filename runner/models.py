from django.db import models


class CliHealthStatus(models.TextChoices):
    NOT_CHECKED = "not_checked", "Not checked yet"
    HEALTHY = "healthy", "Healthy"
    UNHEALTHY = "unhealthy", "Unhealthy"
    # A CLI that was healthy timed out twice on the health prompt: probably our own load, so
    # it stays available; a second slow round in a row makes it unhealthy.
    SLOW = "slow", "Slow to answer"


class CliHealth(models.Model):
    """The worker's latest health check per CLI, stored for the server to read."""

    cli_type = models.CharField(primary_key=True, max_length=10)
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
