"""A workspace as one versioned JSON document: what `malamar export` writes and `malamar import`
reads (malamar_site.transfer_format checks a file; malamar_site.services.workspace_import writes).

Version 1 holds the settings, the agents, the tasks with their comments and activity logs, the
dependencies between tasks and, when asked, the chats (participants and messages) and their
attachment files (base64). Ids in the file are the exporting instance's; an import gives every
row a new id and remaps every reference. Runs, traces, usage and queues are not exported.
"""

import base64
import json
from datetime import datetime

from django.utils import timezone
from django.utils.text import slugify

from agents.models import Agent
from chats.attachments import attachments_dir
from chats.models import Chat, ChatMessage, ChatParticipant
from core.fields import own_fields
from core.version import VERSION
from tasks.models import Task, TaskComment, TaskDependency, TaskLog
from workspaces.models import Workspace

FORMAT = "malamar.workspace"
FORMAT_VERSION = 1
# Workspace settings carried by the file: every field of the model but its id and times
# (settings other changes add are carried too).
SETTING_FIELDS = own_fields(Workspace, skip=("id", "created_at", "updated_at", "last_activity_at"))


# --- export -----------------------------------------------------------------------------------


def _time(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def _row(obj, fields: tuple[str, ...]) -> dict:
    row = {}
    for name in fields:
        value = getattr(obj, name)
        row[name] = _time(value) if isinstance(value, datetime) else value
    return row


AGENT_FIELDS = own_fields(Agent)  # model, CLI options… included
# Agent fields holding environment variables for a CLI (API keys…): a file keeps their names and
# leaves their values empty (the user fills them in after an import). A clone copies them.
SECRET_AGENT_FIELDS = ("custom_env",)


def without_secrets(agent_row: dict) -> dict:
    for name in SECRET_AGENT_FIELDS:
        value = agent_row.get(name)
        if isinstance(value, dict):
            agent_row[name] = dict.fromkeys(value, "")
    return agent_row


TASK_FIELDS = (
    "id",
    "summary",
    "description",
    "status",
    "is_priority",
    "created_at",
    "updated_at",
)
COMMENT_FIELDS = (
    "id",
    "user_id",
    "agent_id",
    "content",
    "kind",
    "created_at",
    "updated_at",
)
LOG_FIELDS = ("id", "event_type", "actor_type", "actor_id", "metadata", "created_at")
CHAT_FIELDS = ("id", "title", "created_at", "updated_at")  # its agents: the participants
PARTICIPANT_FIELDS = ("agent_id", "cli_type", "enabled", "position", "created_at")
MESSAGE_FIELDS = (
    "role",
    "message",
    "actions",
    "agent_id",
    "agent_name",
    "included",
    "created_at",
)


def _tasks(workspace: Workspace) -> list[dict]:
    tasks = list(Task.objects.filter(workspace=workspace).order_by("created_at", "id"))
    comments: dict[str, list] = {t.id: [] for t in tasks}
    logs: dict[str, list] = {t.id: [] for t in tasks}
    oldest_first = ("created_at", "id")
    for comment in TaskComment.objects.filter(workspace=workspace).order_by(*oldest_first):
        comments[comment.task_id].append(_row(comment, COMMENT_FIELDS))
    for log in TaskLog.objects.filter(workspace=workspace).order_by(*oldest_first):
        logs[log.task_id].append(_row(log, LOG_FIELDS))
    return [
        {**_row(task, TASK_FIELDS), "comments": comments[task.id], "logs": logs[task.id]}
        for task in tasks
    ]


def _attachments(chat: Chat) -> list[dict]:
    folder = attachments_dir(chat.id)
    if not folder.is_dir():
        return []
    return [
        {"name": path.name, "content_base64": base64.b64encode(path.read_bytes()).decode()}
        for path in sorted(folder.iterdir())
        if path.is_file() and not path.is_symlink()
    ]


def _chats(workspace: Workspace, *, attachments: bool) -> list[dict]:
    chats = []
    for chat in Chat.objects.filter(workspace=workspace).order_by("created_at", "id"):
        participants = ChatParticipant.objects.filter(chat=chat).order_by("position", "id")
        messages = ChatMessage.objects.filter(chat=chat).order_by("created_at", "id")
        row = {
            **_row(chat, CHAT_FIELDS),
            "participants": [_row(p, PARTICIPANT_FIELDS) for p in participants],
            "messages": [_row(m, MESSAGE_FIELDS) for m in messages],
        }
        if attachments:
            row["attachments_dir"] = str(attachments_dir(chat.id))
            row["attachments"] = _attachments(chat)
        chats.append(row)
    return chats


def export_document(
    workspace: Workspace, *, chats: bool = False, attachments: bool = False, tasks: bool = True
) -> dict:
    """The workspace as a version-1 document (`attachments` implies `chats`)."""
    chats = chats or attachments
    links = TaskDependency.objects.filter(workspace=workspace).order_by(
        "task__created_at", "task_id", "blocker__created_at", "blocker_id"
    )  # the tasks' order, which an import keeps (ids alone would not)
    agents = Agent.objects.filter(workspace=workspace).order_by("order")
    return {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "exported_at": _time(timezone.now()),
        "malamar_version": VERSION,
        "includes": {"tasks": tasks, "chats": chats, "attachments": attachments},
        "workspace": _row(workspace, (*SETTING_FIELDS, "created_at", "updated_at")),
        "agents": [without_secrets(_row(agent, AGENT_FIELDS)) for agent in agents],
        "tasks": _tasks(workspace) if tasks else [],
        "dependencies": [
            {
                "task_id": link.task_id,
                "blocker_id": link.blocker_id,
                "created_at": _time(link.created_at),
            }
            for link in links
        ]
        if tasks
        else [],
        "chats": _chats(workspace, attachments=attachments) if chats else [],
    }


def export_file_name(workspace: Workspace) -> str:
    slug = slugify(workspace.title)[:40] or "workspace"
    return f"malamar-{slug}-{timezone.localdate().isoformat()}.json"


def export_json(workspace: Workspace, **options) -> str:
    return json.dumps(export_document(workspace, **options), ensure_ascii=False, indent=1)
