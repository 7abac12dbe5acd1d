"""Chat agents' actions, executed through the same services as the UI.

Actions run in order, each on its own: one failing does not stop the others. Workspace agents
may only rename the chat and create tasks; the Malamar agent may also manage agents and the
workspace. `rename_chat` only works before the chat's first agent reply (silently ignored after).
"""

import logging
from dataclasses import dataclass

from agents.models import Agent
from agents.services import agent_create, agent_delete, agent_reorder, agent_update
from chats.models import Chat, ChatMessage, ChatRole
from chats.services import chat_update
from core.errors import ServiceError
from runner.schemas import AGENT_CHAT_ACTION_TYPES, MALAMAR_CHAT_ACTION_TYPES
from runner.selectors import first_available_cli
from tasks.services import task_create
from workspaces.services import EDITABLE_FIELDS, workspace_update

log = logging.getLogger(__name__)


class ActionFailed(Exception):
    pass


@dataclass
class ActionResult:
    action: dict
    error: str | None = None
    ignored: bool = False

    def as_stored(self) -> dict:
        """The action as kept on the agent's message, with what became of it."""
        stored = {k: v for k, v in self.action.items() if v is not None}
        stored["result"] = "ignored" if self.ignored else ("failed" if self.error else "ok")
        if self.error:
            stored["error"] = self.error
        for key in ("task_id", "agent_id"):
            if key in self.action and self.action[key] is not None:
                stored[key] = self.action[key]
        return stored


def _text(action: dict, key: str) -> str:
    value = action.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ActionFailed(f"'{key}' is required")
    return value


def _agent(chat: Chat, action: dict) -> Agent:
    agent_id = _text(action, "agent_id")
    agent = Agent.objects.filter(id=agent_id, workspace_id=chat.workspace_id).first()
    if agent is None:
        raise ActionFailed(f"Agent {agent_id} not found in this workspace")
    return agent


# The agent's CLI settings an action may carry (null: not given); custom_env is set in the UI.
CLI_SETTING_KEYS = (
    "model",
    "reasoning_effort",
    "extra_args",
    "custom_binary",
    "custom_args",
    "custom_output",
)


def _cli_settings(action: dict) -> dict:
    return {k: action[k] for k in CLI_SETTING_KEYS if action.get(k) is not None}


def _create_agent(chat: Chat, action: dict) -> None:
    agent = agent_create(
        workspace=chat.workspace,
        name=_text(action, "name"),
        instruction=_text(action, "instruction"),
        cli_type=action.get("cli_type") or first_available_cli() or "claude",
        **_cli_settings(action),
    )
    action["agent_id"] = agent.id


def _update_agent(chat: Chat, action: dict) -> None:
    fields = {k: action.get(k) for k in ("name", "instruction", "cli_type")}
    agent_update(agent=_agent(chat, action), **fields, **_cli_settings(action))


def _delete_agent(chat: Chat, action: dict) -> None:
    agent_delete(agent=_agent(chat, action))


def _reorder_agents(chat: Chat, action: dict) -> None:
    ids = action.get("agent_ids")
    if not isinstance(ids, list):
        raise ActionFailed("'agent_ids' must be a list of agent ids")
    agent_reorder(workspace=chat.workspace, agent_ids=ids)


def _update_workspace(chat: Chat, action: dict) -> None:
    fields = {k: action[k] for k in EDITABLE_FIELDS if action.get(k) is not None}
    if not fields:
        raise ActionFailed("no workspace setting given")
    workspace_update(workspace=chat.workspace, **fields)


def _rename_chat(chat: Chat, action: dict) -> bool:
    """Returns False when ignored (the chat already has an agent reply)."""
    if ChatMessage.objects.filter(chat=chat, role=ChatRole.AGENT).exists():
        return False
    chat_update(chat=chat, title=_text(action, "title"))
    return True


def _create_task(chat: Chat, action: dict) -> None:
    task = task_create(
        workspace=chat.workspace,
        summary=_text(action, "summary"),
        description=action.get("description") or "",
    )
    action["task_id"] = task.id


HANDLERS = {
    "create_agent": _create_agent,
    "update_agent": _update_agent,
    "delete_agent": _delete_agent,
    "reorder_agents": _reorder_agents,
    "update_workspace": _update_workspace,
    "create_task": _create_task,
}


def execute_actions(*, chat: Chat, actions: list[dict], is_malamar: bool) -> list[ActionResult]:
    allowed = MALAMAR_CHAT_ACTION_TYPES if is_malamar else AGENT_CHAT_ACTION_TYPES
    results = []
    for raw in actions:
        action = dict(raw) if isinstance(raw, dict) else {"type": repr(raw)}
        kind = action.get("type")
        result = ActionResult(action=action)
        try:
            if kind not in MALAMAR_CHAT_ACTION_TYPES:
                raise ActionFailed("unknown action type")
            if kind not in allowed:
                raise ActionFailed("only the Malamar agent can do this")
            if kind == "rename_chat":
                result.ignored = not _rename_chat(chat, action)
            else:
                HANDLERS[kind](chat, action)
        except (ActionFailed, ServiceError) as exc:
            result.error = str(getattr(exc, "message", exc))
        except Exception as exc:  # a malformed action must not lose the reply
            log.exception("Chat action failed", extra={"chat_id": chat.id, "type": kind})
            result.error = f"could not be executed ({type(exc).__name__})"
        results.append(result)
    return results


def failure_summary(results: list[ActionResult]) -> str:
    """One system message for every failed action."""
    return "\n".join(
        f"Action failed: {r.action.get('type')} - {r.error}" for r in results if r.error
    )
