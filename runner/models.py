from django.db import models


class CliHealthStatus(models.TextChoices):
    NOT_CHECKED = "not_checked", "Not checked yet"
    HEALTHY = "healthy", "Healthy"
    UNHEALTHY = "unhealthy", "Unhealthy"


class CliHealth(models.Model):
    """The worker's latest health check per CLI, stored for the server to read."""

    cli_type = models.CharField(primary_key=True, max_length=10)
    status = models.CharField(
        max_length=12, choices=CliHealthStatus.choices, default=CliHealthStatus.NOT_CHECKED
    )
    error = models.TextField(blank=True, default="")
    version = models.CharField(max_length=200, blank=True, default="")
    binary_path = models.TextField(blank=True, default="")
    checked_at = models.DateTimeField(null=True, blank=True)
    refresh_requested_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "cli_health"

    def __str__(self) -> str:
        return f"{self.cli_type}: {self.status}"

    @property
    def is_available(self) -> bool:
        # DESIGN: "Not checked yet" counts as available so chats aren't blocked at startup.
        return self.status != CliHealthStatus.UNHEALTHY
