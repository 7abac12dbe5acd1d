"""The structure of an export file (pydantic), checked before anything is imported.

Kept apart from malamar_site.transfer and the services so the worker, which imports the services,
never loads pydantic (tests/test_config_and_commands.py).
"""

import base64
import binascii
import json
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from chats.models import ChatRole
from core.errors import ValidationFailed
from core.json_input import BodyRefused, check_text
from malamar_site.transfer import FORMAT, FORMAT_VERSION
from tasks.models import ActorType, CommentKind, TaskStatus


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=False)


def _choices(choices) -> Any:
    return Literal[tuple(value for value, _ in choices)]  # type: ignore[valid-type]


class AgentIn(Strict):
    # The agent's other fields (model, CLI options…) are checked against the model on import.
    model_config = ConfigDict(extra="allow")

    id: str = Field(min_length=1)
    name: str
    instruction: str
    cli_type: str
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
    title: str
    created_at: datetime
    updated_at: datetime
    participants: list[ParticipantIn] = Field(min_length=1)  # the first one leads
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
        except RecursionError:
            raise ValidationFailed(
                "The file is not valid JSON (nested too deeply)", field="file"
            ) from None
    try:  # what the database cannot store (PostgreSQL refuses NUL): refused, as by the API
        check_text(data)
    except BodyRefused as exc:
        raise ValidationFailed(f"The file is broken: {exc}", field="file") from exc
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
        for agent_id in (p.agent_id for p in chat.participants):
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
