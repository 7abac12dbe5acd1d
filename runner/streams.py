"""The one model of what an agent does, whatever its CLI: traces, live text, usage.

Each CLI's stream parser (`runner.clis.<cli>`) turns its JSON lines into these; this module holds
the CLI-independent parts: the types, the tool vocabulary, `parse_line` and `UserTerms`.

Traces follow the chat-surface reference: `thought`, `plan`, `action` (with an action kind:
file-read, file-edit, file-create, file-delete, search, command, command-result, generic),
plus `text` (what the agent says), `status` and `error`. Parsers are pure and never raise on
odd input: an unknown line is simply ignored.
"""

import json
import re
import shlex
from dataclasses import dataclass, field, replace
from pathlib import PurePosixPath
from typing import Any, Protocol

from core.storable import loads_storable

OUTPUT_CHARS = 2000
TEXT_CHARS = 4000


@dataclass
class Trace:
    kind: str
    text: str
    action_kind: str | None = None
    detail: dict = field(default_factory=dict)


@dataclass
class Delta:
    """Live text while the agent writes (shown, not stored: the full text arrives as a Trace)."""

    text: str


@dataclass
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    total: bool = False  # True: replaces the running totals; False: adds to them


@dataclass
class ModelUsed:
    """The model the CLI says it runs (recorded on the run instead of the configured one)."""

    name: str


StreamItem = Trace | Delta | Usage | ModelUsed


class StreamParser(Protocol):
    """Turns one run's streamed JSON events into traces, live text and usage. One instance per
    run (parsers remember, e.g., which tool calls were commands); never raises on odd input."""

    def parse(self, event: dict) -> list[StreamItem]: ...


READ = {"read", "read_file", "view", "notebookread", "read_many_files"}
EDIT = {"edit", "multiedit", "replace", "notebookedit", "patch", "apply_patch", "str_replace"}
CREATE = {"write", "write_file", "create"}
DELETE = {"delete", "delete_file", "rm"}
SEARCH = {
    "grep",
    "glob",
    "ls",
    "list",
    "list_directory",
    "search_file_content",
    "websearch",
    "web_search",
    "google_web_search",
    "find",
    "codesearch",
    "webfetch",
    "web_fetch",
}
COMMAND = {"bash", "shell", "run_shell_command", "command", "exec"}
PLAN = {"todowrite", "todo_write", "write_todos", "todo_list", "todoread"}


def trim(text: Any, limit: int = OUTPUT_CHARS) -> str:
    text = text if isinstance(text, str) else json.dumps(text, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit] + f"… ({len(text) - limit} more)"


def _path(args: dict) -> str:
    for key in ("file_path", "filePath", "path", "absolute_path", "notebook_path", "filename"):
        if isinstance(args.get(key), str):
            return args[key]
    return ""


def plan_text(args: Any) -> str:
    todos = args.get("todos") or args.get("items") or [] if isinstance(args, dict) else []
    lines = []
    for todo in todos if isinstance(todos, list) else []:
        if isinstance(todo, dict):
            done = todo.get("status") == "completed" or todo.get("completed") is True
            lines.append(f"[{'x' if done else ' '}] {todo.get('content') or todo.get('text', '')}")
    return "\n".join(lines) or "Updated the plan"


def tool_trace(name: str, args: Any, cwd: str = "") -> Trace:
    """A tool call, in words: "Editing app/models.py", "Running `pytest`"."""
    key = (name or "").lower()
    args = args if isinstance(args, dict) else {}
    path = _path(args)
    if key in PLAN:
        return Trace("plan", plan_text(args))
    if key in COMMAND:
        command = args.get("command") or args.get("cmd") or ""
        command = " ".join(command) if isinstance(command, list) else str(command)
        where = args.get("workdir") or args.get("cwd") or cwd
        detail = {"command": command, "cwd": where}
        return Trace("action", f"Running `{trim(command, 200)}`", "command", detail)
    for names, kind, verb in (
        (READ, "file-read", "Reading"),
        (EDIT, "file-edit", "Editing"),
        (CREATE, "file-create", "Writing"),
        (DELETE, "file-delete", "Deleting"),
    ):
        if key in names:
            return Trace("action", f"{verb} {path or name}", kind, {"path": path})
    if key in SEARCH:
        what = args.get("pattern") or args.get("query") or args.get("url") or path or ""
        return Trace("action", f"Searching {trim(str(what), 200)}".strip(), "search", {})
    return Trace("action", f"Using {name}", "generic", {"tool": name, "input": trim(args, 500)})


def command_result(output: Any, exit_code: Any = None, *, failed: bool = False) -> Trace:
    text = "Command failed" if failed or (exit_code not in (None, 0)) else "Command finished"
    if exit_code is not None:
        text += f" (exit {exit_code})"
    detail = {"exit_code": exit_code, "output": trim(output or "")}
    return Trace("action", text, "command-result", detail)


# In the user's terms ------------------------------------------------------------------------

# Malamar's own files in the temp folder (runner.files, the processors): what the agent reads
# to learn its job and where it writes its answer. Matched by name, wherever the agent found them.
TASK_INPUT = re.compile(r"malamar_task_[\w-]+\.md")
CHAT_CONTEXT = re.compile(r"malamar_chat_[\w-]+_context\.md")
CHAT_INPUT = re.compile(r"malamar_chat_[\w-]+\.md")
# A run's MCP configuration (runner.worker.execution._mcp_setup): next to its answer file.
MCP_CONFIG = re.compile(r"malamar_(?:chat_)?output_[\w-]+_mcp\.json")
ANSWER_FILE = re.compile(r"malamar_(?:chat_)?output_[\w-]+\.json")
SCHEMA_FILE = re.compile(r"malamar_schema_\w+\.json")
ATTACHMENT = re.compile(r"malamar_chat_[\w-]+_attachments/(?P<name>[^/]+)$")
ANSWER_TOOLS = {"structuredoutput"}  # Claude's --json-schema answer
# Malamar's own MCP tools (tasks/mcp_server.py: a test keeps both lists equal), as each CLI
# names them: Claude `mcp__malamar__create_task`, Codex `malamar.create_task`, OpenCode
# `malamar_create_task`, Gemini the bare name (`malamar__create_task` when another server
# has a tool of that name).
MALAMAR_TOOLS = {
    "list_workspaces": "Looking at the workspaces",
    "search_tasks": "Looking through the tasks",
    "get_task": "Reading another task",
    "related_tasks": "Looking for related tasks",
    "create_task": "Creating a task",
    "comment_on_task": "Commenting on a task",
    "review_task": "Reviewing a task",
}
MALAMAR_TOOL = re.compile(r"(?:mcp__malamar__|malamar(?:__|\.|_))?(?P<tool>\w+)")
# Any other MCP server's tool, as Claude (`mcp__github__create_issue`) or Codex
# (`github.create_issue`) names it.
OTHER_MCP_TOOL = re.compile(r"(?:mcp__(?P<server>[\w-]+?)__|(?P<dotted>[\w-]+)\.)(?P<tool>\w+)")
VERBS = {
    "file-read": "Reading",
    "file-edit": "Editing",
    "file-create": "Writing",
    "file-delete": "Deleting",
}
SHELLS = {"bash", "sh", "zsh", "dash"}


def _unwrap_shell(command: str) -> str:
    """`/bin/bash -lc 'pytest -q'` (how Codex runs everything) -> `pytest -q`."""
    try:
        parts = shlex.split(command)
    except ValueError:
        return command
    shell = len(parts) == 3 and PurePosixPath(parts[0]).name in SHELLS
    return parts[2] if shell and parts[1] in ("-c", "-lc", "-lic") else command


class UserTerms:
    """Say what the agent does the way the user sees it, for every CLI: Malamar's plumbing (the
    input and context files it reads, the answer it writes, Claude's StructuredOutput tool, the
    Malamar agent's guide) in plain words, paths inside the working directory relative to it.

    Stateful per run: the result of a command shown as plumbing is dropped with it."""

    def __init__(self, *, cwd: str = "", knowledge_dir: str = ""):
        self.cwd = cwd.rstrip("/")
        self.knowledge_dir = knowledge_dir.rstrip("/")
        self.hide_result = False

    def apply(self, trace: Trace) -> Trace | None:
        if trace.kind != "action":
            return trace
        kind, detail = trace.action_kind, trace.detail or {}
        if kind == "command-result":
            hide, self.hide_result = self.hide_result, False
            return None if hide else trace
        if kind == "command":
            return self._command(trace, str(detail.get("command") or ""))
        if kind in VERBS:
            path = str(detail.get("path") or "")
            plumbing = self._plumbing(path)
            if plumbing:
                return Trace("action", plumbing, "generic")
            return replace(trace, text=f"{VERBS[kind]} {self.place(path) or 'a file'}")
        if kind == "generic" and detail.get("tool"):
            return self._tool(trace, str(detail["tool"]))
        return replace(trace, text=self._paths_in(trace.text))

    def _tool(self, trace: Trace, name: str) -> Trace:
        """A tool without a verb of its own: Malamar's answer and MCP tools in words."""
        if name.lower() in ANSWER_TOOLS:
            return Trace("action", "Writing the answer", "generic")
        ours = MALAMAR_TOOL.fullmatch(name)
        if ours and ours["tool"] in MALAMAR_TOOLS:
            return replace(trace, text=MALAMAR_TOOLS[ours["tool"]])
        other = OTHER_MCP_TOOL.fullmatch(name)
        if other:
            server = other["server"] or other["dotted"]
            return replace(trace, text=f"Using {other['tool']} from {server}")
        return replace(trace, text=self._paths_in(trace.text))

    def _plumbing(self, text: str) -> str:
        """What touching Malamar's own file(s) named in `text` means, or ""."""
        if MCP_CONFIG.search(text):
            return "Reading Malamar's tool setup"
        if ANSWER_FILE.search(text):
            return "Writing the answer"
        if TASK_INPUT.search(text):
            return "Reading the task"
        if CHAT_CONTEXT.search(text):
            return "Reading the workspace's setup"
        if CHAT_INPUT.search(text):
            return "Reading the conversation"
        if SCHEMA_FILE.search(text):
            return "Reading the answer format"
        return ""

    def _command(self, trace: Trace, command: str) -> Trace:
        plumbing = self._plumbing(command)
        if not plumbing and self.knowledge_dir and self.knowledge_dir in command:
            plumbing = "Looking things up in Malamar's guide"
        self.hide_result = bool(plumbing)
        if plumbing:
            return Trace("action", plumbing, "generic")
        shown = self._paths_in(_unwrap_shell(command))
        return replace(trace, text=f"Running `{trim(shown, 200)}`")

    def place(self, path: str) -> str:
        """A path as the user knows it."""
        attachment = ATTACHMENT.search(path)
        if attachment:
            return f"the attachment {attachment['name']}"
        for root, inside, itself in (
            (self.cwd, "{}", "the working directory"),
            (self.knowledge_dir, "{} in Malamar's guide", "Malamar's guide"),
        ):
            if not root:
                continue
            if path == root:
                return itself
            if path.startswith(root + "/"):
                return inside.format(path[len(root) + 1 :])
        return path

    def _paths_in(self, text: str) -> str:
        """Paths inside the working directory relative to it, in free text (a command, a search)."""
        if self.knowledge_dir:
            text = text.replace(self.knowledge_dir + "/", "").replace(
                self.knowledge_dir, "Malamar's guide"
            )
        if self.cwd:
            text = text.replace(self.cwd + "/", "")
            text = re.sub(re.escape(self.cwd) + r"(?=[\s'\";&|)]|$)", ".", text)
        return text


def parse_line(parser: StreamParser, line: str) -> list[StreamItem]:
    """Items from one stdout line; non-JSON lines (banners, progress) are ignored."""
    line = line.strip()
    if not line.startswith("{"):
        return []
    try:
        event = loads_storable(line)
    except ValueError:
        return []
    if not isinstance(event, dict):
        return []
    try:
        return parser.parse(event)
    except (AttributeError, TypeError, ValueError):
        return []
