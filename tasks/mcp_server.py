"""`malamar mcp --workspace ID`: a Model Context Protocol server over stdio for agents.

Read tools look up the workspace's tasks (list, search, read one with its comments and
dependencies, related ones by text similarity); write tools create a task, comment, and review a
task In Review (approve, request changes, comment, with line comments), through the same
services as the web app, as "Agent via MCP" (core.actors.MCP_AGENT). The server acts
for one workspace: other workspaces' tasks are refused. Every refusal is a tool error with a
message (the model reads it); stdout belongs to the protocol, so nothing else prints there.
"""

import logging
import sys
from collections.abc import Callable
from functools import wraps
from typing import Literal

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

from core.actors import MCP_AGENT
from core.errors import ServiceError
from tasks import mcp_handshake, services
from tasks.mcp_stdio import serve_stdio
from tasks.models import Task, TaskStatus
from tasks.selectors import (
    SEARCH_QUERY_MAX,
    comments_for_task,
    related_tasks,
    task_dependencies,
    tasks_matching,
)
from workspaces.models import Workspace

LIST_LIMIT_MAX = 200
RELATED_LIMIT_MAX = 50
READ_ONLY = ToolAnnotations(readOnlyHint=True, openWorldHint=False)
WRITES = ToolAnnotations(readOnlyHint=False, destructiveHint=False, openWorldHint=False)
STATUS_HELP = "todo, in_progress, in_review or done"


def iso(value) -> str:
    return value.isoformat() if value else ""


def task_brief(task: Task) -> dict:
    return {
        "id": task.id,
        "summary": task.summary,
        "status": task.status,
        "updated_at": iso(task.updated_at),
    }


def comment_row(comment) -> dict:
    """A comment for get_task; a line comment also says where (file, lines, side, code)."""
    row = {
        "author": comment.author_name,
        "kind": comment.kind,
        "content": comment.content,
        "created_at": iso(comment.created_at),
    }
    if comment.verdict:
        row["verdict"] = comment.verdict
    if comment.anchor_path:
        row["line"] = {
            "path": comment.anchor_path,
            "line": comment.anchor_start_line,
            "end_line": comment.anchor_end_line,
            "side": comment.anchor_side,
            "code": comment.anchor_code,
        }
    return row


def status_value(status: str) -> str:
    """A status as stored ("todo"), from its value or its label ("In Progress")."""
    wanted = (status or "").strip().casefold().replace(" ", "_")
    for value, label in TaskStatus.choices:
        if wanted in (value, label.casefold().replace(" ", "_")):
            return value
    raise ToolError(f"Unknown status {status!r}: use {STATUS_HELP}")


def limit_value(limit: int, most: int) -> int:
    if not 1 <= limit <= most:
        raise ToolError(f"limit must be from 1 to {most}")
    return limit


def tool_errors(fn: Callable) -> Callable:
    """A service's refusal (validation, conflict…) as a tool error with its message."""

    @wraps(fn)
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ServiceError as exc:
            raise ToolError(exc.message) from None

    return call


class LineComment(BaseModel):
    """A comment on lines of a task's changes."""

    path: str = Field(description="A file the task's changes list")
    line: int = Field(description="First line (1-based)")
    end_line: int | None = Field(None, description="Last line (default: line)")
    side: Literal["new", "old"] = Field(
        "new", description="new: lines as the agents left them; old: as they were before"
    )
    body: str = Field(description="What you say about those lines (markdown)")
    run_id: str = Field("", description="The run whose changes you looked at ('' = the task's)")


class WorkspaceTools:
    """The tools, bound to the workspace the server was started for."""

    def __init__(self, workspace_id: str):
        self.workspace_id = workspace_id

    def workspace(self) -> Workspace:
        workspace = Workspace.objects.filter(id=self.workspace_id).first()
        if workspace is None:
            raise ToolError(f"Workspace {self.workspace_id} no longer exists")
        return workspace

    def task(self, task_id: str) -> Task:
        task = Task.objects.filter(id=(task_id or "").strip()).first()
        if task is None:
            raise ToolError(f"No task with id {task_id!r}")
        if task.workspace_id != self.workspace_id:
            raise ToolError(
                f"Task {task_id} belongs to another workspace: this server acts for workspace "
                f"{self.workspace_id} only"
            )
        return task

    # read tools ----------------------------------------------------------------------------
    def list_workspaces(self) -> dict:
        """Every workspace (id, title, instruction), the one this server acts for marked
        `current`. Task tools work on the current workspace only."""
        workspaces = [
            {
                "id": workspace.id,
                "title": workspace.title,
                "description": workspace.description,
                "current": workspace.id == self.workspace_id,
            }
            for workspace in Workspace.objects.by_activity()
        ]
        return {"workspaces": workspaces}

    def search_tasks(self, query: str = "", status: str = "", limit: int = 50) -> dict:
        """The workspace's tasks, most recently updated first. `query`: text the summary or
        description contains (case-insensitive; empty: every task); `status`: todo,
        in_progress, in_review or done (empty: any)."""
        self.workspace()
        if len(query or "") > SEARCH_QUERY_MAX:
            raise ToolError(f"query must be at most {SEARCH_QUERY_MAX} characters")
        tasks = tasks_matching(
            self.workspace_id, query=query, status=status_value(status) if status else None
        )
        limit = limit_value(limit, LIST_LIMIT_MAX)
        found = list(tasks[: limit + 1])
        rows = [{**task_brief(task), "comment_count": task.comment_count} for task in found]
        return {"tasks": rows[:limit], "more": len(found) > limit}

    def get_task(self, task_id: str) -> dict:
        """One task: summary, description, status, its comments oldest first (author, kind,
        content, time; a review's verdict, a line comment's place) and its dependencies (the
        tasks it waits for, and those waiting for it)."""
        task = self.task(task_id)
        comments = [comment_row(comment) for comment in comments_for_task(task)]
        return {
            **task_brief(task),
            "description": task.description,
            "created_at": iso(task.created_at),
            "comments": comments,
            "dependencies": task_dependencies(task),
        }

    def related_tasks(self, task_id: str = "", text: str = "", limit: int = 5) -> dict:
        """The workspace's tasks most similar in wording to a task (`task_id`) or to `text`,
        best first, each with a similarity from 0 to 1. Give one of the two."""
        if bool(task_id) == bool(text and text.strip()):
            raise ToolError("Give either task_id or text")
        task = self.task(task_id) if task_id else None
        ranked = related_tasks(
            task,
            workspace_id=self.workspace_id,
            text=text,
            limit=limit_value(limit, RELATED_LIMIT_MAX),
        )
        return {"tasks": [{**task_brief(found), "similarity": score} for found, score in ranked]}

    # write tools ---------------------------------------------------------------------------
    @tool_errors
    def create_task(self, summary: str, description: str = "") -> dict:
        """Create a task in this workspace's Todo column (the agents pick it up in turn)."""
        task = services.task_create(
            workspace=self.workspace(), summary=summary, description=description, actor=MCP_AGENT
        )
        return task_brief(task)

    @tool_errors
    def review_task(
        self,
        task_id: str,
        verdict: Literal["approve", "request_changes", "comment"],
        body: str = "",
        line_comments: list[LineComment] | None = None,
        merge: bool | None = None,
    ) -> dict:
        """Review a task that waits In Review (for the person, as "Agent via MCP").
        request_changes: post the comments and send the task back to the agents. comment: a
        note the agents read on their next pass (the task stays In Review). approve: Done; if
        its branch holds work its base lacks, give `merge`: true merges it first (a conflict
        refuses, nothing changes), false finishes without merging (the branch is kept).
        `line_comments` comment on lines of the task's changes (a changed file's path, line,
        end_line, side "new" or "old")."""
        task = self.task(task_id)
        review = services.task_review_submit(
            task=Task.objects.select_related("workspace").get(id=task.id),
            verdict=verdict,
            body=body,
            line_comments=[item.model_dump() for item in line_comments or []],
            merge=merge,
            actor=MCP_AGENT,
        )
        merged = review.merge.how if review.merge else ""
        return {
            "task_id": task.id,
            "status": review.task.status,
            "verdict": review.verdict,
            "comment_ids": [comment.id for comment in review.comments],
            "merged": merged,
        }

    @tool_errors
    def comment_on_task(self, task_id: str, content: str) -> dict:
        """Add a comment (markdown) to one of this workspace's tasks, as "Agent via MCP". Like
        any comment, it sends a task that is not Done through the agents again."""
        comment = services.comment_create_and_send_around(
            task=self.task(task_id), content=content, actor=MCP_AGENT
        )
        return {"id": comment.id, "task_id": comment.task_id, "created_at": iso(comment.created_at)}


def build_server(workspace_id: str) -> MCPServer:
    tools = WorkspaceTools(workspace_id)
    server = MCPServer(mcp_handshake.SERVER_NAME, instructions=mcp_handshake.INSTRUCTIONS)
    for method in (tools.list_workspaces, tools.search_tasks, tools.get_task, tools.related_tasks):
        server.add_tool(method, annotations=READ_ONLY)
    for method in (tools.create_task, tools.comment_on_task, tools.review_task):
        server.add_tool(method, annotations=WRITES)
    return server


def logs_to_stderr() -> None:
    """Malamar logs to stdout (settings.LOGGING), which is the protocol's here: every handler
    writing there writes to stderr instead (the SDK logs each request and tool error)."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.StreamHandler) and handler.stream is sys.stdout:
            handler.setStream(sys.stderr)


def serve(workspace_id: str) -> None:
    logs_to_stderr()
    # The SDK's own stdio transport reads lines unbounded and ignores broken ones (mcp_stdio).
    anyio.run(serve_stdio, build_server(workspace_id)._lowlevel_server)
