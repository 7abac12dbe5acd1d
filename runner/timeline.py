"""Group a run's traces into what a person reads (the chat-surface reference's rules).

A command and its result become one entry (command, cwd, exit code, trimmed output); reads and
searches in a row become one "explored" entry; edits in a row one "edited" entry; a plan
becomes a checklist; thoughts and the agent's own text stay as short notes. Pure functions
over TraceEvent-like objects (kind, action_kind, text, detail, seq).
"""

import re
from dataclasses import dataclass, field

EXPLORE = {"file-read", "search"}
EDIT = {"file-edit", "file-create", "file-delete"}
CHECK_LINE = re.compile(r"^\[(?P<mark>[ xX])\]\s*(?P<text>.*)$")
NOTE_CHARS = 600


@dataclass
class Group:
    kind: str  # command | explore | edit | plan | thought | text | status | error | action
    # | output (a check's)
    text: str = ""
    items: list = field(default_factory=list)
    command: str = ""
    cwd: str = ""
    exit_code: int | None = None
    output: str = ""
    finished: bool = False
    failed: bool = False


def _note(text: str) -> str:
    text = (text or "").strip()
    return text if len(text) <= NOTE_CHARS else text[:NOTE_CHARS].rstrip() + "…"


OUTPUT_LINES = 200  # of a check's output in its run's timeline (the whole: its output page)


def _last_lines(text: str) -> str:
    return "\n".join(text.splitlines()[-OUTPUT_LINES:])


def _checklist(text: str) -> list[dict]:
    items = []
    for line in (text or "").splitlines():
        match = CHECK_LINE.match(line.strip())
        if match:
            items.append({"done": match["mark"] != " ", "text": match["text"]})
        elif line.strip():
            items.append({"done": False, "text": line.strip()})
    return items


def _summary(kind: str, items: list) -> str:
    if kind == "explore":
        reads = sum(1 for item in items if item["kind"] == "file-read")
        searches = len(items) - reads
        parts = []
        if reads:
            parts.append(f"read {reads} file{'s' if reads != 1 else ''}")
        if searches:
            parts.append(f"{searches} search{'es' if searches != 1 else ''}")
        return "Explored: " + ", ".join(parts)
    count = len({item["text"] for item in items})
    return f"Changed {count} file{'s' if count != 1 else ''}"


def group_traces(traces) -> list[Group]:
    groups: list[Group] = []
    open_command: Group | None = None
    for trace in traces:
        kind, action = trace.kind, trace.action_kind or ""
        detail = trace.detail or {}
        if kind == "action" and action == "command-result":
            target = open_command or Group("command", text="Command")
            if open_command is None:
                groups.append(target)
            target.exit_code = detail.get("exit_code")
            target.output = detail.get("output") or ""
            target.finished = True
            target.failed = target.exit_code not in (None, 0) or "failed" in trace.text.lower()
            open_command = None
            continue
        if kind == "action" and action == "command":
            open_command = Group(
                "command",
                text=trace.text,
                command=detail.get("command") or trace.text,
                cwd=detail.get("cwd") or "",
            )
            groups.append(open_command)
            continue
        if kind == "action" and (action in EXPLORE or action in EDIT):
            group_kind = "explore" if action in EXPLORE else "edit"
            if not groups or groups[-1].kind != group_kind:
                groups.append(Group(group_kind))
            groups[-1].items.append({"kind": action, "text": trace.text})
            groups[-1].text = _summary(group_kind, groups[-1].items)
            continue
        if kind == "output":  # a check's output (issue 30): one block, its last lines
            if not groups or groups[-1].kind != "output":
                groups.append(Group("output", text="Output"))
            groups[-1].output = _last_lines(f"{groups[-1].output}\n{trace.text}".lstrip("\n"))
            continue
        if kind == "plan":
            groups.append(Group("plan", text="Plan", items=_checklist(trace.text)))
        elif kind in ("thought", "text", "status", "error"):
            if kind == "status" and groups and groups[-1].kind == "status":
                groups[-1].text = _note(trace.text)  # keep the latest status only
            else:
                groups.append(Group(kind, text=_note(trace.text)))
        else:
            groups.append(Group("action", text=_note(trace.text)))
    return groups
