import re

from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone

from agents.models import (
    AGENT_CLI_CHOICES,
    CUSTOM_CLI,
    Agent,
    CliType,
    CustomOutput,
    custom_health_key,
)
from chats.services import chats_switch_to_malamar
from core import events
from core.errors import Conflict, ValidationFailed, check_length, require_text
from core.fields import max_length_of
from core.settings_store import mask
from runner.clis import cli_for
from runner.clis.base import TemplateError, template_args
from runner.models import CliHealth
from runner.services import custom_health_check_request
from workspaces.models import Workspace
from workspaces.services import workspace_touch

NAME_MAX_LENGTH = max_length_of(Agent, "name")
MODEL_MAX_LENGTH = max_length_of(Agent, "model")
EXTRA_ARGS_MAX = 50
EXTRA_ARG_MAX_LENGTH = 2000
AGENT_CLI_TYPES = [value for value, _label in AGENT_CLI_CHOICES]
# The fields that configure the agent's CLI: they belong to one CLI, so changing the CLI without
# giving them resets them (another CLI's model or flags would break its runs).
CLI_FIELDS = ("model", "reasoning_effort", "extra_args")
CUSTOM_FIELDS = ("custom_binary", "custom_args", "custom_env", "custom_output")
CUSTOM_DEFAULTS = {
    "custom_binary": "",
    "custom_args": "",
    "custom_env": {},
    "custom_output": "file",
}
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _clean_name(name) -> str:
    return require_text(name, field="name", label="Name", max_length=NAME_MAX_LENGTH)


def _clean_cli(cli_type: str) -> str:
    if cli_type not in AGENT_CLI_TYPES:
        raise ValidationFailed(
            f"cli_type must be one of {', '.join(AGENT_CLI_TYPES)}", field="cli_type"
        )
    return cli_type


def _one_line(value: str, *, field: str, label: str) -> None:
    if any(ch in value for ch in "\n\r\x00"):
        raise ValidationFailed(f"{label} must not contain line breaks or NUL", field=field)


def _clean_model(model, cli_type: str) -> str:
    model = str(model or "").strip()
    check_length(model, field="model", label="Model", max_length=MODEL_MAX_LENGTH)
    _one_line(model, field="model", label="Model")
    if model.startswith("-"):
        raise ValidationFailed("Model must be a model name, not an option", field="model")
    return model


def _clean_effort(effort, cli_type: str) -> str:
    effort = str(effort or "").strip()
    if not effort:
        return ""
    cli = cli_for(cli_type)
    if not cli.efforts:
        raise ValidationFailed(
            f"{cli.label} has no reasoning effort setting; leave reasoning_effort empty",
            field="reasoning_effort",
        )
    if effort not in cli.efforts:
        raise ValidationFailed(
            f"reasoning_effort for {cli.label} must be one of {', '.join(cli.efforts)}",
            field="reasoning_effort",
        )
    return effort


def _clean_extra_args(extra_args, cli_type: str) -> list[str]:
    """A list of plain arguments (no shell) that keep Malamar's contract with the CLI."""
    if extra_args is None:
        return []
    if not isinstance(extra_args, list) or not all(isinstance(a, str) for a in extra_args):
        raise ValidationFailed("extra_args must be a list of strings", field="extra_args")
    if len(extra_args) > EXTRA_ARGS_MAX:
        raise ValidationFailed(
            f"extra_args may hold at most {EXTRA_ARGS_MAX} arguments", field="extra_args"
        )
    cli = cli_for(cli_type)
    for arg in extra_args:
        if any(ch in arg for ch in "\n\r\x00"):
            raise ValidationFailed(
                f"Extra argument {arg!r} must not contain line breaks or NUL", field="extra_args"
            )
        if len(arg) > EXTRA_ARG_MAX_LENGTH:
            raise ValidationFailed(
                f"Extra argument {arg[:40]!r}… is longer than {EXTRA_ARG_MAX_LENGTH} characters",
                field="extra_args",
            )
        reserved = cli.reserved_option(arg)
        if reserved:
            raise ValidationFailed(
                f"Extra argument {arg!r} is not allowed for {cli.label}: Malamar sets "
                f"{reserved} itself (output, permissions, prompt and working folder are "
                "Malamar's; model and effort have their own fields)",
                field="extra_args",
            )
    return list(extra_args)


def _clean_custom(values: dict) -> dict:
    """A custom command: a binary, an argument template with known placeholders that passes the
    task on ({prompt} or {input_file}), environment variables, and an output mode."""
    binary = str(values.get("custom_binary") or "").strip()
    if not binary:
        raise ValidationFailed("A custom command needs a binary", field="custom_binary")
    _one_line(binary, field="custom_binary", label="Binary")
    template = str(values.get("custom_args") or "").strip()
    _one_line(template, field="custom_args", label="Argument template")
    try:
        args = template_args(template)
    except TemplateError as exc:
        raise ValidationFailed(f"Argument template: {exc}", field="custom_args") from None
    if not any("{prompt}" in a or "{input_file}" in a for a in args):
        raise ValidationFailed(
            "Argument template must pass the task on: use {prompt} or {input_file}",
            field="custom_args",
        )
    output = values.get("custom_output") or CustomOutput.FILE
    if output not in CustomOutput.values:
        raise ValidationFailed(
            f"custom_output must be one of {', '.join(CustomOutput.values)}",
            field="custom_output",
        )
    return {
        "custom_binary": binary,
        "custom_args": template,
        "custom_env": _clean_env(values.get("custom_env"), values.get("stored_env") or {}),
        "custom_output": output,
    }


def _clean_env(env, stored: dict[str, str]) -> dict[str, str]:
    """Names and values checked; a value that is the mask of the stored one (what the API and
    the dialog show) keeps the stored value."""
    env = env or {}
    if not isinstance(env, dict):
        raise ValidationFailed(
            "custom_env must be an object of names to values", field="custom_env"
        )
    for name, value in env.items():
        if not isinstance(name, str) or not _ENV_NAME.match(name):
            raise ValidationFailed(
                f"Environment variable name {name!r} is not valid", field="custom_env"
            )
        if not isinstance(value, str) or "\x00" in value:
            raise ValidationFailed(
                f"Environment variable {name} must be a string without NUL", field="custom_env"
            )
    return {
        name: stored[name] if name in stored and value == mask(stored[name]) else value
        for name, value in env.items()
    }


def masked_env(env: dict | None) -> dict[str, str]:
    """A custom command's environment as shown: values masked (they are often API keys)."""
    return {name: mask(value) for name, value in (env or {}).items()}


def _clean_cli_settings(values: dict) -> dict:
    """The agent's CLI fields, checked against its CLI (`values` holds cli_type and all of
    CLI_FIELDS and CUSTOM_FIELDS)."""
    cli_type = values["cli_type"]
    cleaned = {
        "model": _clean_model(values.get("model"), cli_type),
        "reasoning_effort": _clean_effort(values.get("reasoning_effort"), cli_type),
        "extra_args": _clean_extra_args(values.get("extra_args"), cli_type),
    }
    custom = _clean_custom(values) if cli_type == CUSTOM_CLI else dict(CUSTOM_DEFAULTS)
    return {**cleaned, **custom}


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
    workspace_touch(workspace_id)
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
) -> Agent:
    name = _clean_name(name)
    instruction = require_text(instruction, field="instruction", label="Instruction")
    cli_type = _clean_cli(cli_type)
    settings = _clean_cli_settings(
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
    **cli_settings,
) -> Agent:
    """Change the given fields (None: unchanged). `cli_settings`: any of CLI_FIELDS and
    CUSTOM_FIELDS; a new CLI resets those not given (they belonged to the old CLI)."""
    unknown = set(cli_settings) - {*CLI_FIELDS, *CUSTOM_FIELDS}
    if unknown:
        raise TypeError(f"agent_update() got unexpected fields {sorted(unknown)}")
    changes = {}
    if name is not None:
        changes["name"] = _clean_name(name)
    if instruction is not None:
        changes["instruction"] = require_text(instruction, field="instruction", label="Instruction")
    if cli_type is not None:
        changes["cli_type"] = _clean_cli(cli_type)
    changes.update(_cli_settings_update(agent, changes.get("cli_type"), cli_settings))
    before = {f: getattr(agent, f) for f in ("cli_type", *CUSTOM_FIELDS)}
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
    return _clean_cli_settings({**merged, "cli_type": new_cli or agent.cli_type})


def agent_delete(*, agent: Agent) -> None:
    """Delete an agent. Its comments keep `agent_id`; its chats switch to the Malamar agent."""
    with transaction.atomic():
        chats_switch_to_malamar(agent=agent)
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
