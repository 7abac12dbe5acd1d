"""Who did something: the user, an agent, or the system (the spec's actor types)."""

from dataclasses import dataclass

from core.ids import MOCK_USER_ID


@dataclass(frozen=True)
class Actor:
    type: str
    id: str | None = None
    name: str = ""

    @property
    def is_user(self) -> bool:
        return self.type == "user"

    @property
    def is_agent(self) -> bool:
        return self.type == "agent"


USER = Actor("user", MOCK_USER_ID, "User")
SYSTEM = Actor("system", None, "System")
# An agent writing through `malamar mcp` (any CLI, Malamar's runs or the user's own): an agent
# comment with this id (never a real agent's: those are 21-character nanoids).
MCP_AGENT = Actor("agent", "mcp", "Agent via MCP")


DELETED_AGENT_NAME = "(Deleted Agent)"


# The author of a failed check's comment (a system comment of kind "checks").
CHECKS_AUTHOR = "Checks"


def author_name(
    actor_type: str, agent_id: str | None, agent_names: dict[str, str], kind: str = ""
) -> str:
    """How a comment's or an activity's author reads: "User", the agent's name ("(Deleted
    Agent)" once the agent is gone), "Checks" for a failed check's comment, or "System"."""
    if kind == "checks":
        return CHECKS_AUTHOR
    if actor_type == USER.type:
        return USER.name
    if actor_type == "agent":
        if agent_id == MCP_AGENT.id:
            return MCP_AGENT.name
        return agent_names.get(agent_id or "", DELETED_AGENT_NAME)
    return SYSTEM.name


def agent_actor(agent) -> Actor:
    return Actor("agent", agent.id, agent.name)
