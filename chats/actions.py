"""Chat agents' actions, executed through the same services as the UI.

Actions run in order, each on its own: one failing does not stop the others. Workspace agents
may only rename the chat and create tasks; the Malamar agent may also manage agents and the
workspace, and review tasks In Review for the person. `rename_chat` only works before the
chat's first agent reply (silently ignored after).
"""

import logging
from dataclasses import dataclass, field

from agents.models import Agent
from agents.services import agent_create, agent_delete, agent_reorder, agent_update
from chats.models import Chat, ChatMessage, ChatRole
from chats.services import chat_update
from core.errors import ServiceError
from runner.schemas import AGENT_CHAT_ACTION_TYPES, MALAMAR_CHAT_ACTION_TYPES
from runner.selectors import first_available_cli
from tasks.models import Task
from tasks.services import task_create, task_review_submit
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


@dataclass
class TaskRefs:
    """create_task's local names in one answer: the tasks made so far, and those that failed."""

    ids: dict[str, str] = field(default_factory=dict)
    failed: set[str] = field(default_factory=set)


def _blocker_ids(action: dict, refs: TaskRefs) -> list[str]:
    """`blocked_by` as task ids: the local name (`ref`) of a task created earlier in this answer,
    or the id of an existing task (task_create checks it belongs to this workspace)."""
    names = action.get("blocked_by") or []
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        raise ActionFailed("'blocked_by' must be a list of task refs or ids")
    for name in names:
        if name in refs.failed:
            raise ActionFailed(f"'blocked_by': the task '{name}' could not be created")
    return [refs.ids.get(name, name) for name in names]


def _create_task(chat: Chat, action: dict, refs: TaskRefs) -> None:
    ref = action.get("ref")
    if ref is not None and (not isinstance(ref, str) or not ref.strip()):
        raise ActionFailed("'ref' must be a non-empty name")
    if ref in refs.ids or ref in refs.failed:
        raise ActionFailed(f"'ref' {ref!r} is used twice in this answer")
    try:
        task = task_create(
            workspace=chat.workspace,
            summary=_text(action, "summary"),
            description=action.get("description") or "",
            blocked_by=_blocker_ids(action, refs),
        )
    except (ActionFailed, ServiceError):
        if ref:
            refs.failed.add(ref)  # tasks meant to wait for it must not start without it
        raise
    action["task_id"] = task.id
    if ref:
        refs.ids[ref] = task.id


def _review_task(chat: Chat, action: dict) -> None:
    """The person's review of an In Review task of this workspace, left for them by the Malamar
    agent (same service, same rules as the review buttons and the API)."""
    task_id = _text(action, "task_id")
    task = Task.objects.select_related("workspace").filter(id=task_id).first()
    if task is None or task.workspace_id != chat.workspace_id:
        raise ActionFailed(f"Task {task_id} not found in this workspace")
    line_comments = action.get("line_comments") or []
    if not isinstance(line_comments, list):
        raise ActionFailed("'line_comments' must be a list")
    task_review_submit(
        task=task,
        verdict=_text(action, "verdict"),
        body=action.get("body") or "",
        # The strict schema sends every key: a null means "not given".
        line_comments=[_given(item) for item in line_comments],
        merge=action.get("merge"),
    )


def _given(item):
    return {k: v for k, v in item.items() if v is not None} if isinstance(item, dict) else item


HANDLERS = {
    "create_agent": _create_agent,
    "update_agent": _update_agent,
    "delete_agent": _delete_agent,
    "reorder_agents": _reorder_agents,
    "update_workspace": _update_workspace,
    "review_task": _review_task,
}


def execute_actions(*, chat: Chat, actions: list[dict], is_malamar: bool) -> list[ActionResult]:
    allowed = MALAMAR_CHAT_ACTION_TYPES if is_malamar else AGENT_CHAT_ACTION_TYPES
    results = []
    refs = TaskRefs()
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
            elif kind == "create_task":
                _create_task(chat, action, refs)
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
