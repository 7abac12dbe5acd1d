from datetime import datetime

from ninja import Router, Schema, Status
from pydantic import ConfigDict, Field

from agents import services
from agents.cli_fields import MODEL_MAX_LENGTH, NAME_MAX_LENGTH, masked_env
from agents.models import Agent
from chats.services import chats_agent_delete
from core.lookups import get_or_404
from workspaces.models import Workspace

router = Router(tags=["agents"])


class AgentOut(Schema):
    id: str
    workspace_id: str
    name: str
    instruction: str
    cli_type: str
    model: str
    reasoning_effort: str
    extra_args: list[str]
    custom_binary: str
    custom_args: str
    custom_env: dict[str, str]  # values masked, as the CLI settings' env
    custom_output: str
    fallback_cli_type: str  # "" = none; used while cli_type is out of quota
    order: int
    created_at: datetime
    updated_at: datetime

    @staticmethod
    def resolve_custom_env(agent) -> dict[str, str]:
        return masked_env(agent.custom_env)


class AgentUpdate(Schema):
    """Omitted (or null) fields stay; a new cli_type resets model, reasoning_effort and
    extra_args unless given (they belonged to the old CLI)."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(None, max_length=NAME_MAX_LENGTH)
    instruction: str | None = None
    cli_type: str | None = None
    model: str | None = Field(None, max_length=MODEL_MAX_LENGTH)
    reasoning_effort: str | None = None
    extra_args: list[str] | None = None
    custom_binary: str | None = None
    custom_args: str | None = None
    custom_env: dict[str, str] | None = None
    custom_output: str | None = None
    fallback_cli_type: str | None = None  # "" removes it


class AgentCreate(Schema):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(max_length=NAME_MAX_LENGTH)
    instruction: str
    cli_type: str = "claude"
    model: str = Field("", max_length=MODEL_MAX_LENGTH, description="empty: the CLI's default")
    reasoning_effort: str = Field("", description="only for CLIs that have one")
    extra_args: list[str] = Field(default_factory=list, description="arguments, no shell")
    custom_binary: str = Field("", description='cli_type "custom": the command to run')
    custom_args: str = Field(
        "", description="argument template: {prompt} {input_file} {output_file} {cwd} {model}"
    )
    custom_env: dict[str, str] = Field(default_factory=dict)
    custom_output: str = Field("file", description='"file" or "stdout"')
    fallback_cli_type: str = ""


class AgentReorder(Schema):
    model_config = ConfigDict(extra="forbid")

    agent_ids: list[str]


class AgentList(Schema):
    agents: list[AgentOut]


@router.get("/workspaces/{workspace_id}/agents", response=AgentList)
def list_agents(request, workspace_id: str):
    workspace = get_or_404(Workspace, workspace_id, "Workspace")
    return {"agents": list(Agent.objects.filter(workspace=workspace).in_order())}


@router.post("/workspaces/{workspace_id}/agents", response={201: AgentOut})
def create_agent(request, workspace_id: str, payload: AgentCreate):
    workspace = get_or_404(Workspace, workspace_id, "Workspace")
    return Status(201, services.agent_create(workspace=workspace, **payload.model_dump()))


@router.put("/workspaces/{workspace_id}/agents/reorder", response=AgentList)
def reorder_agents(request, workspace_id: str, payload: AgentReorder):
    workspace = get_or_404(Workspace, workspace_id, "Workspace")
    return {"agents": services.agent_reorder(workspace=workspace, agent_ids=payload.agent_ids)}


@router.put("/agents/{agent_id}", response=AgentOut)
def update_agent(request, agent_id: str, payload: AgentUpdate):
    agent = get_or_404(Agent, agent_id, "Agent")
    return services.agent_update(agent=agent, **payload.model_dump(exclude_none=True))


@router.delete("/agents/{agent_id}", response={204: None})
def delete_agent(request, agent_id: str):
    chats_agent_delete(agent=get_or_404(Agent, agent_id, "Agent"))
    return Status(204, None)
