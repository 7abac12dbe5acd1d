"""A workspace as one versioned JSON document: what `malamar export` writes and `malamar import`
reads (the services do the writing: workspaces.services.workspace_import / workspace_clone).

Version 1 holds the settings, the agents, the tasks with their comments and activity logs, the
dependencies between tasks and, when asked, the chats (participants and messages) and their
attachment files (base64). Ids in the file are the exporting instance's; an import gives every
row a new id and remaps every reference. Runs, traces, usage and queues are not exported.
"""

import base64
import binascii
import json
from datetime import datetime
from typing import Any, Literal

from django.utils import timezone
from django.utils.text import slugify
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agents.models import Agent, CliType
from chats.attachments import attachments_dir
from chats.models import Chat, ChatMessage, ChatParticipant, ChatRole
from core.errors import ValidationFailed
from core.version import VERSION
from tasks.models import (
    ActorType,
    CommentKind,
    Task,
    TaskComment,
    TaskDependency,
    TaskLog,
    TaskStatus,
)
from workspaces.models import Workspace

FORMAT = "malamar.workspace"
FORMAT_VERSION = 1
# Workspace settings carried by the file (the editable ones, plus the times).
SETTING_FIELDS = (
    "title",
    "description",
    "working_directory_mode",
    "working_directory_path",
    "auto_delete_done_tasks",
    "retention_days",
    "notify_on_error",
    "notify_on_in_review",
    "stall_kill_minutes",
)


# --- export -----------------------------------------------------------------------------------


def _time(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def _row(obj, fields: tuple[str, ...]) -> dict:
    row = {}
    for name in fields:
        value = getattr(obj, name)
        row[name] = _time(value) if isinstance(value, datetime) else value
    return row


AGENT_FIELDS = ("id", "name", "instruction", "cli_type", "order", "created_at", "updated_at")
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
CHAT_FIELDS = ("id", "agent_id", "cli_type", "title", "created_at", "updated_at")
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
        "agents": [_row(agent, AGENT_FIELDS) for agent in agents],
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


# --- the file's structure (import) --------------------------------------------------------------


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=False)


def _choices(choices) -> Any:
    return Literal[tuple(value for value, _ in choices)]  # type: ignore[valid-type]


class AgentIn(Strict):
    id: str = Field(min_length=1)
    name: str
    instruction: str
    cli_type: _choices(CliType.choices)
    order: int
    created_at: datetime
    updated_at: datetime


class CommentIn(Strict):
    id: str
    user_id: str | None
    agent_id: str | None
    content: str
    kind: _choices(CommentKind.choices)
    created_at: datetime
    updated_at: datetime


class LogIn(Strict):
    id: str
    event_type: str = Field(max_length=40)
    actor_type: _choices(ActorType.choices)
    actor_id: str | None
    metadata: dict[str, Any]
    created_at: datetime


class TaskIn(Strict):
    id: str = Field(min_length=1)
    summary: str
    description: str
    status: _choices(TaskStatus.choices)
    is_priority: bool
    created_at: datetime
    updated_at: datetime
    comments: list[CommentIn]
    logs: list[LogIn]


class DependencyIn(Strict):
    task_id: str
    blocker_id: str
    created_at: datetime


class ParticipantIn(Strict):
    agent_id: str | None
    cli_type: str | None
    enabled: bool
    position: int
    created_at: datetime


class MessageIn(Strict):
    role: _choices(ChatRole.choices)
    message: str
    actions: Any
    agent_id: str | None
    agent_name: str
    included: bool
    created_at: datetime


class AttachmentIn(Strict):
    name: str
    content_base64: str

    @field_validator("content_base64")
    @classmethod
    def _decodes(cls, value: str) -> str:
        try:
            base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ValueError("not valid base64") from exc
        return value


class ChatIn(Strict):
    id: str = Field(min_length=1)
    agent_id: str | None
    cli_type: str | None
    title: str
    created_at: datetime
    updated_at: datetime
    participants: list[ParticipantIn]
    messages: list[MessageIn]
    attachments_dir: str | None = None
    attachments: list[AttachmentIn] = []


class WorkspaceIn(Strict):
    model_config = ConfigDict(extra="allow")  # the settings are checked by the services

    title: str
    created_at: datetime
    updated_at: datetime


class DocumentIn(Strict):
    format: Literal["malamar.workspace"]
    version: int
    exported_at: datetime | None = None
    malamar_version: str | None = None
    includes: dict[str, bool] = {}
    workspace: WorkspaceIn
    agents: list[AgentIn]
    tasks: list[TaskIn]
    dependencies: list[DependencyIn]
    chats: list[ChatIn] = []


def _first_error(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "the file"
    return f"{where}: {first['msg']}"


def parse_document(raw) -> DocumentIn:
    """Read an export file (bytes, text or already parsed JSON), refusing with a message a file
    that is not JSON, not a Malamar workspace, from a newer format version, or malformed."""
    data = raw
    if isinstance(raw, bytes | str):
        try:
            data = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValidationFailed(f"The file is not valid JSON ({exc})", field="file") from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValidationFailed("The file is not a Malamar workspace export", field="file")
    version = data.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ValidationFailed("The file has no valid format version", field="file")
    if version > FORMAT_VERSION:
        raise ValidationFailed(
            f"The file is from a newer Malamar (format version {version}; this one reads up to "
            f"{FORMAT_VERSION}): update Malamar to import it",
            field="file",
        )
    try:
        document = DocumentIn.model_validate(data)
    except ValidationError as exc:
        raise ValidationFailed(f"The file is broken: {_first_error(exc)}", field="file") from exc
    _check_references(document)
    return document


def _check_references(document: DocumentIn) -> None:
    """Ids are unique and references point inside the file (a broken file says where)."""
    task_ids = [t.id for t in document.tasks]
    if len(set(task_ids)) != len(task_ids):
        raise ValidationFailed("The file is broken: two tasks share an id", field="file")
    agent_ids = [a.id for a in document.agents]
    if len(set(agent_ids)) != len(agent_ids):
        raise ValidationFailed("The file is broken: two agents share an id", field="file")
    known = set(task_ids)
    for link in document.dependencies:
        if link.task_id not in known or link.blocker_id not in known:
            raise ValidationFailed(
                "The file is broken: a dependency names a task that is not in the file",
                field="file",
            )
    _check_no_cycle(document.dependencies)
    for chat in document.chats:
        for agent_id in [chat.agent_id, *(p.agent_id for p in chat.participants)]:
            if agent_id is not None and agent_id not in set(agent_ids):
                raise ValidationFailed(
                    f"The file is broken: chat “{chat.title}” names an agent that is not in the "
                    "file",
                    field="file",
                )


def decoded(attachment: AttachmentIn) -> bytes:
    return base64.b64decode(attachment.content_base64)


def _check_no_cycle(links: list[DependencyIn]) -> None:
    blockers: dict[str, list[str]] = {}
    for link in links:
        blockers.setdefault(link.task_id, []).append(link.blocker_id)
    done: set[str] = set()
    for start in blockers:
        path, stack = set(), [(start, iter(blockers.get(start, ())))]
        path.add(start)
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                path.discard(node)
                done.add(node)
            elif child in path:
                raise ValidationFailed(
                    "The file is broken: its task dependencies form a cycle", field="file"
                )
            elif child not in done:
                path.add(child)
                stack.append((child, iter(blockers.get(child, ()))))
