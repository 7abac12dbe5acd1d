"""The news a page shows for an event (malamar_site/news.py): which events bring a toast, in
which words, with which link; the relay sends them with the event."""

from malamar_site.news import news_for
from workspaces.links import workspace_tab_url

TASK = {"workspace_id": "W", "task_id": "T", "task_summary": "Fix the bug"}
CHAT = {"workspace_id": "W", "chat_id": "C", "chat_title": "Kickoff"}
TASK_HREF = workspace_tab_url("W", "tasks", task="T")
CHAT_HREF = workspace_tab_url("W", "chat", chat="C")


def test_an_error_toasts_quietly_and_notifies():
    [news] = news_for("task.error_occurred", {**TASK, "error_message": "CLI exited with code 1"})
    assert news == {
        "href": TASK_HREF,
        "level": "error",
        "message": "Error in “Fix the bug”",
        "detail": "CLI exited with code 1",
        "quiet": True,  # not for the page whose popup shows that task
        "notify": ["Error: Fix the bug", "CLI exited with code 1"],
    }


def test_only_agents_moving_a_task_to_review_is_news():
    review = {**TASK, "old_status": "in_progress", "new_status": "in_review"}
    [news] = news_for("task.status_changed", {**review, "actor_type": "agent"})
    assert (news["level"], news["message"], news["detail"]) == (
        "success",
        "Ready for your review",
        "Fix the bug",
    )
    assert news["notify"] == ["Ready for review: Fix the bug", "Agents need you"]
    assert "quiet" not in news  # shown even on the page whose popup shows it
    assert news_for("task.status_changed", {**review, "actor_type": "user"}) == []
    assert news_for("task.status_changed", {**TASK, "new_status": "done"}) == []


def test_agent_comments_and_unblocked_tasks():
    [news] = news_for("task.comment_added", {**TASK, "author_type": "agent", "author_name": "Bo"})
    assert (news["message"], news["quiet"], news["href"]) == ("Bo commented", True, TASK_HREF)
    assert news_for("task.comment_added", {**TASK, "author_type": "user"}) == []
    [news] = news_for("task.unblocked", TASK)
    assert news["message"] == "No longer waiting: it can start" and news["href"] == TASK_HREF


def test_a_cli_pause_is_one_toast_without_a_link_and_its_end_in_the_pages_clock():
    until = "2030-01-02T03:04:05+00:00"
    [news] = news_for("cli.limited", {"name": "Claude Code", "until": until, "task_id": "T"})
    assert news["message"] == "Claude Code is out of quota" and news["href"] == ""
    assert news["detail"] == "Work that needs it waits until {at}." and news["at"] == until
    [news] = news_for("cli.limited", {"name": "Claude Code"})
    assert news["detail"] == "Work that needs it waits; Malamar checks again on a back-off."
    [news] = news_for("cli.resumed", {"name": "Claude Code", "workspace_id": "W", "task_id": "T"})
    assert (news["level"], news["message"], news["href"]) == (
        "success",
        "Claude Code works again",
        "",
    )


def test_replies_toast_unless_stopped_or_waiting():
    [news] = news_for("chat.processing_finished", {**CHAT, "agent_name": "Malamar"})
    assert (news["level"], news["message"]) == ("info", "Malamar replied")
    assert news["detail"] == "Kickoff"
    assert news["href"] == CHAT_HREF and news["quiet"] is True
    [failed] = news_for("chat.processing_finished", {**CHAT, "outcome": "failed"})
    assert (failed["level"], failed["message"]) == ("error", "An agent could not reply")
    for outcome in ("stopped", "waiting"):
        assert news_for("chat.processing_finished", {**CHAT, "outcome": outcome}) == []


def test_a_reply_that_created_tasks_links_each():
    created = [{"task_id": "T1", "summary": "Write the docs"}, {"task_id": "T2"}, {"summary": "x"}]
    news = news_for("chat.message_added", {**CHAT, "created_tasks": created})
    assert [(n["message"], n["detail"]) for n in news] == [
        ("Task created: Write the docs", "From “Kickoff”"),
        ("Task created", "From “Kickoff”"),
    ]
    assert [n["href"] for n in news] == [
        workspace_tab_url("W", "tasks", task="T1"),
        workspace_tab_url("W", "tasks", task="T2"),
    ]
    assert all(n["quiet"] for n in news)  # the chat on screen shows them as action cards
    assert news_for("chat.message_added", CHAT) == []


def test_a_silent_run_warns_in_minutes():
    payload = {**TASK, "agent_name": "Sleeper", "silent_seconds": 300, "run_id": "R"}
    [news] = news_for("run.stalled", payload)
    assert (news["level"], news["message"], news["href"]) == (
        "warning",
        "Sleeper has printed nothing for 5 min",
        TASK_HREF,
    )
    [news] = news_for("run.stalled", {"workspace_id": "W", "silent_seconds": 2})
    assert news["message"] == "An agent has printed nothing for 1 min" and news["href"] == ""


def test_other_events_are_no_news():
    for event_type in ("task.updated", "task.created", "agents.changed", "run.trace"):
        assert news_for(event_type, TASK) == []
