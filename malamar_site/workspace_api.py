from datetime import datetime
from typing import Annotated, Any, Literal

from django.http import HttpResponse
from ninja import Body, Router, Schema, Status
from pydantic import ConfigDict, Field

from core.lookups import get_or_404
from malamar_site import services as site_services
from malamar_site import transfer
from malamar_site.transfer_format import parse_document
from workspaces import services
from workspaces.models import Workspace
from workspaces.selectors import notify_effective
from workspaces.services import TITLE_MAX_LENGTH

router = Router(tags=["workspaces"])
Notify = Annotated[
    Literal["inherit", "on", "off"],
    Field(
        description=(
            'Email and webhook notifications for this workspace: "inherit" (the default) '
            'follows the global setting of the same name, "on" and "off" override it.'
        )
    ),
]


class WorkspaceOut(Schema):
    id: str
    title: str
    description: str
    working_directory_mode: str
    working_directory_path: str | None
    auto_delete_done_tasks: bool
    retention_days: int
    notify_on_error: Notify
    notify_on_in_review: Notify
    notify_on_error_effective: bool = Field(
        description="Whether errors notify now (notify_on_error, or the global one if inherit)."
    )
    notify_on_in_review_effective: bool = Field(
        description="Whether In Review notifies now (notify_on_in_review, or the global one)."
    )
    stall_kill_minutes: float
    isolation: Literal["none", "branch"] = Field(
        description='"branch": each task works in a git worktree on a branch of its own.'
    )
    base_branch: str = Field(description="Branch tasks start from ('' = the current one).")
    setup_command: str = Field(description="Run once in each new worktree (no shell).")
    parallel_tasks: int = Field(description="Tasks that may run at once (>1 needs branch).")
    keep_merged_branches: bool = Field(
        description="Branch per task: keep a task's branch once merged (its worktree goes)."
    )
    mcp_tools_enabled: bool = Field(
        description="Give agents Malamar's tools: runs get the `malamar mcp` server (MCP)."
    )
    checks: list[dict] = Field(
        description="Run in order in the task's folder before it may go In Review: "
        "[{name, command, timeout_minutes}]."
    )
    checks_attempts: int = Field(
        description="Failed rounds of checks in a row before the task goes In Review anyway."
    )
    last_activity_at: datetime
    created_at: datetime
    updated_at: datetime

    @staticmethod
    def resolve_notify_on_error_effective(obj) -> bool:
        return notify_effective(obj, "notify_on_error")

    @staticmethod
    def resolve_notify_on_in_review_effective(obj) -> bool:
        return notify_effective(obj, "notify_on_in_review")


class WorkspaceUpdate(Schema):
    model_config = ConfigDict(extra="forbid")

    title: str | None = Field(None, max_length=TITLE_MAX_LENGTH)
    description: str | None = None
    working_directory_mode: Literal["static", "temp"] | None = None
    working_directory_path: str | None = None
    auto_delete_done_tasks: bool | None = None
    retention_days: int | None = None
    notify_on_error: Notify | None = None
    notify_on_in_review: Notify | None = None
    stall_kill_minutes: float | None = None
    isolation: Literal["none", "branch"] | None = None
    base_branch: str | None = None
    setup_command: str | None = None
    parallel_tasks: int | None = None
    keep_merged_branches: bool | None = None
    mcp_tools_enabled: bool | None = None
    # Checked by the services (400 with which check is wrong), so any list is let through.
    checks: list[Any] | None = Field(
        None, description="[{name, command, timeout_minutes}]; [] removes every check."
    )
    checks_attempts: int | None = None


class WorkspaceCreate(WorkspaceUpdate):
    title: str = Field(max_length=TITLE_MAX_LENGTH)


class WorkspaceList(Schema):
    workspaces: list[WorkspaceOut]


def _fields(payload: Schema) -> dict:
    # working_directory_path may be cleared with null; other nulls mean "not given".
    fields = payload.model_dump(exclude_unset=True)
    return {k: v for k, v in fields.items() if v is not None or k == "working_directory_path"}


@router.get("/workspaces", response=WorkspaceList)
def list_workspaces(request, q: str = ""):
    return {"workspaces": list(Workspace.objects.search(q).by_activity())}


@router.post("/workspaces", response={201: WorkspaceOut})
def create_workspace(request, payload: WorkspaceCreate):
    return Status(201, services.workspace_create(**_fields(payload)))


# Before /workspaces/{workspace_id}: the first matching path wins.
@router.post("/workspaces/import", response={201: WorkspaceOut})
def import_workspace(request, document: Annotated[dict[str, Any], Body()]):
    """Create a workspace anew from an export file (the JSON body): new ids, references
    remapped. A broken file or one from a newer format version is refused (400), nothing
    imported. Its tasks start paused: POST /api/workspaces/{id}/tasks/resume starts them."""
    return Status(201, site_services.workspace_import(document=parse_document(document)))


@router.get("/workspaces/{workspace_id}", response=WorkspaceOut)
def get_workspace(request, workspace_id: str):
    return get_or_404(Workspace, workspace_id, "Workspace")


@router.put("/workspaces/{workspace_id}", response=WorkspaceOut)
def update_workspace(request, workspace_id: str, payload: WorkspaceUpdate):
    workspace = get_or_404(Workspace, workspace_id, "Workspace")
    return services.workspace_update(workspace=workspace, **_fields(payload))


@router.delete("/workspaces/{workspace_id}", response={204: None})
def delete_workspace(request, workspace_id: str, confirm: bool = False):
    """Delete the workspace and everything in it. Task branches holding work their base lacks
    answer 409 UNMERGED_BRANCHES (naming them in `branches`) unless `?confirm=true`."""
    workspace = get_or_404(Workspace, workspace_id, "Workspace")
    site_services.workspace_delete(workspace=workspace, confirm_unmerged=confirm)
    return Status(204, None)


class CloneIn(Schema):
    model_config = ConfigDict(extra="forbid")

    title: str | None = Field(None, max_length=TITLE_MAX_LENGTH)


def export_response(workspace: Workspace, **options) -> HttpResponse:
    """The export file as a download (`malamar-<title>-<date>.json`)."""
    response = HttpResponse(
        transfer.export_json(workspace, **options), content_type="application/json"
    )
    name = transfer.export_file_name(workspace)
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


@router.get("/workspaces/{workspace_id}/export")
def export_workspace(request, workspace_id: str, chats: bool = False, attachments: bool = False):
    """The workspace as one versioned JSON file: settings, agents, tasks with comments, activity
    logs and dependencies; chats (and their attachment files) when asked."""
    workspace = get_or_404(Workspace, workspace_id, "Workspace")
    return export_response(workspace, chats=chats, attachments=attachments)


@router.post("/workspaces/{workspace_id}/clone", response={201: WorkspaceOut})
def clone_workspace(request, workspace_id: str, payload: CloneIn | None = None):
    """A new workspace with the same settings and agents (no tasks, no chats)."""
    workspace = get_or_404(Workspace, workspace_id, "Workspace")
    title = payload.title if payload else None
    return Status(201, site_services.workspace_clone(workspace=workspace, title=title))
