from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone

from agents.models import Agent, CliType
from chats.services import chats_switch_to_malamar
from core import events
from core.errors import Conflict, ValidationFailed, require_text
from core.fields import max_length_of
from workspaces.models import Workspace
from workspaces.services import workspace_touch

NAME_MAX_LENGTH = max_length_of(Agent, "name")


def _clean_name(name) -> str:
    return require_text(name, field="name", label="Name", max_length=NAME_MAX_LENGTH)


def _clean_cli(cli_type: str) -> str:
    if cli_type not in CliType.values:
        raise ValidationFailed(
            f"cli_type must be one of {', '.join(CliType.values)}", field="cli_type"
        )
    return cli_type


def _check_name_free(workspace_id: str, name: str, *, exclude_id: str | None = None) -> None:
    taken = Agent.objects.filter(workspace_id=workspace_id, name__iexact=name)
    if exclude_id:
        taken = taken.exclude(id=exclude_id)
    if taken.exists():
        raise Conflict(f"Agent name '{name}' already exists", field="name")


def _changed(workspace_id: str) -> None:
    workspace_touch(workspace_id, configured=True)  # a running pass re-reads its agents
    events.publish("agents.changed", {"workspace_id": workspace_id})


def agent_create(
    *, workspace: Workspace, name: str, instruction: str, cli_type: str = CliType.CLAUDE
) -> Agent:
    name = _clean_name(name)
    instruction = require_text(instruction, field="instruction", label="Instruction")
    cli_type = _clean_cli(cli_type)
    now = timezone.now()
    with transaction.atomic():
        _check_name_free(workspace.id, name)
        last = Agent.objects.filter(workspace=workspace).aggregate(m=Max("order"))["m"]
        agent = Agent(
            workspace=workspace,
            name=name,
            instruction=instruction,
            cli_type=cli_type,
            order=(last or 0) + 1,
            created_at=now,
            updated_at=now,
        )
        try:
            agent.save(force_insert=True)
        except IntegrityError:
            raise Conflict(f"Agent name '{name}' already exists", field="name") from None
        _changed(workspace.id)
    return agent


def agent_update(
    *,
    agent: Agent,
    name: str | None = None,
    instruction: str | None = None,
    cli_type: str | None = None,
) -> Agent:
    changes = {}
    if name is not None:
        changes["name"] = _clean_name(name)
    if instruction is not None:
        changes["instruction"] = require_text(instruction, field="instruction", label="Instruction")
    if cli_type is not None:
        changes["cli_type"] = _clean_cli(cli_type)
    with transaction.atomic():
        if "name" in changes:
            _check_name_free(agent.workspace_id, changes["name"], exclude_id=agent.id)
        changes["updated_at"] = timezone.now()
        for field, value in changes.items():
            setattr(agent, field, value)
        Agent.objects.filter(id=agent.id).update(**changes)
        _changed(agent.workspace_id)
    return agent


def agent_delete(*, agent: Agent) -> None:
    """Delete an agent. Its comments keep `agent_id`; its chats switch to the Malamar agent."""
    with transaction.atomic():
        chats_switch_to_malamar(agent=agent)
        agent.delete()
        _changed(agent.workspace_id)


def agent_reorder(*, workspace: Workspace, agent_ids: list[str]) -> list[Agent]:
    """Set the order to exactly `agent_ids` (which must be the workspace's agent ids)."""
    with transaction.atomic():
        current = set(Agent.objects.filter(workspace=workspace).values_list("id", flat=True))
        if len(agent_ids) != len(set(agent_ids)) or set(agent_ids) != current:
            raise ValidationFailed(
                "agent_ids must list each of the workspace's agents exactly once",
                field="agent_ids",
            )
        # Two steps so the (workspace, order) unique constraint never sees a duplicate.
        for position, agent_id in enumerate(agent_ids, start=1):
            Agent.objects.filter(id=agent_id).update(order=-position)
        now = timezone.now()
        for position, agent_id in enumerate(agent_ids, start=1):
            Agent.objects.filter(id=agent_id).update(order=position, updated_at=now)
        _changed(workspace.id)
    return list(Agent.objects.filter(workspace=workspace).in_order())
