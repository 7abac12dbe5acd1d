from django.db import models
from django.db.models.functions import Now
from django.utils import timezone

from core.fields import choices_check, id_field
from runner.models import QueueItem, QueueStatus

DEFAULT_CHAT_TITLE = "Untitled chat"


class ChatRole(models.TextChoices):
    USER = "user", "User"
    AGENT = "agent", "Agent"
    SYSTEM = "system", "System"


class ChatQuerySet(models.QuerySet):
    def with_lead(self):
        """Annotate the first participant (the chat's agent in a one-agent chat):
        `lead_agent_id` (NULL = Malamar), `lead_agent_name` (NULL = Malamar), `lead_cli_type`
        (its override) and `lead_agent_cli_type` (its agent's CLI)."""
        lead = ChatParticipant.objects.filter(chat_id=models.OuterRef("pk")).in_order()
        return self.annotate(
            lead_agent_id=models.Subquery(lead.values("agent_id")[:1]),
            lead_agent_name=models.Subquery(lead.values("agent__name")[:1]),
            lead_cli_type=models.Subquery(lead.values("cli_type")[:1]),
            lead_agent_cli_type=models.Subquery(lead.values("agent__cli_type")[:1]),
        )


class Chat(models.Model):
    id = id_field()
    workspace = models.ForeignKey(
        "workspaces.Workspace", on_delete=models.CASCADE, related_name="chats"
    )
    title = models.CharField(max_length=200, default=DEFAULT_CHAT_TITLE)
    # When the person last looked at the chat: agent replies after it "need you".
    last_seen_at = models.DateTimeField(default=timezone.now, db_default=Now())
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    objects = ChatQuerySet.as_manager()

    class Meta:
        db_table = "chats"

    def __str__(self) -> str:
        return self.title


class ChatParticipantQuerySet(models.QuerySet):
    def in_order(self):
        return self.order_by("position", "created_at")

    def lead(self):
        """The first participant: the one a one-agent chat's agent and CLI are read from (and
        the one a queue item without a participant falls back to). None for no participant."""
        return self.in_order().select_related("agent").first()


class ChatParticipant(models.Model):
    """An agent taking part in a chat (agent NULL = the Malamar agent; cli_type NULL = follow
    the agent's CLI, or Malamar's default). Every chat has at least one; the first (lowest
    position) is the chat's agent in a one-agent chat. The only record of a chat's agents."""

    id = id_field()
    chat = models.ForeignKey(Chat, on_delete=models.CASCADE, related_name="participants")
    agent = models.ForeignKey(
        "agents.Agent", on_delete=models.CASCADE, null=True, blank=True, related_name="+"
    )
    cli_type = models.CharField(max_length=10, null=True, blank=True)
    enabled = models.BooleanField(default=True)
    position = models.IntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)

    objects = ChatParticipantQuerySet.as_manager()

    class Meta:
        db_table = "chat_participants"
        indexes = [models.Index(fields=["chat", "position"])]

    def __str__(self) -> str:
        return f"{self.chat_id}: {self.agent_id or 'Malamar'}"


class ChatMessage(models.Model):
    id = id_field()
    chat = models.ForeignKey(Chat, on_delete=models.CASCADE, related_name="messages")
    role = models.CharField(max_length=10, choices=ChatRole.choices)
    message = models.TextField()
    actions = models.JSONField(null=True, blank=True)
    # Which agent answered (agent messages; NULL + "Malamar" for the Malamar agent).
    agent_id = models.CharField(max_length=21, null=True, blank=True)
    agent_name = models.CharField(max_length=200, blank=True, default="")
    # Left out of what agents see next when False (system messages are always included).
    included = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "chat_messages"
        indexes = [models.Index(fields=["chat", "created_at"])]
        constraints = [choices_check("role", ChatRole.choices)]

    def __str__(self) -> str:
        return self.message[:60]


class ChatQueueItem(QueueItem):
    id = id_field()
    chat = models.ForeignKey(Chat, on_delete=models.CASCADE, related_name="queue_items")
    workspace = models.ForeignKey(
        "workspaces.Workspace", on_delete=models.CASCADE, related_name="+"
    )
    participant = models.ForeignKey(
        ChatParticipant, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        db_table = "chat_queue"
        indexes = [models.Index(fields=["status", "created_at"])]
        constraints = [choices_check("status", QueueStatus.choices)]

    def __str__(self) -> str:
        return f"{self.chat_id} {self.status}"
