import shlex
from pathlib import Path

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import transaction
from django.utils import timezone

from core import events
from core.compiled_queries import update_row
from core.errors import ValidationFailed, check_length, require_text
from core.fields import max_length_of
from core.models import Marker
from core.wake import wake_worker_on_commit
from runner.git import GitError, branch_exists, branch_name_problem, git_binary, git_text
from runner.services import agent_runs_lock
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
    update_row(Workspace, workspace_id, **changes)  # (on every step's and move's path)


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


def first_run_checklist_dismiss() -> None:
    """Hide the home page's first-run checklist for good (asking twice is harmless)."""
    Marker.objects.get_or_create(name=FIRST_RUN_DISMISSED)


def workspace_row_insert(*, fields: dict, created_at, updated_at) -> Workspace:
    """A workspace from an export file's settings (malamar_site.services.workspace_import):
    checked like a create, its own times kept. Part of the caller's transaction."""
    clean = _clean({k: v for k, v in fields.items() if k in EDITABLE_FIELDS})
    others = {k: v for k, v in fields.items() if k not in EDITABLE_FIELDS}
    workspace = Workspace(
        **clean,
        **others,
        created_at=created_at,
        updated_at=updated_at,
        last_activity_at=timezone.now(),
    )
    _check_directory(workspace)
    try:
        workspace.clean_fields()
    except DjangoValidationError as exc:
        field, messages = next(iter(exc.message_dict.items()))
        raise ValidationFailed(
            f"The file is broken: workspace {field}: {messages[0]}", field="file"
        ) from exc
    workspace.save(force_insert=True)
    events.publish("workspace.created", _payload(workspace))
    return workspace


def workspace_row_delete(*, workspace: Workspace) -> None:
    """The workspace's row and everything that cascades from it (malamar_site.services.
    workspace_delete also removes its branches and attachment folders). The worker stops the
    running CLIs: it sees its queue rows disappear (DESIGN "Stopping runs")."""
    with transaction.atomic():
        agent_runs_lock(workspace_id=workspace.id)
        payload = _payload(workspace)
        workspace.delete()
        events.publish("workspace.deleted", payload)
        wake_worker_on_commit()
