"""Reads for the agent pages."""

from agents.models import CLI_PREFERENCE, Agent
from runner.selectors import cli_health_all, first_available_cli
from workspaces.models import Workspace


def cli_options() -> list[dict]:
    """The four CLIs in the spec's preference order, each with its health for the picker."""
    health = {c["cli_type"]: c for c in cli_health_all()}
    return [health[cli.value] for cli in CLI_PREFERENCE]


def default_cli() -> str:
    """The first healthy CLI (Claude → Codex → Gemini → OpenCode), else Claude."""
    return first_available_cli() or CLI_PREFERENCE[0].value


def agents_for_workspace(workspace: Workspace) -> list[Agent]:
    """Agents in order, each with `position` (1-based), `cli` (its health dict), `is_first`
    and `is_last`."""
    health = {c["cli_type"]: c for c in cli_health_all()}
    agents = list(Agent.objects.filter(workspace=workspace).in_order())
    for position, agent in enumerate(agents, start=1):
        agent.position = position
        agent.cli = health[agent.cli_type]
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
