"""Reads for chats: lists, details, previews, and which CLI would answer a chat.

Lists are built from annotations and subqueries, so their query count does not grow with
the number of chats.
"""

import re

from django.db.models import Exists, F, JSONField, OuterRef, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce

from agents.selectors import agents_for_workspace, cli_health_by_type, cli_options
from chats.cli_notes import no_cli_reason
from chats.models import Chat, ChatMessage, ChatParticipant, ChatQueueItem, ChatRole
from core.fields import icontains_search
from runner.clis import CUSTOM_CLI
from runner.models import QueueStatus
from runner.selectors import (
    custom_cli_health,
    first_available_cli,
    run_timelines,
)
from workspaces.links import workspace_tab_url
from workspaces.models import Workspace

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
    "review_task": ("Reviewed a task", "verdict"),
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
    if role == ChatRole.SYSTEM and text.startswith(UPLOAD_PREFIX):
        text = "Uploaded " + text[len(UPLOAD_PREFIX) :].rsplit("/", 1)[-1]
    if not text and role == ChatRole.AGENT:
        text = action_summary(actions)
    if len(text) > PREVIEW_LENGTH:
        text = text[: PREVIEW_LENGTH - 1].rstrip() + "…"
    return text


def _with_summary(chats: QuerySet) -> QuerySet:
    last = ChatMessage.objects.filter(chat_id=OuterRef("pk")).order_by("-created_at", "-id")
    active = ChatQueueItem.objects.filter(chat_id=OuterRef("pk"), status__in=ACTIVE_STATUSES)
    return (
        chats.with_lead()
        .annotate(
            agent_name=Coalesce(F("lead_agent_name"), Value(MALAMAR_NAME)),
            last_message_at=Subquery(last.values("created_at")[:1]),
            last_message_role=Subquery(last.values("role")[:1]),
            last_message_text=Subquery(last.values("message")[:1]),
            last_message_actions=Subquery(last.values("actions")[:1], output_field=JSONField()),
            is_processing=Exists(active),
        )
        .annotate(last_activity_at=Coalesce(F("last_message_at"), F("created_at")))
    )


def _finish(chat: Chat, malamar_cli: str | None) -> Chat:
    """`with_lead` read: `agent_id` / `cli_type` (the first participant's, as the API shows
    them) and `effective_cli_type`."""
    chat.agent_id, chat.cli_type = chat.lead_agent_id, chat.lead_cli_type
    chat.effective_cli_type = chat.lead_cli_type or chat.lead_agent_cli_type or malamar_cli
    chat.last_message_preview = message_preview(
        chat.last_message_role, chat.last_message_text, chat.last_message_actions
    )
    return chat


def _malamar_cli_if_needed(chats: list[Chat]) -> str | None:
    if any(not chat.lead_cli_type and not chat.lead_agent_id for chat in chats):
        return first_available_cli()
    return None


def participant_cli_type(participant) -> str | None:
    """A participant's CLI: its override, else its agent's CLI, else (Malamar) the first
    available one."""
    if participant.cli_type:
        return participant.cli_type
    if participant.agent_id:
        return participant.agent.cli_type
    return first_available_cli()


def chat_participants(chat_id: str) -> list:
    participants = list(
        ChatParticipant.objects.filter(chat_id=chat_id).select_related("agent").in_order()
    )
    for participant in participants:
        participant.agent_name = participant.agent.name if participant.agent else MALAMAR_NAME
        participant.effective_cli_type = participant_cli_type(participant)
    return participants


def chats_for_workspace(workspace_id: str, q: str = "") -> list[Chat]:
    """The workspace's chats, most recently active first (latest message, else creation)."""
    chats = _with_summary(Chat.objects.filter(workspace_id=workspace_id))
    chats = icontains_search(chats, "title", q)
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


# --- pages ------------------------------------------------------------------------------
# What the Chat tab and the chat popup show, on top of the summaries above.

# System notes that only record what happened; every other system message reports a problem.
SYSTEM_INFO_PREFIXES = ("Switched from ", "Stopped by user")
SYSTEM_INFO_SUFFIXES = (" joined the chat", " left the chat")
UPLOAD_PREFIX = "User has uploaded "


def system_kind(text: str) -> str:
    """ "upload", "info" or "error" for a system message (errors are tinted red)."""
    text = text or ""
    if text.startswith(UPLOAD_PREFIX):
        return "upload"
    if text.startswith(SYSTEM_INFO_PREFIXES) or text.rstrip().endswith(SYSTEM_INFO_SUFFIXES):
        return "info"
    return "error"


def action_cards(actions, workspace_id: str) -> list[dict]:
    """An agent message's stored actions as cards: label, detail, outcome and a link."""
    cards = []
    for action in actions if isinstance(actions, list) else []:
        if not isinstance(action, dict):
            continue
        kind = str(action.get("type") or "action")
        label, key = ACTION_LABELS.get(kind, (kind.replace("_", " ").capitalize(), None))
        detail = action.get(key) if key else None
        result = action.get("result") or "ok"
        card = {
            "type": kind,
            "label": label,
            "detail": detail if isinstance(detail, str) else "",
            "result": result,
            "error": action.get("error") or "",
            "href": "",
            "link_label": "",
        }
        if result == "ok" and kind == "create_task" and action.get("task_id"):
            card["href"] = workspace_tab_url(workspace_id, "tasks", task=action["task_id"])
            card["link_label"] = "Open task"
            card["task_id"] = action["task_id"]
        elif result == "ok" and kind in ("create_agent", "update_agent", "reorder_agents"):
            card["href"] = workspace_tab_url(workspace_id, "agents")
            card["link_label"] = "View agents"
        cards.append(card)
    return cards


def created_tasks(actions) -> list[dict]:
    """`[{"task_id", "summary"}]` for each task an agent message's actions created."""
    return [
        {"task_id": a["task_id"], "summary": str(a.get("summary") or "")}
        for a in (actions if isinstance(actions, list) else [])
        if isinstance(a, dict)
        and a.get("type") == "create_task"
        and a.get("result", "ok") == "ok"
        and a.get("task_id")
    ]


_MARKDOWN_MARKS = (
    (re.compile(r"\*\*(.+?)\*\*"), r"\1"),
    (re.compile(r"(?<!\w)__(.+?)__(?!\w)"), r"\1"),
    (re.compile(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])"), r"\1"),
    (re.compile(r"`([^`]+)`"), r"\1"),
    (re.compile(r"!?\[([^\]]*)\]\([^)]*\)"), r"\1"),
    (re.compile(r"(^|\s)#{1,6}\s+"), r"\1"),
)


def plain_preview(text: str) -> str:
    """A list preview without the most common markdown marks (`**bold**` → `bold`)."""
    for pattern, replacement in _MARKDOWN_MARKS:
        text = pattern.sub(replacement, text)
    return text


def chat_list_items(workspace_id: str, q: str = "") -> list[Chat]:
    """The Chat tab's list: `chats_for_workspace` plus `agent_names` (every participant, in
    order) in one more query."""
    chats = chats_for_workspace(workspace_id, q)
    names: dict[str, list[str]] = {}
    rows = (
        ChatParticipant.objects.filter(chat_id__in=[chat.id for chat in chats])
        .order_by("chat_id", "position", "created_at")
        .values_list("chat_id", "agent__name")
    )
    for chat_id, name in rows:
        names.setdefault(chat_id, []).append(name or MALAMAR_NAME)
    for chat in chats:
        chat.agent_names = names.get(chat.id, [])
        chat.last_message_preview = plain_preview(chat.last_message_preview)
    return chats


def chat_runs(chat: Chat):
    """The chat's running runs for the live trace (`runner.selectors.run_timelines`: a list
    that also tells activity.js where to add runs that start later)."""
    return run_timelines(chat=chat, running_only=True)


def chat_popup(chat_id: str) -> Chat | None:
    """Everything the chat popup shows: the detail plus, on the chat, `is_busy`,
    `is_stopping`, `is_solo`, `blocked` (the "No CLI available" text or ""), `answering`
    (participants whose run is pending) and `lead` (the first participant); on each
    participant `cli` (health dict) and `cli_ok`; on each message `kind` and `cards`."""
    chat = chat_detail(chat_id)
    if chat is None:
        return None
    health = chat.cli_health = cli_health_by_type()  # chat_agent_options reads it too
    active = list(
        ChatQueueItem.objects.filter(chat_id=chat_id, status__in=ACTIVE_STATUSES).values(
            "participant_id", "stop_requested_at"
        )
    )
    chat.is_busy = bool(active)
    chat.is_stopping = chat.is_busy and all(item["stop_requested_at"] for item in active)
    answering_ids = {item["participant_id"] for item in active if not item["stop_requested_at"]}
    malamar_cli = first_available_cli()
    custom = custom_cli_health(
        [p.agent_id for p in chat.participant_list if p.agent_id and p.agent.is_custom]
    )
    for participant in chat.participant_list:
        own = custom.get(participant.agent_id)  # a custom-command agent's own check
        effective = participant.effective_cli_type
        participant.cli = own if effective == CUSTOM_CLI else health.get(effective)
        default_cli = participant.agent.cli_type if participant.agent_id else malamar_cli
        participant.default_cli = own if default_cli == CUSTOM_CLI else health.get(default_cli)
        participant.cli_ok = bool(participant.cli and participant.cli["available"])
        participant.is_answering = participant.id in answering_ids
    enabled = [p for p in chat.participant_list if p.enabled]
    chat.is_solo = not enabled
    chat.blocked = ""
    if enabled and not any(p.cli_ok for p in enabled):
        broken = sorted({p.cli["name"] for p in enabled if p.cli})
        chat.blocked = no_cli_reason(broken)
    chat.answering = [p for p in chat.participant_list if p.is_answering]
    chat.lead = chat.participant_list[0] if chat.participant_list else None
    chat.is_group = len(chat.participant_list) > 1
    for message in chat.message_list:
        message.kind = system_kind(message.message) if message.role == ChatRole.SYSTEM else ""
        if message.kind == "upload":
            message.upload_path = message.message[len(UPLOAD_PREFIX) :].strip()
            message.upload_name = message.upload_path.rsplit("/", 1)[-1]
        message.cards = action_cards(message.actions, chat.workspace_id)
    return chat


def chat_agent_options(workspace_id: str, chat: Chat | None = None) -> dict:
    """Choices for the popup: `lead` (agents the first participant may become: Malamar and
    every agent not already another participant) and `addable` (not yet in the chat), each
    `{"id": "" for Malamar, "name", "cli"}`; `clis` (the four CLIs with health)."""
    workspace = Workspace(id=workspace_id)
    health = getattr(chat, "cli_health", None) or cli_health_by_type()  # read once (chat_popup)
    everyone = [{"id": "", "name": MALAMAR_NAME, "cli": None, "is_malamar": True}] + [
        {"id": agent.id, "name": agent.name, "cli": agent.cli, "is_malamar": False}
        for agent in agents_for_workspace(workspace, health)
    ]
    taken = [(p.agent_id or "") for p in getattr(chat, "participant_list", [])]
    others = set(taken[1:])
    return {
        "lead": [option for option in everyone if option["id"] not in others],
        "addable": [option for option in everyone if option["id"] not in taken],
        "everyone": everyone,
        "clis": cli_options(health),
    }


# --- "Needs you" ----------------------------------------------------------------------------


def _unseen_replies():
    latest = ChatMessage.objects.filter(chat_id=OuterRef("pk"), role=ChatRole.AGENT).order_by(
        "-created_at", "-id"
    )
    return Chat.objects.annotate(
        last_reply_at=Subquery(latest.values("created_at")[:1]),
    ).filter(last_reply_at__gt=F("last_seen_at"))


def chats_with_unseen_replies(limit: int) -> list[Chat]:
    """Chats in every workspace whose agent replied since the person last looked, newest reply
    first, with `last_reply_at`, `last_reply_agent` and `last_reply_preview`. One query."""
    latest = ChatMessage.objects.filter(chat_id=OuterRef("pk"), role=ChatRole.AGENT).order_by(
        "-created_at", "-id"
    )
    chats = list(
        _unseen_replies()
        .annotate(
            last_reply_agent=Subquery(latest.values("agent_name")[:1]),
            last_reply_text=Subquery(latest.values("message")[:1]),
        )
        .select_related("workspace")
        .order_by("-last_reply_at", "id")[:limit]
    )
    for chat in chats:
        chat.last_reply_agent = chat.last_reply_agent or MALAMAR_NAME
        chat.last_reply_preview = message_preview("agent", chat.last_reply_text)
    return chats


def unseen_reply_count() -> int:
    return _unseen_replies().count()
