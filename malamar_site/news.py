"""What a page says about an event: a toast, and a browser notification while its tab is hidden.

Worded here, once: the relay sends each event with its news (`news` in the event's data, see
`core.relay` and settings.EVENT_NEWS), and live.js shows them. Each item is
`{level, message, detail?, href?, at?, quiet?, notify?}`: `href` opens the item, `at` an ISO
time the page writes in its own clock where the detail says `{at}`, `quiet` keeps the item
off the screen of a page whose popup shows the task or chat already, `notify` is the browser
notification's `[title, body]`. Most events are news to nobody: `[]`.
"""

from workspaces.links import workspace_tab_url


def _href(payload: dict) -> str:
    workspace_id = payload.get("workspace_id")
    if payload.get("task_id") and workspace_id:
        return workspace_tab_url(workspace_id, "tasks", task=payload["task_id"])
    if payload.get("chat_id") and workspace_id:
        return workspace_tab_url(workspace_id, "chat", chat=payload["chat_id"])
    return ""


def _toast(level: str, message: str, detail: str = "", **extra) -> dict:
    return {"level": level, "message": message, "detail": detail or "", **extra}


def _error(p: dict) -> list[dict]:
    summary, error = p.get("task_summary"), p.get("error_message") or ""
    message = f"Error in “{summary}”" if summary else "An agent run failed"
    notify = [f"Error: {summary or 'a task'}", error]
    return [_toast("error", message, error, quiet=True, notify=notify)]


def _status(p: dict) -> list[dict]:
    if p.get("new_status") != "in_review" or p.get("actor_type") == "user":
        return []
    summary = p.get("task_summary")
    notify = [f"Ready for review: {summary or 'a task'}", "Agents need you"]
    return [_toast("success", "Ready for your review", summary, notify=notify)]


def _comment(p: dict) -> list[dict]:
    if p.get("author_type") != "agent":
        return []
    message = f"{p.get('author_name') or 'An agent'} commented"
    return [_toast("info", message, p.get("task_summary"), quiet=True)]


def _limited(p: dict) -> list[dict]:
    # One toast per pause of a CLI, never one per waiting task (DESIGN "Usage limits").
    detail = "Work that needs it waits; Malamar checks again on a back-off."
    if p.get("until"):
        detail = "Work that needs it waits until {at}."
    message = f"{p.get('name') or 'A CLI'} is out of quota"
    return [_toast("info", message, detail, at=p.get("until"), href="")]


def _resumed(p: dict) -> list[dict]:
    message = f"{p.get('name') or 'A CLI'} works again"
    return [_toast("success", message, "The work that waited for it continues.", href="")]


def _replied(p: dict) -> list[dict]:
    # A stopped reply says nothing; one waiting for a CLI out of quota says so in its toast.
    if p.get("outcome") in ("stopped", "waiting"):
        return []
    failed = p.get("outcome") == "failed"
    message = f"{p.get('agent_name') or 'An agent'} {'could not reply' if failed else 'replied'}"
    return [_toast("error" if failed else "info", message, p.get("chat_title"), quiet=True)]


def _tasks_created(p: dict) -> list[dict]:
    # A reply that created tasks: a link to each (the chat on screen has action cards for them).
    detail = f"From “{p['chat_title']}”" if p.get("chat_title") else ""
    tasks = [t for t in p.get("created_tasks") or [] if isinstance(t, dict) and t.get("task_id")]
    return [
        _toast(
            "success",
            f"Task created: {task['summary']}" if task.get("summary") else "Task created",
            detail,
            href=_href({"workspace_id": p.get("workspace_id"), "task_id": task["task_id"]}),
            quiet=True,
        )
        for task in tasks
    ]


def _stalled(p: dict) -> list[dict]:
    minutes = max(1, round((p.get("silent_seconds") or 0) / 60))
    message = f"{p.get('agent_name') or 'An agent'} has printed nothing for {minutes} min"
    detail = "The CLI may be stuck, for example without network. Cancel it or wait."
    return [_toast("warning", message, detail)]


def _unblocked(p: dict) -> list[dict]:
    return [_toast("info", "No longer waiting: it can start", p.get("task_summary"))]


NEWS = {
    "task.error_occurred": _error,
    "task.status_changed": _status,
    "task.unblocked": _unblocked,
    "task.comment_added": _comment,
    "cli.limited": _limited,
    "cli.resumed": _resumed,
    "chat.processing_finished": _replied,
    "chat.message_added": _tasks_created,
    "run.stalled": _stalled,
}


def news_for(event_type: str, payload: dict) -> list[dict]:
    """The news an event brings to a page (worded as above), each with its link."""
    word = NEWS.get(event_type)
    items = word(payload) if word else []
    return [{"href": _href(payload), **item} for item in items]
