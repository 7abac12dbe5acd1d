from django.db import models
from django.utils import timezone

from core.fields import choices_check, id_field


class CliType(models.TextChoices):
    CLAUDE = "claude", "Claude Code"
    GEMINI = "gemini", "Gemini CLI"
    CODEX = "codex", "Codex CLI"
    OPENCODE = "opencode", "OpenCode"


# Spec: the first healthy CLI in this order is the default for new agents and for Malamar.
CLI_PREFERENCE = (CliType.CLAUDE, CliType.CODEX, CliType.GEMINI, CliType.OPENCODE)


class AgentQuerySet(models.QuerySet):
    def in_order(self):
        return self.order_by("order")

    def next_after(self, workspace_id: str, order: int | None):
        """The agent with the smallest order greater than `order` (None = the first agent)."""
        agents = self.filter(workspace_id=workspace_id)
        if order is not None:
            agents = agents.filter(order__gt=order)
        return agents.in_order().first()


class Agent(models.Model):
    id = id_field()
    workspace = models.ForeignKey(
        "workspaces.Workspace", on_delete=models.CASCADE, related_name="agents"
    )
    name = models.CharField(max_length=100)
    instruction = models.TextField()
    cli_type = models.CharField(max_length=10, choices=CliType.choices, default=CliType.CLAUDE)
    # Used while `cli_type` is out of quota; "" = wait for it (DESIGN "Usage limits").
    fallback_cli_type = models.CharField(
        max_length=10, choices=CliType.choices, blank=True, default=""
    )
    order = models.IntegerField()
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    objects = AgentQuerySet.as_manager()

    class Meta:
        db_table = "agents"
        constraints = [
            models.UniqueConstraint(fields=["workspace", "name"], name="agent_name_unique"),
            models.UniqueConstraint(fields=["workspace", "order"], name="agent_order_unique"),
            choices_check("cli_type", CliType.choices),
        ]

    def __str__(self) -> str:
        return self.name
