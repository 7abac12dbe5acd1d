import base64
import io
import shlex
from pathlib import Path

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
from core.errors import ValidationFailed, check_length, require_text
from core.fields import max_length_of, own_fields
from core.models import Marker
from core.wake import wake_worker_on_commit
from runner.git import GitError, branch_exists, branch_name_problem, git_binary, git_text
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
from workspaces import transfer
from workspaces.checks import attempts_clean, checks_clean
from workspaces.models import (
    FIRST_RUN_DISMISSED,
    PARALLEL_TASKS_MAX,
    RETENTION_DAYS_MAX,
    STALL_KILL_MINUTES_MAX,
    Isolation,
    NotifySetting,
    WorkingDirectoryMode,
    Workspace,
)

TITLE_MAX_LENGTH = max_length_of(Workspace, "title")
BASE_BRANCH_MAX_LENGTH = max_length_of(Workspace, "base_branch")

EDITABLE_FIELDS = (
    "title",
    "description",
    "working_directory_mode",
    "working_directory_path",
    "auto_delete_done_tasks",
    "retention_days",
    "notify_on_error",
    "notify_on_in_review",
    "stall_kill_minutes",
    "isolation",
    "base_branch",
    "setup_command",
    "parallel_tasks",
    "keep_merged_branches",
    "mcp_tools_enabled",
    "checks",
    "checks_attempts",
)
# A change to one of these checks the branch-per-task rules again.
ISOLATION_FIELDS = {
    "working_directory_mode",
    "working_directory_path",
    "isolation",
    "base_branch",
    "parallel_tasks",
}
NOTIFY_FIELDS = ("notify_on_error", "notify_on_in_review")
# Saving one of these checks that a static folder exists.
DIRECTORY_FIELDS = {"working_directory_mode", "working_directory_path"}


def workspace_touch(workspace_id: str, *, now=None, configured: bool = False) -> None:
    """Bump the workspace's last activity; call inside the transaction of the change.
    `configured`: its setup changed (e.g. its agents), so `updated_at` moves too: a running
    task pass sees that on the workspace row it reads anyway and re-reads its agents."""
    now = now or timezone.now()
    changes = {"last_activity_at": now, **({"updated_at": now} if configured else {})}
    Workspace.objects.filter(id=workspace_id).update(**changes)


def _clean(fields: dict) -> dict:
    unknown = set(fields) - set(EDITABLE_FIELDS)
    if unknown:
        field = sorted(unknown)[0]
        raise ValidationFailed(f"{field} is not a workspace setting", field=field)
    clean = dict(fields)
    if "title" in clean:
        clean["title"] = require_text(
            clean["title"], field="title", label="Title", max_length=TITLE_MAX_LENGTH
        )
    if "description" in clean:
        clean["description"] = clean["description"] or ""
    if "working_directory_mode" in clean:
        mode = clean["working_directory_mode"]
        if mode not in WorkingDirectoryMode.values:
            raise ValidationFailed(
                "working_directory_mode must be 'static' or 'temp'", field="working_directory_mode"
            )
    if "working_directory_path" in clean:
        clean["working_directory_path"] = (clean["working_directory_path"] or "").strip() or None
    if "retention_days" in clean:
        days = clean["retention_days"]
        if (
            isinstance(days, bool)
            or not isinstance(days, int)
            or not 0 <= days <= RETENTION_DAYS_MAX
        ):
            raise ValidationFailed(
                f"retention_days must be a whole number of days from 0 to {RETENTION_DAYS_MAX}",
                field="retention_days",
            )
    if "stall_kill_minutes" in clean:
        minutes = clean["stall_kill_minutes"]
        if (
            isinstance(minutes, bool)
            or not isinstance(minutes, int | float)
            or not 0 <= minutes <= STALL_KILL_MINUTES_MAX  # also refuses NaN
        ):
            raise ValidationFailed(
                "stall_kill_minutes must be a number of minutes"
                f" from 0 to {STALL_KILL_MINUTES_MAX}",
                field="stall_kill_minutes",
            )
    for flag in ("mcp_tools_enabled", "keep_merged_branches"):
        if flag in clean and not isinstance(clean[flag], bool):
            raise ValidationFailed(f"{flag} must be true or false", field=flag)
    for key in NOTIFY_FIELDS:
        if key in clean:
            clean[key] = _notify_value(key, clean[key])
    if "checks" in clean:
        clean["checks"] = checks_clean(clean["checks"])
    if "checks_attempts" in clean:
        clean["checks_attempts"] = attempts_clean(clean["checks_attempts"])
    _clean_isolation(clean)
    return clean


def _clean_isolation(clean: dict) -> None:
    if "isolation" in clean and clean["isolation"] not in Isolation.values:
        raise ValidationFailed("isolation must be 'none' or 'branch'", field="isolation")
    if "base_branch" in clean:
        clean["base_branch"] = (clean["base_branch"] or "").strip()
        check_length(
            clean["base_branch"],
            field="base_branch",
            label="base_branch",
            max_length=BASE_BRANCH_MAX_LENGTH,
        )
    if "setup_command" in clean:
        clean["setup_command"] = (clean["setup_command"] or "").strip()
        try:
            shlex.split(clean["setup_command"])
        except ValueError as exc:
            raise ValidationFailed(
                f"setup_command cannot be read: {exc}", field="setup_command"
            ) from None
    if "parallel_tasks" in clean:
        count = clean["parallel_tasks"]
        if isinstance(count, bool) or not isinstance(count, int):
            count = -1
        if not 1 <= count <= PARALLEL_TASKS_MAX:
            raise ValidationFailed(
                f"parallel_tasks must be a whole number from 1 to {PARALLEL_TASKS_MAX}",
                field="parallel_tasks",
            )


def _notify_value(key: str, value) -> str:
    """ "inherit" | "on" | "off" (true/false, as the Malamar agent may send, mean on/off)."""
    if isinstance(value, bool):
        return NotifySetting.ON if value else NotifySetting.OFF
    if value not in NotifySetting.values:
        raise ValidationFailed(f"{key} must be 'inherit', 'on' or 'off'", field=key)
    return value


def _check_directory(workspace: Workspace, *, must_exist: bool = False) -> None:
    """A static workspace names its folder; one being saved (`must_exist`) names a folder
    that exists (an import may name a folder of another machine: its tasks start paused)."""
    if workspace.working_directory_mode != WorkingDirectoryMode.STATIC:
        return
    if not workspace.working_directory_path:
        raise ValidationFailed(
            "working_directory_path is required when the working directory mode is static",
            field="working_directory_path",
        )
    path = Path(workspace.working_directory_path).expanduser()
    if must_exist and not path.is_dir():
        what = "is not a folder" if path.exists() else "does not exist"
        raise ValidationFailed(
            f"{workspace.working_directory_path} {what}: create it first, or pick another folder",
            field="working_directory_path",
        )


def _check_isolation(workspace: Workspace) -> None:
    """Branch per task needs a static directory at the top of a git repository (and a base
    branch that exists there); several tasks at once need branch per task."""
    if workspace.isolation != Isolation.BRANCH:
        if workspace.parallel_tasks > 1:
            raise ValidationFailed(
                "parallel_tasks above 1 needs isolation 'branch' (branch per task): tasks "
                "running at once in one folder would edit each other's files",
                field="parallel_tasks",
            )
        return
    if workspace.working_directory_mode != WorkingDirectoryMode.STATIC:
        raise ValidationFailed(
            "Branch per task needs a static working directory that is a git repository",
            field="isolation",
        )
    path = Path(workspace.working_directory_path or "").expanduser()
    if git_binary() is None:
        raise ValidationFailed(
            "Branch per task needs git: install the git package", field="isolation"
        )
    if not _is_repository_top(path):
        raise ValidationFailed(
            f"Branch per task needs a git repository: {path} is not the top folder of one "
            "(run `git init` there, or pick the repository's top folder)",
            field="isolation",
        )
    problem = workspace.base_branch and branch_name_problem(workspace.base_branch)
    if problem:
        raise ValidationFailed(
            f"Base branch {workspace.base_branch!r} is not a branch name ({problem})",
            field="base_branch",
        )
    if workspace.base_branch and not branch_exists(path, workspace.base_branch):
        raise ValidationFailed(
            f"Base branch {workspace.base_branch} does not exist in {path}",
            field="base_branch",
        )


def _is_repository_top(path: Path) -> bool:
    if not path.is_dir():
        return False
    try:
        return git_text("rev-parse", "--show-prefix", cwd=path) == "" and (
            git_text("rev-parse", "--is-bare-repository", cwd=path) == "false"
        )
    except GitError:
        return False


def _payload(workspace: Workspace) -> dict:
    return {"workspace_id": workspace.id, "title": workspace.title}


def workspace_create(*, title: str, **fields) -> Workspace:
    clean = _clean({"title": title, **fields})
    now = timezone.now()
    workspace = Workspace(**clean, created_at=now, updated_at=now, last_activity_at=now)
    _check_directory(workspace, must_exist=True)
    _check_isolation(workspace)
    with transaction.atomic():
        workspace.save(force_insert=True)
        events.publish("workspace.created", _payload(workspace))
    return workspace


def workspace_update(*, workspace: Workspace, **fields) -> Workspace:
    clean = _clean(fields)
    for name, value in clean.items():
        setattr(workspace, name, value)
    _check_directory(workspace, must_exist=bool(DIRECTORY_FIELDS & set(clean)))
    if ISOLATION_FIELDS & set(clean):
        _check_isolation(workspace)
    now = timezone.now()
    workspace.updated_at = now
    workspace.last_activity_at = now
    with transaction.atomic():
        Workspace.objects.filter(id=workspace.id).update(
            **clean, updated_at=now, last_activity_at=now
        )
        events.publish("workspace.updated", _payload(workspace))
    return workspace


def workspace_delete(*, workspace: Workspace, confirm_unmerged: bool = False) -> None:
    """Cascade-delete everything in the workspace.

    Running CLIs are stopped by the worker, which sees its queue rows disappear (DESIGN
    "Stopping runs"): the server never touches a process. Task branches with work their base
    lacks are refused (UnmergedBranches, naming them) unless `confirm_unmerged`.
    """
    if not confirm_unmerged:
        unmerged = unmerged_branch_tasks(workspace.tasks.all())
        if unmerged:
            raise branches.unmerged_refusal(unmerged, "this workspace")
    with transaction.atomic():
        payload = _payload(workspace)
        chat_ids = list(workspace.chats.values_list("id", flat=True))
        task_branches = list(
            workspace.tasks.values_list("id", "branch_name", "branch_base").exclude(branch_name="")
        )
        workspace.delete()
        transaction.on_commit(lambda: _remove_task_branches(workspace, task_branches))
        chat_attachment_folders_remove(chat_ids=chat_ids)
        events.publish("workspace.deleted", payload)
        wake_worker_on_commit()


def _remove_task_branches(workspace: Workspace, task_branches: list[tuple]) -> None:
    for task_id, branch, base in task_branches:
        branches.remove(
            repo_path=workspace.working_directory_path or "",
            task_id=task_id,
            branch=branch,
            base=base,
            keep_merged=True,
        )


def first_run_checklist_dismiss() -> None:
    """Hide the home page's first-run checklist for good (asking twice is harmless)."""
    Marker.objects.get_or_create(name=FIRST_RUN_DISMISSED)


# --- import and clone -------------------------------------------------------------------------


def workspace_import(*, document, title: str | None = None) -> Workspace:
    """Create a workspace anew from an export file already checked by
    workspaces.transfer_format.parse_document: new ids, every reference remapped. Nothing is
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
    now = timezone.now()
    source = document.workspace
    fields = source.model_dump(exclude={"created_at", "updated_at"})
    if title:
        fields["title"] = title
    _known(fields, transfer.SETTING_FIELDS, "workspace")
    clean = _clean({k: v for k, v in fields.items() if k in EDITABLE_FIELDS})
    others = {k: v for k, v in fields.items() if k not in EDITABLE_FIELDS}
    workspace = Workspace(
        **clean,
        **others,
        created_at=source.created_at,
        updated_at=source.updated_at,
        last_activity_at=now,
    )
    _check_directory(workspace)
    _checked(workspace, exclude=())
    workspace.save(force_insert=True)
    ids: dict[str, str] = {}
    _import_agents(workspace, document.agents, ids)
    _import_tasks(workspace, document, ids, now)
    for chat in document.chats:
        _import_chat(workspace, chat, ids, written)
    events.publish("workspace.created", _payload(workspace))
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
