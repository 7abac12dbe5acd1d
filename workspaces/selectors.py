"""Reads for the workspace pages."""

from pathlib import Path

from django.db.models import Count, Q

from agents.models import CliType
from core.settings_store import settings_get
from runner.selectors import cli_health_all
from tasks.models import TaskStatus
from workspaces.models import NotifySetting, WorkingDirectoryMode, Workspace

# Order and labels of the status counts on a workspace card.
CARD_STATUSES = tuple((status.value, status.label) for status in TaskStatus)


def workspace_cards(query: str = "") -> list[Workspace]:
    """Workspaces matching `query` (title), most recently active first, each with
    `status_counts` [(status, label, count)], `task_count` and `agent_count`."""
    counts = {
        f"n_{status}": Count("tasks", filter=Q(tasks__status=status), distinct=True)
        for status, _ in CARD_STATUSES
    }
    workspaces = list(
        Workspace.objects.search(query)
        .by_activity()
        .annotate(**counts, agent_count=Count("agents", distinct=True))
    )
    for workspace in workspaces:
        workspace.status_counts = [
            (status, label, getattr(workspace, f"n_{status}")) for status, label in CARD_STATUSES
        ]
        workspace.task_count = sum(count for _, _, count in workspace.status_counts)
    return workspaces


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


def unhealthy_agent_clis(workspace: Workspace) -> list[dict]:
    """The workspace's agents whose CLI is unhealthy, grouped by CLI: [{"name", "agents"}]."""
    unhealthy = {c["cli_type"]: c for c in cli_health_all() if not c["available"]}
    if not unhealthy:
        return []
    groups: dict[str, list[str]] = {}
    for name, cli in workspace.agents.in_order().values_list("name", "cli_type"):
        if cli in unhealthy:
            groups.setdefault(cli, []).append(name)
    return [
        {
            "cli_type": cli,
            "name": CliType(cli).label,
            "agents": names,
            "error": unhealthy[cli]["error"],
        }
        for cli, names in groups.items()
    ]


def notify_effective(workspace: Workspace, key: str, settings: dict | None = None) -> bool:
    """Whether the workspace notifies for `key` ("notify_on_error" | "notify_on_in_review"):
    its own "on"/"off", else ("inherit") the global setting of the same name."""
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
