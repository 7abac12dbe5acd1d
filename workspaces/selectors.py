"""Reads for the workspace pages."""

from pathlib import Path

from core.settings_store import settings_get
from workspaces.models import NotifySetting, WorkingDirectoryMode, Workspace


def workspace_count() -> int:
    return Workspace.objects.count()


def directory_warning(mode: str | None, path: str | None) -> str:
    """A warning (never an error) when a static working directory does not exist yet."""
    path = (path or "").strip()
    if mode != WorkingDirectoryMode.STATIC or not path:
        return ""
    try:
        exists = Path(path).expanduser().is_dir()
    except (OSError, ValueError):
        exists = False
    if exists:
        return ""
    return "This folder does not exist yet. Agents will fail until it is created."


def notify_effective(workspace: Workspace, key: str, settings: dict | None = None) -> bool:
    """Whether the workspace notifies for `key` ("notify_on_error" | "notify_on_in_review"):
    its own "on"/"off", else ("inherit") the global setting of the same name (`settings`:
    already read, else read now)."""
    value = getattr(workspace, key)
    if value == NotifySetting.INHERIT:
        return bool((settings or settings_get())[key])
    return value == NotifySetting.ON


def notify_choices() -> dict[str, list[tuple[str, str]]]:
    """The choices of each notification switch, "inherit" saying what it means today."""
    settings = settings_get()
    choices = {}
    for key in ("notify_on_error", "notify_on_in_review"):
        state = "on" if settings[key] else "off"
        choices[key] = [
            (NotifySetting.INHERIT.value, f"Inherit (currently {state})"),
            (NotifySetting.ON.value, "On"),
            (NotifySetting.OFF.value, "Off"),
        ]
    return choices
