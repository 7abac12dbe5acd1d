"""What a run will use, decided without side effects: its CLI (the agent's own, its fallback
while that one cannot be used, or a wait) and the agent's options for that CLI.

Pure functions of what the caller read once (the CLIs out of quota and the broken ones): a
task pass and a chat reply choose the same way, and a test needs no database.
"""

from dataclasses import dataclass, field

from runner.clis import CUSTOM_CLI, cli_label, custom_health_key
from runner.clis.base import CustomCommand, RunOptions


@dataclass(frozen=True)
class Wait:
    """No CLI may run this now: the work waits for `cli` (a health key: a CLI type, or a
    custom-command agent's `custom:<id>`) to be usable again."""

    cli: str


@dataclass(frozen=True)
class RunPlan:
    """The CLI a run uses and how: `fallback_for` is the agent's own CLI when the run uses its
    fallback instead; `options` the agent's model and flags (only on its own CLI)."""

    cli_type: str
    health_key: str
    fallback_for: str = ""
    options: RunOptions = field(default_factory=RunOptions)


def options_for(agent) -> RunOptions:
    """An agent's own CLI settings, as a run of its CLI uses them."""
    custom = None
    if agent.cli_type == CUSTOM_CLI:
        custom = CustomCommand(
            binary=agent.custom_binary,
            args=agent.custom_args,
            env=tuple(sorted((agent.custom_env or {}).items())),
            output=agent.custom_output,
        )
    return RunOptions(
        model=agent.model,
        effort=agent.reasoning_effort,
        extra_args=tuple(agent.extra_args or ()),
        custom=custom,
    )


def health_key(agent, cli_type: str) -> str:
    """The CLI health row that says whether `cli_type` works for `agent`'s run."""
    if cli_type == CUSTOM_CLI and agent is not None:
        return custom_health_key(agent.id)
    return cli_type


def health_key_label(key: str) -> str:
    """How users know the CLI of a health key ("Codex CLI"; "Custom command" for an agent's)."""
    return cli_label(key.split(":", 1)[0])


def cli_for_run(agent, *, limited, broken, cli: str | None = None) -> tuple[str, str] | Wait:
    """(CLI type, fallback_for) of a run of `agent` (None: the Malamar agent), or a Wait. `cli`:
    the CLI asked for instead of the agent's own (a chat's override); `limited`, `broken`:
    health keys of CLIs out of quota and of CLIs that cannot run at all. The agent's fallback
    CLI runs while its own one is unusable; with no usable fallback the run waits for its own."""
    own = cli or agent.cli_type
    own_key = health_key(agent, own)
    unusable = set(limited) | set(broken)
    if own_key not in unusable:
        return own, ""
    fallback = agent.fallback_cli_type if agent is not None else ""
    if fallback and fallback != own and fallback not in unusable:
        return fallback, own
    return Wait(own_key)


def plan_run(agent, *, limited, broken, cli: str | None = None) -> RunPlan | Wait:
    """The run's CLI and options (see cli_for_run). A fallback CLI, or a chat's CLI override,
    runs without the agent's own model and flags: they belong to the agent's own CLI."""
    chosen = cli_for_run(agent, limited=limited, broken=broken, cli=cli)
    if isinstance(chosen, Wait):
        return chosen
    cli_type, fallback_for = chosen
    own_cli = agent is not None and not fallback_for and cli_type == agent.cli_type
    return RunPlan(
        cli_type=cli_type,
        health_key=health_key(agent, cli_type),
        fallback_for=fallback_for,
        options=options_for(agent) if own_cli else RunOptions(),
    )
