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


def agent_actor(agent) -> Actor:
    return Actor("agent", agent.id, agent.name)
