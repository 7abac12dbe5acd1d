from django.db import models
from django.utils import timezone

from core.fields import choices_check, id_field
from runner.clis import AGENT_CLI_CHOICES, CUSTOM_CLI, CliType, custom_health_key


class CustomOutput(models.TextChoices):
    FILE = "file", "Writes the output file"
    STDOUT = "stdout", "Prints the JSON result on stdout"


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
    cli_type = models.CharField(max_length=10, choices=AGENT_CLI_CHOICES, default=CliType.CLAUDE)
    # The agent's own CLI settings (used when a run uses this agent's CLI, not a chat override).
    model = models.CharField(max_length=200, blank=True, default="")  # "" = the CLI's default
    reasoning_effort = models.CharField(max_length=20, blank=True, default="")
    extra_args = models.JSONField(default=list, blank=True)  # list of strings, no shell
    # cli_type "custom": the command to run (the custom CLI class in runner.clis).
    custom_binary = models.TextField(blank=True, default="")
    custom_args = models.TextField(blank=True, default="")  # the argument template
    custom_env = models.JSONField(default=dict, blank=True)
    custom_output = models.CharField(
        max_length=10, choices=CustomOutput.choices, default=CustomOutput.FILE
    )
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
            choices_check("cli_type", AGENT_CLI_CHOICES),
            choices_check("custom_output", CustomOutput.choices),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def is_custom(self) -> bool:
        return self.cli_type == CUSTOM_CLI

    @property
    def health_key(self) -> str:
        """Its row in the CLI health table: the CLI's, or its own for a custom command."""
        return custom_health_key(self.id) if self.is_custom else self.cli_type
