from datetime import datetime
from typing import Annotated, Literal

from ninja import Router, Schema, Status
from pydantic import ConfigDict, Field

from core.lookups import get_or_404
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


@router.get("/workspaces/{workspace_id}", response=WorkspaceOut)
def get_workspace(request, workspace_id: str):
    return get_or_404(Workspace, workspace_id, "Workspace")


@router.put("/workspaces/{workspace_id}", response=WorkspaceOut)
def update_workspace(request, workspace_id: str, payload: WorkspaceUpdate):
    workspace = get_or_404(Workspace, workspace_id, "Workspace")
    return services.workspace_update(workspace=workspace, **_fields(payload))


@router.delete("/workspaces/{workspace_id}", response={204: None})
def delete_workspace(request, workspace_id: str):
    services.workspace_delete(workspace=get_or_404(Workspace, workspace_id, "Workspace"))
    return Status(204, None)
