"""Reads that span the apps (workspaces, agents, tasks, runs): the home page's workspace cards
and first-run checklist, the workspace page's banners. They sit in the site layer because no
app below it may import the ones above it (README "Development → Architecture")."""

from django.db.models import Count, Q
from django.urls import reverse

from agents.models import Agent
from core.models import Marker
from runner.clis import CliType
from runner.models import CliHealthStatus
from runner.selectors import cli_health_all, cli_limits
from tasks.models import Task, TaskQueueItem, TaskStatus
from workspaces.links import workspace_tab_url
from workspaces.models import FIRST_RUN_DISMISSED, WorkingDirectoryMode, Workspace
from workspaces.selectors import directory_warning

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
    unavailable = _unavailable_clis_by_workspace([workspace.id for workspace in workspaces])
    for workspace in workspaces:
        workspace.status_counts = [
            (status, label, getattr(workspace, f"n_{status}")) for status, label in CARD_STATUSES
        ]
        workspace.task_count = sum(count for _, _, count in workspace.status_counts)
        workspace.unavailable_clis = unavailable.get(workspace.id, [])
    return workspaces


def _unavailable_clis_by_workspace(workspace_ids: list[str]) -> dict[str, list[dict]]:
    """{workspace id: [{"name", "agent_count"}]} for the CLIs that failed their health check
    and that agents of the workspace use (one query besides the health rows)."""
    unhealthy = [c["cli_type"] for c in cli_health_all() if not c["available"]]
    if not unhealthy or not workspace_ids:
        return {}
    rows = (
        Agent.objects.filter(workspace_id__in=workspace_ids, cli_type__in=unhealthy)
        .values("workspace_id", "cli_type")
        .annotate(n=Count("id"))
        .order_by("workspace_id", "cli_type")
    )
    result: dict[str, list[dict]] = {}
    for row in rows:
        label = CliType(row["cli_type"]).label
        result.setdefault(row["workspace_id"], []).append({"name": label, "agent_count": row["n"]})
    return result


def _has_working_directory(workspace: Workspace) -> bool:
    """A static working directory that exists (the temp-folder default needs no setup, but a
    real project does: the checklist points there)."""
    mode, path = workspace.working_directory_mode, workspace.working_directory_path
    return mode == WorkingDirectoryMode.STATIC and bool(path) and not directory_warning(mode, path)


WORKING_STATUSES = (CliHealthStatus.HEALTHY, CliHealthStatus.SLOW)


def first_run_checklist() -> dict | None:
    """The home page's first steps: a working CLI, a working directory for a workspace, a first
    task; each {"key", "title", "text", "done", "href", "link"}, or a "dialog" id to open
    instead of `href`. None once every step is done or the user dismissed the list."""
    if Marker.objects.filter(name=FIRST_RUN_DISMISSED).exists():
        return None
    clis = cli_health_all()
    # "Slow to answer" is a healthy CLI on a loaded machine: it still runs agents.
    working = [c["name"] for c in clis if c["status"] in WORKING_STATUSES]
    checking = any(c["status"] == CliHealthStatus.NOT_CHECKED for c in clis)
    if working:
        cli_text = "Working: " + ", ".join(working) + "."
    elif checking:
        cli_text = "Checking your CLIs… Install one and log in to it once in a terminal."
    else:
        cli_text = "None works yet: install one and log in to it once, or set its path."
    workspaces = list(Workspace.objects.by_activity())
    with_directory = next((w for w in workspaces if _has_working_directory(w)), None)
    target = with_directory or (workspaces[0] if workspaces else None)
    has_task = Task.objects.exists()
    steps = [
        {
            "key": "cli",
            "title": "A working CLI",
            "text": cli_text,
            "done": bool(working),
            "href": reverse("global_settings") + "#clis-heading",
            "link": "Settings → CLIs",
        },
        {
            "key": "directory",
            "title": "A working directory for a workspace",
            "text": (
                f"“{with_directory.title}” works in {with_directory.working_directory_path}."
                if with_directory
                else f"Point “{target.title}” at the folder its agents should work in."
                if target
                else "Create a workspace, then point it at the folder its agents work in."
            ),
            "done": with_directory is not None,
            "href": (
                reverse("workspace_settings", args=[target.id]) + "#directory-heading"
                if target
                else ""
            ),
            "link": "Workspace settings" if target else "New workspace",
            "dialog": "" if target else "create-dialog",  # no workspace yet: create one
        },
        {
            "key": "task",
            "title": "A first task",
            "text": (
                "Done."
                if has_task
                else f"Agents pick up tasks from the board of “{target.title}”."
                if target
                else "Agents pick up tasks from a workspace's board."
            ),
            "done": has_task,
            "href": workspace_tab_url(target.id, "tasks") if target else "",
            "link": "Open the board" if target else "",
        },
    ]
    if all(step["done"] for step in steps):
        return None
    return {"steps": steps, "done_count": sum(step["done"] for step in steps)}


def working_directory_hint(workspace: Workspace) -> bool:
    """A new workspace (temp folder, no task yet) points the user at its working directory."""
    return (
        workspace.working_directory_mode == WorkingDirectoryMode.TEMP
        and not Task.objects.filter(workspace=workspace).exists()
    )


def unhealthy_agent_clis(agents: list) -> list[dict]:
    """Of the workspace's agents (agents_for_workspace: in order, each with its CLI's health),
    those whose CLI is unhealthy, grouped by CLI: [{"cli_type", "name", "agents", "error"}]
    (custom-command agents are left out: their command is not one of the CLIs)."""
    groups: dict[str, dict] = {}
    for agent in agents:
        if agent.is_custom or agent.cli["available"]:
            continue
        group = groups.setdefault(
            agent.cli_type,
            {
                "cli_type": agent.cli_type,
                "name": CliType(agent.cli_type).label,
                "agents": [],
                "error": agent.cli["error"],
            },
        )
        group["agents"].append(agent.name)
    return list(groups.values())


def limited_clis(workspace: Workspace) -> list[dict]:
    """CLIs out of quota that this workspace's agents use or its paused work waits for, with how
    many of its tasks wait: the board's banner (DESIGN "Usage limits")."""
    limits = cli_limits()
    if not limits:
        return []
    used = set(workspace.agents.values_list("cli_type", flat=True))
    waiting = dict(
        TaskQueueItem.objects.queued()
        .filter(workspace=workspace)
        .exclude(waiting_for_cli="")
        .values_list("waiting_for_cli")
        .annotate(n=Count("id"))
    )
    return [
        {**limit, "tasks_waiting": waiting.get(limit["cli_type"], 0)}
        for limit in limits
        if limit["cli_type"] in used or limit["cli_type"] in waiting
    ]
