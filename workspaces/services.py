from django.db import transaction
from django.utils import timezone

from chats.attachments import chat_attachment_folders_remove
from core import events
from core.errors import ValidationFailed, require_text
from core.fields import max_length_of
from core.models import Marker
from core.wake import wake_worker_on_commit
from workspaces.models import (
    FIRST_RUN_DISMISSED,
    RETENTION_DAYS_MAX,
    STALL_KILL_MINUTES_MAX,
    NotifySetting,
    WorkingDirectoryMode,
    Workspace,
)

TITLE_MAX_LENGTH = max_length_of(Workspace, "title")

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
    "mcp_tools_enabled",
)
NOTIFY_FIELDS = ("notify_on_error", "notify_on_in_review")


def workspace_touch(workspace_id: str, *, now=None) -> None:
    """Bump the workspace's last activity; call inside the transaction of the change."""
    Workspace.objects.filter(id=workspace_id).update(last_activity_at=now or timezone.now())


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
    if "mcp_tools_enabled" in clean and not isinstance(clean["mcp_tools_enabled"], bool):
        raise ValidationFailed("mcp_tools_enabled must be true or false", field="mcp_tools_enabled")
    for key in NOTIFY_FIELDS:
        if key in clean:
            clean[key] = _notify_value(key, clean[key])
    return clean


def _notify_value(key: str, value) -> str:
    """ "inherit" | "on" | "off" (true/false, as the Malamar agent may send, mean on/off)."""
    if isinstance(value, bool):
        return NotifySetting.ON if value else NotifySetting.OFF
    if value not in NotifySetting.values:
        raise ValidationFailed(f"{key} must be 'inherit', 'on' or 'off'", field=key)
    return value


def _check_directory(workspace: Workspace) -> None:
    if workspace.working_directory_mode == WorkingDirectoryMode.STATIC and not (
        workspace.working_directory_path
    ):
        raise ValidationFailed(
            "working_directory_path is required when the working directory mode is static",
            field="working_directory_path",
        )


def _payload(workspace: Workspace) -> dict:
    return {"workspace_id": workspace.id, "title": workspace.title}


def workspace_create(*, title: str, **fields) -> Workspace:
    clean = _clean({"title": title, **fields})
    now = timezone.now()
    workspace = Workspace(**clean, created_at=now, updated_at=now, last_activity_at=now)
    _check_directory(workspace)
    with transaction.atomic():
        workspace.save(force_insert=True)
        events.publish("workspace.created", _payload(workspace))
    return workspace


def workspace_update(*, workspace: Workspace, **fields) -> Workspace:
    clean = _clean(fields)
    for name, value in clean.items():
        setattr(workspace, name, value)
    _check_directory(workspace)
    now = timezone.now()
    workspace.updated_at = now
    workspace.last_activity_at = now
    with transaction.atomic():
        Workspace.objects.filter(id=workspace.id).update(
            **clean, updated_at=now, last_activity_at=now
        )
        events.publish("workspace.updated", _payload(workspace))
    return workspace


def workspace_delete(*, workspace: Workspace) -> None:
    """Cascade-delete everything in the workspace.

    Running CLIs are stopped by the worker, which sees its queue rows disappear (DESIGN
    "Stopping runs"): the server never touches a process.
    """

    with transaction.atomic():
        payload = _payload(workspace)
        chat_ids = list(workspace.chats.values_list("id", flat=True))
        workspace.delete()
        chat_attachment_folders_remove(chat_ids=chat_ids)
        events.publish("workspace.deleted", payload)
        wake_worker_on_commit()


def first_run_checklist_dismiss() -> None:
    """Hide the home page's first-run checklist for good (asking twice is harmless)."""
    Marker.objects.get_or_create(name=FIRST_RUN_DISMISSED)
