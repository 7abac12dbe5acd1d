"""Email (Mailgun) and webhook notifications, against local fake endpoints; the worker runs
in-process (`notified`)."""

import base64
import logging
from concurrent.futures import ThreadPoolExecutor

import pytest

from core.settings_store import settings_update
from notifications import services as notification_services
from notifications.senders import mailgun_base_url
from tests.conftest import error_of
from tests.http_fakes import Receiver
from tests.live import wait_until

KEY = "key-0123456789abcdef-secret"
MAILGUN = {
    "mailgun_api_key": KEY,
    "mailgun_domain": "mg.example.com",
    "mailgun_from_email": "malamar@mg.example.com",
    "mailgun_to_email": "me@example.com",
}


@pytest.fixture
def mailgun(monkeypatch):
    receiver = Receiver()
    monkeypatch.setenv("MALAMAR_MAILGUN_BASE_URL", receiver.url)
    yield receiver
    receiver.close()


def test_region_base_urls(monkeypatch):
    monkeypatch.delenv("MALAMAR_MAILGUN_BASE_URL", raising=False)
    assert mailgun_base_url("us") == "https://api.mailgun.net"
    assert mailgun_base_url("eu") == "https://api.eu.mailgun.net"


def test_test_email_success(api, mailgun):
    settings_update(changes=MAILGUN)
    response = api.post("/api/settings/test-email")
    assert response.status_code == 200 and response.json() == {"success": True}
    sent = mailgun.requests[0]
    assert sent["path"] == "/v3/mg.example.com/messages"
    assert base64.b64decode(sent["auth"].split()[1]).decode() == f"api:{KEY}"
    assert sent["data"]["subject"] == "Malamar Test Email"
    assert sent["data"]["to"] == "me@example.com"
    assert sent["data"]["from"] == "malamar@mg.example.com"


def test_test_email_missing_settings(api, mailgun):
    response = api.post("/api/settings/test-email")
    assert response.status_code == 400
    assert "mailgun_api_key" in error_of(response)["message"]
    assert mailgun.requests == []


def test_test_email_failure_reports_mailgun_message_without_the_key(api, mailgun, caplog):
    mailgun.status, mailgun.body = 401, {"message": "Invalid private key"}
    settings_update(changes=MAILGUN)
    with caplog.at_level(logging.DEBUG):
        response = api.post("/api/settings/test-email")
    assert response.status_code == 400
    assert error_of(response) == {
        "code": "EMAIL_FAILED",
        "message": "Mailgun error: HTTP 401: Invalid private key",
    }
    assert KEY not in response.content.decode()
    assert KEY not in caplog.text
    assert KEY not in api.get("/api/settings").content.decode()


def test_unreachable_mailgun_is_a_clear_error(api, monkeypatch):
    monkeypatch.setenv("MALAMAR_MAILGUN_BASE_URL", "http://127.0.0.1:9")
    settings_update(changes=MAILGUN)
    response = api.post("/api/settings/test-email")
    assert response.status_code == 400
    assert error_of(response)["message"].startswith("Mailgun error: could not reach Mailgun")


def test_settings_validation(api):
    assert api.put("/api/settings", {"mailgun_region": "mars"}).status_code == 400
    assert api.put("/api/settings", {"webhook_urls": ["ftp://x"]}).status_code == 400
    ok = api.put("/api/settings", {"mailgun_region": "eu", "webhook_urls": "http://a\nhttp://b"})
    assert ok.json()["webhook_urls"] == ["http://a", "http://b"]


@pytest.fixture
def notified(start_stack, monkeypatch):
    mail, hook = Receiver(), Receiver()
    monkeypatch.setattr(notification_services, "_pool", new_sending_pool())
    stack = start_stack(MALAMAR_MAILGUN_BASE_URL=mail.url)
    stack.api("PUT", "/settings", {**MAILGUN, "webhook_urls": [f"{hook.url}/hook"]}, expect=200)
    yield stack, mail, hook
    stack.stop()
    mail.close()
    hook.close()


def new_sending_pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=4, thread_name_prefix="malamar-notify")


def all_sent(stack) -> None:
    """Wait until the worker runs nothing (its runs hand their notifications to the sending
    pool before they end), then until the pool has sent everything handed to it."""
    stack.wait_idle()
    pool = notification_services._pool
    notification_services._pool = new_sending_pool()  # undone by the fixture's monkeypatch
    pool.shutdown(wait=True)


def test_error_and_in_review_notifications(notified):
    stack, mail, hook = notified
    ws = stack.workspace(agents=[("Planner", "gemini")])
    task = stack.task(ws, "@fake exit 7 model quota exceeded", summary="Fix the login")
    wait_until(lambda: mail.requests and hook.requests, timeout=20, what="error notifications")
    email = mail.requests[0]["data"]
    assert "Error" in email["subject"] and "Fix the login" in email["subject"]
    assert "model quota exceeded (CLI exited with code 7)" in email["text"]
    assert f"/workspaces/{ws['id']}/?tab=tasks&task={task['id']}" in email["text"]
    payload = hook.requests[0]["data"]
    assert payload["event"] == "task.error" and payload["task"]["id"] == task["id"]
    assert payload["workspace"]["title"] == ws["title"]
    assert payload["link"].endswith(f"/?tab=tasks&task={task['id']}")
    # The retry fails again: same streak, no second notification.
    stack.wait_comments(task, 2, timeout=20)
    all_sent(stack)
    assert len(mail.requests) == 1 and len(hook.requests) == 1
    stack.api(
        "POST",
        f"/tasks/{task['id']}/comments",
        {"content": "try again\n@fake review Fixed it, please check."},
        expect=201,
    )
    wait_until(
        lambda: len(mail.requests) == 2 and len(hook.requests) == 2,
        timeout=20,
        what="in-review notifications",
    )
    assert "ready for review" in mail.requests[1]["data"]["subject"]
    assert "Fixed it, please check." in mail.requests[1]["data"]["text"]
    assert hook.requests[1]["data"]["event"] == "task.in_review"
    assert hook.requests[1]["data"]["status"] == "in_review"


def test_the_global_switches_decide_for_workspaces_that_inherit(
    task, monkeypatch, django_capture_on_commit_callbacks
):
    from notifications import services
    from workspaces.services import workspace_update

    sent = []
    monkeypatch.setattr(services, "_deliver", lambda kind, *_args: sent.append(kind))

    def notify_both():
        with django_capture_on_commit_callbacks(execute=True):
            services.notify_task_error(task=task, message="boom", failure_streak=1)
            services.notify_task_in_review(task=task, last_comment="done")

    notify_both()  # the workspace was created while both global switches were on
    assert sent == ["error", "in_review"]
    settings_update(changes={"notify_on_error": False, "notify_on_in_review": False})
    sent.clear()
    notify_both()  # turned off globally: an existing workspace stops sending too
    assert sent == []
    workspace_update(workspace=task.workspace, notify_on_error="on")
    notify_both()  # its own "on" wins over the global "off"
    assert sent == ["error"]


def test_no_notifications_when_toggled_off_for_user_moves_or_chats(notified):
    stack, mail, hook = notified
    ws = stack.workspace(
        agents=[("Planner", "codex")], notify_on_error="off", notify_on_in_review="off"
    )
    quiet = stack.task(ws, "@fake exit 1 boom")
    stack.wait_comments(quiet, 1)
    done = stack.task(ws, "@fake review done")
    stack.wait_status(done, "in_review")
    loud = stack.workspace(title="Loud", agents=[("Planner", "codex")])
    running = stack.task(loud, "@fake sleep 30")
    stack.wait_run(3)
    stack.api("PUT", f"/tasks/{running['id']}", {"status": "in_review"}, expect=200)  # the user
    chat = stack.api("POST", f"/workspaces/{loud['id']}/chats", {}, expect=201)
    stack.api(
        "POST", f"/chats/{chat['id']}/messages", {"message": "@fake exit 3 chat error"}, expect=201
    )
    wait_until(
        lambda: len(stack.api("GET", f"/chats/{chat['id']}")["messages"]) == 2,
        timeout=20,
        what="chat error",
    )
    all_sent(stack)
    assert mail.requests == [] and hook.requests == []


def test_a_slow_webhook_does_not_delay_the_next_agent_step(notified):
    stack, _mail, hook = notified
    hook.open.clear()  # the webhook answers only when the test lets it
    ws = stack.workspace(agents=[("Planner", "claude")])
    first = stack.task(ws, "@fake review first done", summary="first")
    stack.wait_status(first, "in_review")
    second = stack.task(ws, "@fake review second done", summary="second")
    stack.wait_status(second, "in_review", timeout=20)
    hook.open.set()
    wait_until(lambda: len(hook.requests) >= 1, timeout=20, what="the slow webhook to answer")
    second_run = stack.task_runs()[-1]
    assert second_run["time"] < hook.requests[0]["answered"], "the next run waited for the webhook"
