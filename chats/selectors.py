"""Reads for chats: lists, details, previews, and which CLI would answer a chat.

Lists are built from annotations and subqueries, so their query count does not grow with
the number of chats.
"""

import re

from django.db.models import Exists, F, JSONField, OuterRef, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce

from chats.models import Chat, ChatMessage, ChatQueueItem, ChatRole
from runner.selectors import first_available_cli
from tasks.models import QueueStatus

MALAMAR_NAME = "Malamar"
PREVIEW_LENGTH = 140
# A chat is busy from the moment a message is queued until the worker finishes (or stops) it;
# while busy, a new message is refused and the UI shows the stop button.
ACTIVE_STATUSES = (QueueStatus.QUEUED, QueueStatus.IN_PROGRESS)

# How an agent's actions read in a list preview when its reply had no text.
ACTION_LABELS = {
    "create_agent": ("Created agent", "name"),
    "update_agent": ("Updated agent", "name"),
    "delete_agent": ("Deleted an agent", None),
    "reorder_agents": ("Reordered agents", None),
    "update_workspace": ("Updated workspace settings", None),
    "rename_chat": ("Renamed the chat", "title"),
    "create_task": ("Created task", "summary"),
}


def action_summary(actions) -> str:
    """`[{"type": "create_agent", "name": "Reviewer"}]` → `Created agent "Reviewer"`."""
    parts = []
    for action in actions if isinstance(actions, list) else []:
        if not isinstance(action, dict):
            continue
        kind = str(action.get("type") or "action")
        label, key = ACTION_LABELS.get(kind, (kind.replace("_", " ").capitalize(), None))
        detail = action.get(key) if key else None
        parts.append(f'{label} "{detail}"' if isinstance(detail, str) and detail else label)
    return "; ".join(parts)


def message_preview(role: str | None, text: str | None, actions=None) -> str:
    """One line for the chat list: the text, or for an agent's silent reply its actions."""
    text = re.sub(r"\s+", " ", text or "").strip()
    if not text and role == ChatRole.AGENT:
        text = action_summary(actions)
    if len(text) > PREVIEW_LENGTH:
        text = text[: PREVIEW_LENGTH - 1].rstrip() + "…"
    return text


def _with_summary(chats: QuerySet) -> QuerySet:
    last = ChatMessage.objects.filter(chat_id=OuterRef("pk")).order_by("-created_at", "-id")
    active = ChatQueueItem.objects.filter(chat_id=OuterRef("pk"), status__in=ACTIVE_STATUSES)
    return chats.annotate(
        agent_name=Coalesce(F("agent__name"), Value(MALAMAR_NAME)),
        agent_cli_type=F("agent__cli_type"),
        last_message_at=Subquery(last.values("created_at")[:1]),
        last_message_role=Subquery(last.values("role")[:1]),
        last_message_text=Subquery(last.values("message")[:1]),
        last_message_actions=Subquery(last.values("actions")[:1], output_field=JSONField()),
        is_processing=Exists(active),
    ).annotate(last_activity_at=Coalesce(F("last_message_at"), F("created_at")))


def _finish(chat: Chat, malamar_cli: str | None) -> Chat:
    chat.effective_cli_type = chat.cli_type or chat.agent_cli_type or malamar_cli
    chat.last_message_preview = message_preview(
        chat.last_message_role, chat.last_message_text, chat.last_message_actions
    )
    return chat


def _malamar_cli_if_needed(chats: list[Chat]) -> str | None:
    if any(not chat.cli_type and not chat.agent_id for chat in chats):
        return first_available_cli()
    return None


def chat_cli_type(chat: Chat) -> str | None:
    """The CLI that would answer this chat: the override, else the agent's CLI, else (Malamar)
    the first available CLI (Claude → Codex → Gemini → OpenCode). None: no CLI available."""
    if chat.cli_type:
        return chat.cli_type
    if chat.agent_id:
        return chat.agent.cli_type
    return first_available_cli()


def participant_cli_type(participant) -> str | None:
    """A participant's CLI: its override, else its agent's CLI, else (Malamar) the first
    available one."""
    if participant.cli_type:
        return participant.cli_type
    if participant.agent_id:
        return participant.agent.cli_type
    return first_available_cli()


def chat_participants(chat_id: str) -> list:
    from chats.models import ChatParticipant

    participants = list(
        ChatParticipant.objects.filter(chat_id=chat_id).select_related("agent").order_by("position")
    )
    for participant in participants:
        participant.agent_name = participant.agent.name if participant.agent else MALAMAR_NAME
        participant.effective_cli_type = participant_cli_type(participant)
    return participants


def chat_is_busy(chat_id: str) -> bool:
    return ChatQueueItem.objects.filter(chat_id=chat_id, status__in=ACTIVE_STATUSES).exists()


def chats_for_workspace(workspace_id: str, q: str = "") -> list[Chat]:
    """The workspace's chats, most recently active first (latest message, else creation)."""
    chats = _with_summary(Chat.objects.filter(workspace_id=workspace_id))
    query = (q or "").strip()
    if query:
        chats = chats.filter(title__icontains=query)
    chats = list(chats.order_by("-last_activity_at", "-created_at", "-id"))
    malamar_cli = _malamar_cli_if_needed(chats)
    return [_finish(chat, malamar_cli) for chat in chats]


def chat_summary(chat_id: str) -> Chat | None:
    chat = _with_summary(Chat.objects.filter(id=chat_id)).first()
    if chat is None:
        return None
    return _finish(chat, _malamar_cli_if_needed([chat]))


def chat_messages(chat_id: str) -> list[ChatMessage]:
    """Oldest first."""
    return list(ChatMessage.objects.filter(chat_id=chat_id).order_by("created_at", "id"))


def chat_detail(chat_id: str) -> Chat | None:
    """The chat's summary fields plus `message_list` (oldest first)."""
    chat = chat_summary(chat_id)
    if chat is not None:
        chat.message_list = chat_messages(chat_id)
        chat.participant_list = chat_participants(chat_id)
    return chat
