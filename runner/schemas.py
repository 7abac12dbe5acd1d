"""The output schemas agents answer with, and the validation of what they return.

One module builds all three (task agent; workspace-agent chat; Malamar chat) in OpenAI's strict
form, because Codex sends `--output-schema` with `strict: true`: every property is listed in
`required`, optional ones are typed `[T, "null"]`, `additionalProperties: false` everywhere.
"""

import json
from dataclasses import dataclass

TASK_ACTION_TYPES = ("skip", "comment", "change_status")
AGENT_CHAT_ACTION_TYPES = ("rename_chat", "create_task")
MALAMAR_CHAT_ACTION_TYPES = (
    "create_agent",
    "update_agent",
    "delete_agent",
    "reorder_agents",
    "update_workspace",
    "rename_chat",
    "create_task",
    "review_task",
)

# Every property a chat action may carry, with its JSON type (all nullable in the schema).
CHAT_ACTION_FIELDS = {
    "title": "string",
    "summary": "string",
    "description": "string",
    # create_task: a local name for the new task, and the tasks it waits for (local names of
    # tasks created earlier in the same answer, or ids of existing tasks).
    "ref": "string",
    "blocked_by": "array",
    "agent_id": "string",
    "name": "string",
    "instruction": "string",
    "cli_type": "string",
    "model": "string",  # "" = the CLI's default
    "reasoning_effort": "string",
    "extra_args": "array",
    "custom_binary": "string",  # cli_type "custom"
    "custom_args": "string",
    "custom_output": "string",  # "file" | "stdout"
    "agent_ids": "array",
    "working_directory_mode": "string",
    "working_directory_path": "string",
    "auto_delete_done_tasks": "boolean",
    "retention_days": "integer",
    "notify_on_error": "string",  # "inherit" | "on" | "off"
    "notify_on_in_review": "string",
    # update_workspace: the checks run before a task may go In Review, and how many failed
    # rounds the agents get before it goes In Review anyway.
    "checks": "checks",
    "checks_attempts": "integer",
    # review_task: an In Review task's id, the verdict ("approve" | "request_changes" |
    # "comment"), its comment, comments on lines of its changes, and for Approve of a task
    # with an unmerged branch whether to merge it (false: finish without merging).
    "task_id": "string",
    "verdict": "string",
    "body": "string",
    "line_comments": "line_comments",
    "merge": "boolean",
}
# A line comment of review_task (strict form: every key listed, optional ones nullable).
LINE_COMMENT_PROPERTIES = {
    "path": {"type": "string"},
    "line": {"type": "integer"},
    "end_line": {"type": ["integer", "null"]},
    "side": {"type": ["string", "null"], "enum": ["new", "old", None]},
    "body": {"type": "string"},
    "run_id": {"type": ["string", "null"]},
}
# One check of update_workspace's `checks` (strict form).
CHECK_PROPERTIES = {
    "name": {"type": ["string", "null"]},
    "command": {"type": "string"},
    "timeout_minutes": {"type": ["number", "null"]},
}
AGENT_CHAT_FIELDS = ("title", "summary", "description", "ref", "blocked_by")


def _nullable(json_type: str) -> dict:
    if json_type == "array":
        return {"type": ["array", "null"], "items": {"type": "string"}}
    if json_type == "checks":
        return {"type": ["array", "null"], "items": _strict_object(CHECK_PROPERTIES)}
    if json_type == "line_comments":
        return {"type": ["array", "null"], "items": _strict_object(LINE_COMMENT_PROPERTIES)}
    return {"type": [json_type, "null"]}


def _strict_object(properties: dict) -> dict:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


def task_schema() -> dict:
    action = _strict_object(
        {
            "type": {"type": "string", "enum": list(TASK_ACTION_TYPES)},
            "content": {"type": ["string", "null"]},
            "status": {"type": ["string", "null"], "enum": ["in_review", None]},
        }
    )
    return _strict_object({"actions": {"type": "array", "items": action}})


def chat_schema(*, malamar: bool) -> dict:
    types = MALAMAR_CHAT_ACTION_TYPES if malamar else AGENT_CHAT_ACTION_TYPES
    fields = (
        CHAT_ACTION_FIELDS if malamar else {k: CHAT_ACTION_FIELDS[k] for k in AGENT_CHAT_FIELDS}
    )
    action = _strict_object(
        {
            "type": {"type": "string", "enum": list(types)},
            **{name: _nullable(json_type) for name, json_type in fields.items()},
        }
    )
    return _strict_object(
        {"message": {"type": ["string", "null"]}, "actions": {"type": "array", "items": action}}
    )


def schema_json(schema: dict) -> str:
    return json.dumps(schema, separators=(",", ":"))


class InvalidOutput(ValueError):
    """The agent's JSON parsed but does not have the required structure."""


@dataclass(frozen=True)
class TaskOutcome:
    comments: tuple[str, ...]
    in_review: bool

    @property
    def action_type(self) -> str:
        """The activity log's summary: "in_review" beats "comment" beats "skip"."""
        if self.in_review:
            return "in_review"
        return "comment" if self.comments else "skip"


def parse_task_output(data) -> TaskOutcome:
    """Validate a task agent's answer. An empty action list means skip."""
    if not isinstance(data, dict):
        raise InvalidOutput(f"expected a JSON object, got {type(data).__name__}")
    actions = data.get("actions")
    if not isinstance(actions, list):
        raise InvalidOutput('"actions" must be an array')
    comments, in_review = [], False
    for index, action in enumerate(actions):
        where = f"actions[{index}]"
        if not isinstance(action, dict):
            raise InvalidOutput(f"{where} must be an object")
        kind = action.get("type")
        if kind == "skip":
            continue
        if kind == "comment":
            content = action.get("content")
            if not isinstance(content, str) or not content.strip():
                raise InvalidOutput(f'{where}: a comment needs non-empty "content"')
            comments.append(content)
        elif kind == "change_status":
            if action.get("status") != "in_review":
                raise InvalidOutput(
                    f'{where}: agents can only change the status to "in_review", '
                    f"got {action.get('status')!r}"
                )
            in_review = True
        else:
            raise InvalidOutput(
                f"{where}: unknown action type {kind!r} (expected skip, comment or change_status)"
            )
    return TaskOutcome(comments=tuple(comments), in_review=in_review)
