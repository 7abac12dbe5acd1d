"""The input files agents read: context, role, task, history, and the output instruction."""

import json

from runner.schemas import schema_json, task_schema

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


def jsonl(rows: list[dict]) -> str:
    return "\n".join(json.dumps(row, ensure_ascii=False) for row in rows)


def comment_row(comment, author: str) -> dict:
    row = {"author": author}
    if comment.agent_id:
        row["agent_id"] = comment.agent_id
    if comment.user_id:
        row["user_id"] = comment.user_id
    row["content"] = comment.content
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


def task_input(
    *,
    workspace,
    agent,
    agent_names: list[str],
    task,
    comments: list[dict],
    logs: list[dict],
    output_path: str,
) -> str:
    """The task input file, in the spec's structure (comments and logs as JSONL, oldest first)."""
    others = "\n".join(
        f"- {name} (you)" if name == agent.name else f"- {name}" for name in agent_names
    )
    parts = [
        "# Malamar Context",
        "You are being orchestrated by Malamar, a multi-agent workflow system.",
        workspace.description.strip(),
        "",
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
        jsonl(comments),
        "```",
        "",
        "## Activity Log",
        "",
        "```json",
        jsonl(logs),
        "```",
        "",
        "# Output Instruction",
        f"Write your response as JSON to: {output_path}",
        "",
        TASK_OUTPUT_GUIDE.format(schema=schema_json(task_schema())),
        "",
    ]
    return "\n".join(parts)
