"""The input files agents read: context, role, task, history, and the output instruction."""

import json

from runner.models import CliHealthStatus
from runner.schemas import schema_json, task_schema
from workspaces.selectors import notify_effective

PROMPT_TEMPLATE = "Read the file at {path} and follow the instruction autonomously."

TASK_OUTPUT_GUIDE = """\
Respond with a JSON object of this shape (and nothing else in the file):

```json
{{"actions": [{{"type": "comment", "content": "## What I did\\n\\n- ...", "status": null}}]}}
```

Actions, executed in order:
- `{{"type": "skip", "content": null, "status": null}}`: you have nothing to do now. Never
  comment just to say you have nothing to do: skip. An empty list also means skip.
- `{{"type": "comment", "content": "<markdown>", "status": null}}`: you did meaningful work or
  have feedback; summarise it for the other agents and the human.
- `{{"type": "change_status", "content": null, "status": "in_review"}}`: a human must look now
  (questions, blockers, or work ready for approval). Combine it with a comment saying why.

JSON schema:

```json
{schema}
```"""


def iso(dt) -> str:
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ")


_JSON = json.JSONEncoder(ensure_ascii=False)  # (json.dumps makes one per call)


def jsonl(rows: list[dict]) -> str:
    return "\n".join(_JSON.encode(row) for row in rows)


class RenderedRows:
    """The JSON lines a task pass rendered, by row (a comment's or a log's id): a row equal to
    the one rendered under its key reuses that line. A long task's input is hundreds of rows
    (60 comments and 200 logs: 1.8 ms to render at every step between two agents,
    bench/task_input.py); an agent's step adds a few."""

    def __init__(self):
        self._known: dict = {}

    def jsonl(self, keyed_rows: list[tuple]) -> str:
        lines = []
        for key, row in keyed_rows:
            known = self._known.get(key)
            # (a row is built anew from its model at every render; a log's metadata, the one
            # value it shares with the model, is never changed once the log is written)
            if known is None or known[0] != row:
                known = self._known[key] = (row, _JSON.encode(row))
            lines.append(known[1])
        return "\n".join(lines)


# What a review verdict tells the agents, next to the person's comment.
VERDICT_NOTES = {
    "request_changes": "requested changes",
    "comment": "a note from the review (the task waited In Review)",
    "approve": "approved",
}


def comment_row(comment, author: str, content: str | None = None) -> dict:
    """`content`: the text agents read when it is not the comment's own (a line comment's
    markdown with its file, lines and quoted code)."""
    row = {"author": author}
    if comment.agent_id:
        row["agent_id"] = comment.agent_id
    if comment.user_id:
        row["user_id"] = comment.user_id
    verdict = getattr(comment, "verdict", "")
    if verdict in VERDICT_NOTES:
        row["review"] = VERDICT_NOTES[verdict]
    row["content"] = comment.content if content is None else content
    repeats = getattr(comment, "repeat_count", 1)
    if repeats > 1:  # identical consecutive errors, collapsed (tasks.selectors)
        row["repeated"] = repeats
        row["first_created_at"] = iso(comment.first_created_at)
    row["created_at"] = iso(comment.created_at)
    return row


def log_row(log) -> dict:
    row = {"event_type": log.event_type, "actor_type": log.actor_type}
    if log.actor_id:
        row["actor_id"] = log.actor_id
    if log.metadata:
        row["metadata"] = log.metadata
    row["created_at"] = iso(log.created_at)
    return row


def task_input(*, comments: str, logs: str, **context) -> str:
    """The task input file, in the spec's structure (`comments` and `logs`: their JSONL,
    oldest first, as RenderedRows.jsonl gives it; `context`: task_input_frame's)."""
    before, between, after = task_input_frame(**context)
    return f"{before}{comments}{between}{logs}{after}"


def task_input_frame(
    *,
    workspace,
    agent,
    agent_names: list[str],
    task,
    output_path: str,
    branch: tuple[str, str] | None = None,
) -> tuple[str, str, str]:
    """The task input without its rows: (the text before the comments' JSONL, between it and
    the logs', after the logs'). `branch` = (the task's branch, its base) when the task works
    in a worktree of its own."""
    others = "\n".join(
        f"- {name} (you)" if name == agent.name else f"- {name}" for name in agent_names
    )
    before = [
        "# Malamar Context",
        "You are being orchestrated by Malamar, a multi-agent workflow system.",
        workspace.description.strip(),
        "",
        *(branch_section(*branch) if branch else []),
        "# Your Role",
        f'You are the agent "{agent.name}" in this workflow.',
        "",
        agent.instruction.strip(),
        "",
        "## Other Agents in This Workflow",
        others,
        "",
        "# Task",
        "## Summary",
        task.summary,
        "",
        "## Description",
        task.description.strip() or "(no description)",
        "",
        "## Comments",
        "",
        "```json",
        "",
    ]
    between = ["", "```", "", "## Activity Log", "", "```json", ""]
    after = [
        "",
        "```",
        "",
        "# Output Instruction",
        f"Write your response as JSON to: {output_path}",
        "",
        TASK_OUTPUT_GUIDE.format(schema=schema_json(task_schema())),
        "",
    ]
    return "\n".join(before), "\n".join(between), "\n".join(after)


def branch_section(branch: str, base: str) -> list[str]:
    return [
        "## Git Branch",
        f"You work in a git worktree of this task's own, on the branch `{branch}`, made from "
        f"`{base}`. Malamar commits your changes on this branch after your run, in your name. "
        f"Do not switch branches, rewrite history or merge into `{base}`: the user reviews the "
        "branch and merges it.",
        "",
    ]


CHAT_OUTPUT_GUIDE = """\
Respond with a JSON object of this shape (and nothing else in the file):

```json
{{"message": "<your reply to the user, markdown>", "actions": []}}
```

`message` is what the user reads; keep it conversational. `actions` (may be empty) are executed
in order, each independently; every action object lists all fields of the schema, with null for
the ones that do not apply. Available actions: {actions}.
`rename_chat` (field `title`) only works on your first reply in a chat: give the chat a short
title that reflects the topic then. `create_task` may name the new task with `ref` (a short
local name) and list in `blocked_by` what it waits for: refs of tasks created earlier in the same
answer, or ids of existing tasks. It then waits in Todo until those are Done, so several
`create_task` actions in one answer can form a chain of steps.

JSON schema:

```json
{schema}
```"""


def chat_input(
    *,
    chat_id: str,
    workspace_title: str,
    agent_name: str,
    instruction: str,
    history: list[dict],
    context_path: str,
    output_path: str,
    schema: dict,
    action_names: tuple[str, ...],
) -> str:
    """The chat input file: instruction, metadata, whole history as JSONL, output instruction."""
    guide = CHAT_OUTPUT_GUIDE.format(
        actions=", ".join(f"`{name}`" for name in action_names), schema=schema_json(schema)
    )
    return "\n".join(
        [
            "# Malamar Chat Context",
            "",
            "You are being invoked by Malamar's chat feature.",
            instruction.strip(),
            "",
            "## Chat Metadata",
            "",
            f"- Chat ID: {chat_id}",
            f"- Workspace: {workspace_title}",
            f"- Agent: {agent_name}",
            "",
            "## Conversation History",
            "",
            "```json",
            jsonl(history),
            "```",
            "",
            "## Additional Context",
            "",
            f"For workspace state and settings, read: {context_path}",
            "",
            "# Output Instruction",
            "",
            f"Write your response as JSON to: {output_path}",
            "",
            guide,
            "",
        ]
    )


def _notify(workspace, key: str) -> str:
    """ "on", "off", or "inherit (on)": the workspace's value and, if inherited, its effect."""
    value = getattr(workspace, key)
    if value != "inherit":
        return value
    state = "on" if notify_effective(workspace, key) else "off"
    return f"inherit (the global setting, currently {state})"


def _agent_cli_settings(agent) -> list[str]:
    """The agent's model, effort, extra arguments and custom command, where set."""
    lines = [
        f"{label}: {value}"
        for label, value in (
            ("Model", agent.model),
            ("Reasoning effort", agent.reasoning_effort),
            ("Extra arguments", json.dumps(agent.extra_args) if agent.extra_args else ""),
            ("Custom binary", agent.custom_binary),
            ("Argument template", agent.custom_args),
            ("Output", agent.custom_output if agent.cli_type == "custom" else ""),
        )
        if value
    ]
    return lines


def _checks(workspace) -> str:
    checks = workspace.checks or []
    if not checks:
        return "none"
    listed = "; ".join(
        f"{c['name']}: `{c['command']}` ({c['timeout_minutes']} min)" for c in checks
    )
    return f"{listed} (attempts before asking the user: {workspace.checks_attempts})"


def chat_context(
    *,
    workspace,
    agents: list,
    clis: list[dict],
    mailgun_configured: bool,
    temp_dir: str,
    review_tasks: list | None = None,
) -> str:
    """Workspace state for chat agents: settings, agents with ids, CLI health, email status;
    `review_tasks` (the Malamar agent's): the tasks In Review it may review."""
    directory = (
        f"static: {workspace.working_directory_path}"
        if workspace.working_directory_mode == "static"
        else f"temp folder (a new folder per task under {temp_dir})"
    )
    lines = [
        "# Workspace",
        "",
        f"- Title: {workspace.title}",
        f"- Working directory: {directory}",
        f"- Auto-delete done tasks: {'on' if workspace.auto_delete_done_tasks else 'off'}"
        f" (retention: {workspace.retention_days} days)",
        f"- Notify on error: {_notify(workspace, 'notify_on_error')}",
        f"- Notify on In Review: {_notify(workspace, 'notify_on_in_review')}",
        f"- Checks before In Review: {_checks(workspace)}",
        "",
        "## Workspace instruction",
        "",
        workspace.description.strip() or "(none)",
        "",
        "# Agents (in execution order)",
        "",
    ]
    if not agents:
        lines.append("No agents yet: tasks go straight to In Review until you create some.")
    for position, agent in enumerate(agents, start=1):
        lines += [
            f"## {position}. {agent.name} (id: {agent.id})",
            "",
            f"CLI: {agent.cli_type}",
            *_agent_cli_settings(agent),
            "",
            agent.instruction.strip(),
            "",
        ]
    lines += ["# CLIs", ""]
    for cli in clis:
        status = str(CliHealthStatus(cli["status"]).label).lower()  # every status, "slow" too
        error = f" ({cli['error']})" if cli.get("error") else ""
        lines.append(f"- {cli['name']} ({cli['cli_type']}): {status}{error}")
    lines += [
        "",
        "# Email notifications",
        "",
        "Mailgun is configured." if mailgun_configured else "Mailgun is not configured.",
        "",
    ]
    if review_tasks is not None:
        lines += review_section(review_tasks)
    return "\n".join(lines)


def review_section(tasks: list) -> list[str]:
    """The tasks In Review (oldest first), with the branch a review's Approve would merge."""
    lines = ["# Tasks waiting for review (In Review, oldest first)", ""]
    if not tasks:
        lines.append("None.")
    for task in tasks:
        branch = ""
        if task.branch_name and task.merged_at is None:
            branch = f" (branch {task.branch_name}, not merged into {task.branch_base} yet)"
        lines.append(f"- {task.id}: {task.summary}{branch}")
    return [*lines, ""]
