"""An agent's fields as the agent dialog, the API and an import check them (no database):
one place, so a workspace file cannot bring in an agent the app itself would refuse."""

import re

from agents.models import AGENT_CLI_CHOICES, CUSTOM_CLI, Agent, CliType, CustomOutput
from core.errors import ValidationFailed, check_length, require_text
from core.fields import max_length_of
from core.settings_store import mask
from runner.clis import cli_for
from runner.clis.base import TemplateError, template_args

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


def clean_name(name) -> str:
    return require_text(name, field="name", label="Name", max_length=NAME_MAX_LENGTH)


def clean_cli(cli_type: str, *, field: str = "cli_type", choices=AGENT_CLI_TYPES) -> str:
    if cli_type not in choices:
        raise ValidationFailed(f"{field} must be one of {', '.join(choices)}", field=field)
    return cli_type


def clean_override_cli(cli_type) -> str | None:
    """A chat participant's CLI override: one of the four CLIs, or None (its agent's own). The
    chat API and a workspace import check it here alike."""
    if cli_type is None:
        return None
    if cli_type not in CliType.values:
        raise ValidationFailed(
            f"cli_type must be one of {', '.join(CliType.values)} or null", field="cli_type"
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


def clean_cli_settings(values: dict) -> dict:
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


def agent_cli_fields_clean(*, values: dict) -> dict:
    """An imported agent's CLI fields (model, effort, extra arguments, custom command,
    fallback CLI), checked as the agent dialog and the API check them: a file must not bring
    in an agent the app itself would refuse (a model that is an option, reserved arguments…)."""
    cli_type = values.get("cli_type") or CliType.CLAUDE
    cleaned = clean_cli_settings({**values, "cli_type": cli_type, "stored_env": {}})
    cleaned["fallback_cli_type"] = clean_fallback(values.get("fallback_cli_type"), cli_type)
    return cleaned


def clean_fallback(value: str | None, cli_type: str) -> str:
    """The CLI used while the agent's own is out of quota: "" (none) or another CLI type."""
    value = (value or "").strip()
    if not value:
        return ""
    value = clean_cli(value, field="fallback_cli_type", choices=CliType.values)
    if value == cli_type:
        raise ValidationFailed(
            "The fallback CLI must differ from the agent's CLI", field="fallback_cli_type"
        )
    return value
