from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone

from agents.cli_fields import (
    CLI_FIELDS,
    CUSTOM_FIELDS,
    clean_cli,
    clean_cli_settings,
    clean_fallback,
    clean_name,
)
from agents.models import (
    CUSTOM_CLI,
    Agent,
    CliType,
    CustomOutput,
    custom_health_key,
)
from core import events
from core.errors import Conflict, ValidationFailed, require_text
from runner.models import CliHealth
from runner.services import custom_health_check_request
from workspaces.models import Workspace
from workspaces.services import workspace_touch


def _custom_changed(agent: Agent, before: dict) -> bool:
    after = {f: getattr(agent, f) for f in ("cli_type", *CUSTOM_FIELDS)}
    return agent.cli_type == CUSTOM_CLI and after != before


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
    *,
    workspace: Workspace,
    name: str,
    instruction: str,
    cli_type: str = CliType.CLAUDE,
    model: str = "",
    reasoning_effort: str = "",
    extra_args: list[str] | None = None,
    custom_binary: str = "",
    custom_args: str = "",
    custom_env: dict[str, str] | None = None,
    custom_output: str = CustomOutput.FILE,
    fallback_cli_type: str = "",
) -> Agent:
    name = clean_name(name)
    instruction = require_text(instruction, field="instruction", label="Instruction")
    cli_type = clean_cli(cli_type)
    settings = clean_cli_settings(
        {
            "cli_type": cli_type,
            "model": model,
            "reasoning_effort": reasoning_effort,
            "extra_args": extra_args,
            "custom_binary": custom_binary,
            "custom_args": custom_args,
            "custom_env": custom_env,
            "custom_output": custom_output,
        }
    )
    fallback_cli_type = clean_fallback(fallback_cli_type, cli_type)
    now = timezone.now()
    with transaction.atomic():
        _check_name_free(workspace.id, name)
        last = Agent.objects.filter(workspace=workspace).aggregate(m=Max("order"))["m"]
        agent = Agent(
            workspace=workspace,
            name=name,
            instruction=instruction,
            cli_type=cli_type,
            **settings,
            fallback_cli_type=fallback_cli_type,
            order=(last or 0) + 1,
            created_at=now,
            updated_at=now,
        )
        try:
            agent.save(force_insert=True)
        except IntegrityError:
            raise Conflict(f"Agent name '{name}' already exists", field="name") from None
        if agent.is_custom:
            custom_health_check_request(key=agent.health_key)  # a real prompt, as for the four
        _changed(workspace.id)
    return agent


def agent_update(
    *,
    agent: Agent,
    name: str | None = None,
    instruction: str | None = None,
    cli_type: str | None = None,
    fallback_cli_type: str | None = None,
    **cli_settings,
) -> Agent:
    """Change the given fields (None: unchanged). `cli_settings`: any of CLI_FIELDS and
    CUSTOM_FIELDS; a new CLI resets those not given (they belonged to the old CLI)."""
    unknown = set(cli_settings) - {*CLI_FIELDS, *CUSTOM_FIELDS}
    if unknown:
        raise TypeError(f"agent_update() got unexpected fields {sorted(unknown)}")
    changes = {}
    if name is not None:
        changes["name"] = clean_name(name)
    if instruction is not None:
        changes["instruction"] = require_text(instruction, field="instruction", label="Instruction")
    if cli_type is not None:
        changes["cli_type"] = clean_cli(cli_type)
    changes.update(_cli_settings_update(agent, changes.get("cli_type"), cli_settings))
    before = {f: getattr(agent, f) for f in ("cli_type", *CUSTOM_FIELDS)}
    own = changes.get("cli_type", agent.cli_type)
    if fallback_cli_type is not None:
        changes["fallback_cli_type"] = clean_fallback(fallback_cli_type, own)
    elif own == agent.fallback_cli_type:  # switched to its fallback's CLI: no fallback left
        changes["fallback_cli_type"] = ""
    with transaction.atomic():
        if "name" in changes:
            _check_name_free(agent.workspace_id, changes["name"], exclude_id=agent.id)
        changes["updated_at"] = timezone.now()
        for field, value in changes.items():
            setattr(agent, field, value)
        Agent.objects.filter(id=agent.id).update(**changes)
        if _custom_changed(agent, before):
            custom_health_check_request(key=agent.health_key)
        elif not agent.is_custom:
            CliHealth.objects.filter(cli_type=custom_health_key(agent.id)).delete()
        _changed(agent.workspace_id)
    return agent


def _cli_settings_update(agent: Agent, new_cli: str | None, given: dict) -> dict:
    """The CLI fields after an update, all checked together against the (new) CLI."""
    given = {k: v for k, v in given.items() if v is not None}
    switched = new_cli is not None and new_cli != agent.cli_type
    if not given and not switched:
        return {}
    current = {f: getattr(agent, f) for f in (*CLI_FIELDS, *CUSTOM_FIELDS)}
    if switched:
        current.update({"model": "", "reasoning_effort": "", "extra_args": []})
    merged = {**current, **given, "stored_env": agent.custom_env or {}}
    return clean_cli_settings({**merged, "cli_type": new_cli or agent.cli_type})


def agent_delete(*, agent: Agent) -> None:
    """Delete an agent; its comments keep `agent_id`. Its chats are the chats app's: delete an
    agent through chats.services.chats_agent_delete, which switches them first."""
    with transaction.atomic():
        CliHealth.objects.filter(cli_type=custom_health_key(agent.id)).delete()
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
