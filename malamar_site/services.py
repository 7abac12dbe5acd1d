"""Writes that span the apps, so they sit in the site layer above them all (README
"Development → Architecture"): deleting a workspace (its tasks' branches, its chats'
attachments), importing one from an export file and cloning one with its agents.
"""

import base64
import io

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from agents.cli_fields import agent_cli_fields_clean, clean_override_cli
from agents.models import Agent
from chats.attachments import (
    attachment_name,
    attachment_store,
    attachments_dir,
    attachments_remove,
    chat_attachment_folders_remove,
)
from chats.models import Chat, ChatMessage, ChatParticipant
from core import events
from core.errors import ValidationFailed
from core.fields import own_fields
from core.wake import wake_worker_on_commit
from malamar_site import transfer
from tasks import branches
from tasks.models import (
    RUNNABLE_STATUSES,
    Task,
    TaskComment,
    TaskDependency,
    TaskLog,
    TaskStatus,
)
from tasks.selectors import unmerged_branch_tasks
from workspaces.models import Workspace
from workspaces.services import (
    EDITABLE_FIELDS,
    TITLE_MAX_LENGTH,
    workspace_create,
    workspace_row_delete,
    workspace_row_insert,
)


def workspace_delete(*, workspace: Workspace, confirm_unmerged: bool = False) -> None:
    """Cascade-delete everything in the workspace, then its task branches and its chats'
    attachment folders.

    Running CLIs are stopped by the worker, which sees its queue rows disappear (DESIGN
    "Stopping runs"): the server never touches a process. Task branches with work their base
    lacks are refused (UnmergedBranches, naming them) unless `confirm_unmerged`.
    """
    if not confirm_unmerged:
        unmerged = unmerged_branch_tasks(workspace.tasks.all())
        if unmerged:
            raise branches.unmerged_refusal(unmerged, "this workspace")
    with transaction.atomic():
        chat_ids = list(workspace.chats.values_list("id", flat=True))
        task_branches = list(
            workspace.tasks.values_list("id", "branch_name", "branch_base").exclude(branch_name="")
        )
        workspace_row_delete(workspace=workspace)
        transaction.on_commit(lambda: _remove_task_branches(workspace, task_branches))
        chat_attachment_folders_remove(chat_ids=chat_ids)


def _remove_task_branches(workspace: Workspace, task_branches: list[tuple]) -> None:
    for task_id, branch, base in task_branches:
        branches.remove(
            repo_path=workspace.working_directory_path or "",
            task_id=task_id,
            branch=branch,
            base=base,
            keep_merged=True,
        )


# --- import and clone -------------------------------------------------------------------------


def workspace_import(*, document, title: str | None = None) -> Workspace:
    """Create a workspace anew from an export file already checked by
    malamar_site.transfer_format.parse_document: new ids, every reference remapped. Nothing is
    half-imported: one transaction (a row the database refuses is a ValidationFailed), and
    attachment files written during it are removed if it fails. Tasks that were In Progress come
    back as Todo (nothing runs for them here yet). Imported tasks start paused: no agent runs
    until the person resumes them (tasks.services.task_resume / tasks_resume), so an import
    never sets several agents on one repository at once."""
    written: list[str] = []
    try:
        with transaction.atomic():
            workspace = _imported(document, title, written)
    except IntegrityError as exc:
        _remove_attachments(written)
        raise ValidationFailed(
            f"The file is broken: its rows break a rule of the database ({exc})", field="file"
        ) from exc
    except BaseException:
        _remove_attachments(written)
        raise
    wake_worker_on_commit()
    return workspace


def _remove_attachments(chat_ids: list[str]) -> None:
    for chat_id in chat_ids:
        attachments_remove(chat_id)


def workspace_clone(*, workspace: Workspace, title: str | None = None) -> Workspace:
    """A new workspace with the same settings and agents; no tasks, no chats."""
    settings = {name: getattr(workspace, name) for name in EDITABLE_FIELDS}  # checked again
    settings["title"] = title or f"{workspace.title} (copy)"[:TITLE_MAX_LENGTH]
    now = timezone.now()
    with transaction.atomic():
        clone = workspace_create(**settings)
        copied = own_fields(Agent, skip=("id", "created_at", "updated_at"))
        Agent.objects.bulk_create(
            Agent(
                workspace=clone,
                **{name: getattr(agent, name) for name in copied},
                created_at=now,
                updated_at=now,
            )
            for agent in Agent.objects.filter(workspace=workspace).order_by("order")
        )
        events.publish("agents.changed", {"workspace_id": clone.id})
    return clone


def _imported(document, title: str | None, written: list[str]) -> Workspace:
    source = document.workspace
    fields = source.model_dump(exclude={"created_at", "updated_at"})
    if title:
        fields["title"] = title
    _known(fields, transfer.SETTING_FIELDS, "workspace")
    workspace = workspace_row_insert(
        fields=fields, created_at=source.created_at, updated_at=source.updated_at
    )
    ids: dict[str, str] = {}
    _import_agents(workspace, document.agents, ids)
    _import_tasks(workspace, document, ids, workspace.last_activity_at)
    for chat in document.chats:
        _import_chat(workspace, chat, ids, written)
    return workspace


def _known(fields: dict, allowed, what: str) -> None:
    unknown = sorted(set(fields) - set(allowed))
    if unknown:
        raise ValidationFailed(
            f"The file is broken: unknown {what} field {unknown[0]!r}", field="file"
        )


def _checked(row, exclude=("workspace", "task", "chat", "blocker", "agent")):
    """The model's own field rules (lengths, choices, blanks) before a bulk insert."""
    try:
        row.clean_fields(exclude=list(exclude))
    except DjangoValidationError as exc:
        field, messages = next(iter(exc.message_dict.items()))
        raise ValidationFailed(
            f"The file is broken: {type(row).__name__.lower()} {field}: {messages[0]}",
            field="file",
        ) from exc
    return row


def _import_agents(workspace: Workspace, agents, ids: dict[str, str]) -> None:
    rows = []
    for agent in agents:
        fields = agent.model_dump(exclude={"id"})
        _known(fields, transfer.AGENT_FIELDS, "agent")
        try:
            fields.update(agent_cli_fields_clean(values=fields))
        except ValidationFailed as exc:
            raise ValidationFailed(
                f"The file is broken: agent {agent.name!r}: {exc.message}", field="file"
            ) from exc
        row = Agent(workspace=workspace, **fields)
        ids[agent.id] = row.id
        rows.append(_checked(row))
    Agent.objects.bulk_create(rows)


def _remapped(value, ids: dict[str, str]):
    """Ids inside JSON (activity-log metadata, chat actions) point at the new rows."""
    if isinstance(value, str):
        return ids.get(value, value)
    if isinstance(value, list):
        return [_remapped(v, ids) for v in value]
    if isinstance(value, dict):
        return {k: _remapped(v, ids) for k, v in value.items()}
    return value


def _import_tasks(workspace: Workspace, document, ids: dict[str, str], now) -> None:
    tasks, comments, logs = [], [], []
    for task in document.tasks:
        status = TaskStatus.TODO if task.status == TaskStatus.IN_PROGRESS else task.status
        row = Task(
            workspace=workspace,
            **task.model_dump(include={"summary", "description", "created_at", "updated_at"}),
            status=status,
            is_priority=task.is_priority and status in RUNNABLE_STATUSES,
        )
        ids[task.id] = row.id
        tasks.append(_checked(row))
    if sum(t.is_priority for t in tasks) > 1:
        raise ValidationFailed(
            "The file is broken: more than one task is prioritized", field="file"
        )
    for task, row in zip(document.tasks, tasks, strict=True):
        for comment in task.comments:
            fields = comment.model_dump(exclude={"id", "agent_id"})
            agent_id = ids.get(comment.agent_id, comment.agent_id)
            comments.append(
                _checked(TaskComment(task=row, workspace=workspace, agent_id=agent_id, **fields))
            )
        for log in task.logs:
            fields = log.model_dump(exclude={"id", "actor_id", "metadata"})
            logs.append(
                _checked(
                    TaskLog(
                        task=row,
                        workspace=workspace,
                        actor_id=ids.get(log.actor_id, log.actor_id),
                        metadata=_remapped(log.metadata, ids),
                        **fields,
                    )
                )
            )
    Task.objects.bulk_create(tasks)
    TaskComment.objects.bulk_create(comments)
    TaskLog.objects.bulk_create(logs)
    TaskDependency.objects.bulk_create(
        TaskDependency(
            workspace=workspace,
            task_id=ids[link.task_id],
            blocker_id=ids[link.blocker_id],
            created_at=link.created_at,
        )
        for link in document.dependencies
    )


def _import_chat(workspace: Workspace, chat, ids: dict[str, str], written: list[str]) -> None:
    row = _checked(
        Chat(
            workspace=workspace,
            **chat.model_dump(include={"title", "created_at", "updated_at"}),
        )
    )
    row.save(force_insert=True)
    ids[chat.id] = row.id
    for participant in chat.participants:  # checked as the chat API checks an override
        try:
            clean_override_cli(participant.cli_type)
        except ValidationFailed as exc:
            raise ValidationFailed(
                f"The file is broken: chat “{chat.title}”: {exc.message}", field="file"
            ) from exc
    ChatParticipant.objects.bulk_create(
        _checked(
            ChatParticipant(
                chat=row,
                agent_id=ids.get(p.agent_id) if p.agent_id else None,
                **p.model_dump(exclude={"agent_id"}),
            )
        )
        for p in chat.participants
    )
    old_folder, new_folder = chat.attachments_dir, str(attachments_dir(row.id))
    messages = []
    for message in chat.messages:
        text = message.message
        if old_folder:
            text = text.replace(old_folder, new_folder)  # "User has uploaded /path/file"
        fields = message.model_dump(exclude={"agent_id", "message", "actions"})
        messages.append(
            _checked(
                ChatMessage(
                    chat=row,
                    message=text,
                    actions=_remapped(message.actions, ids),
                    agent_id=ids.get(message.agent_id, message.agent_id),
                    **fields,
                )
            )
        )
    ChatMessage.objects.bulk_create(messages)
    if chat.attachments:
        written.append(row.id)
        for attachment in chat.attachments:
            name = attachment_name(attachment.name)
            data = base64.b64decode(attachment.content_base64)  # checked by parse_document
            attachment_store(row.id, name, io.BytesIO(data))
