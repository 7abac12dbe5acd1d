"""Reads for the agent pages."""

from agents.models import Agent
from runner.clis import CLI_PREFERENCE, CUSTOM_CLI, CUSTOM_CLI_LABEL, cli_for
from runner.selectors import cli_health_all, custom_cli_health, first_available_cli
from workspaces.models import Workspace


def cli_health_by_type() -> dict[str, dict]:
    """{cli type: its health} of the four CLIs (cli_health_all), for the reads below."""
    return {c["cli_type"]: c for c in cli_health_all()}


def cli_options(health: dict[str, dict] | None = None) -> list[dict]:
    """The four CLIs in the spec's preference order, each with its health for the picker
    (`health`: cli_health_by_type() when the caller read it already)."""
    health = health or cli_health_by_type()
    return [health[cli.value] for cli in CLI_PREFERENCE]


def agent_cli_options() -> list[dict]:
    """The agent dialog's CLIs: the four, then the custom command (checked per agent)."""
    custom = {"cli_type": CUSTOM_CLI, "name": CUSTOM_CLI_LABEL, "status": "", "available": True}
    return [*cli_options(), custom]


def cli_setting_panels() -> list[dict]:
    """What the agent dialog offers per CLI: model suggestions and hint, reasoning efforts."""
    panels = []
    for option in agent_cli_options():
        cli = cli_for(option["cli_type"])
        panels.append(
            {
                "cli_type": cli.name,
                "name": cli.label,
                "model_hint": cli.model_hint,
                "model_suggestions": cli.model_suggestions,
                "efforts": cli.efforts,
            }
        )
    return panels


def default_cli() -> str:
    """The first healthy CLI (Claude → Codex → Gemini → OpenCode), else Claude."""
    return first_available_cli() or CLI_PREFERENCE[0].value


def agents_for_workspace(
    workspace: Workspace, health: dict[str, dict] | None = None
) -> list[Agent]:
    """Agents in order, each with `position` (1-based), `cli` (its health dict), `is_first`
    and `is_last` (`health`: cli_health_by_type() when the caller read it already)."""
    health = health or cli_health_by_type()
    agents = list(Agent.objects.filter(workspace=workspace).in_order())
    custom = custom_cli_health([agent.id for agent in agents if agent.is_custom])
    for position, agent in enumerate(agents, start=1):
        agent.position = position
        agent.cli = custom[agent.id] if agent.is_custom else health[agent.cli_type]
        agent.is_first = position == 1
        agent.is_last = position == len(agents)
    return agents


def agent_count(workspace: Workspace) -> int:
    return Agent.objects.filter(workspace=workspace).count()


def order_with_move(workspace: Workspace, agent_id: str, offset: int) -> list[str] | None:
    """The workspace's agent ids with `agent_id` moved by `offset` places (None: no move)."""
    ids = list(Agent.objects.filter(workspace=workspace).in_order().values_list("id", flat=True))
    if agent_id not in ids:
        return None
    old = ids.index(agent_id)
    new = max(0, min(len(ids) - 1, old + offset))
    if new == old:
        return None
    ids.insert(new, ids.pop(old))
    return ids
