"""Tell the user when a task needs them: on an error and when it reaches In Review.

Email (Mailgun) and webhooks, per the global settings and the workspace's switches ("inherit"
follows the global switch: workspaces.selectors.notify_effective decides). Sending is
fire and forget on a small thread pool, so a slow or dead endpoint never delays the runner;
failures are logged and never retried. One error notification per failure streak.
"""

import logging
from concurrent.futures import ThreadPoolExecutor

from django.conf import settings as django_settings
from django.db import transaction
from django.urls import reverse

from core.errors import ServiceError, ValidationFailed
from core.settings_store import mailgun_configured, settings_get
from notifications.senders import DeliveryFailed, mailgun_send, webhook_post
from workspaces.links import workspace_tab_url
from workspaces.selectors import notify_effective

log = logging.getLogger(__name__)
_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="malamar-notify")

TEST_SUBJECT = "Malamar Test Email"
TEST_BODY = (
    "This is a test email from Malamar. If you received this, your email notifications are "
    "configured correctly."
)


class EmailFailed(ServiceError):
    code = "EMAIL_FAILED"
    status = 400


def task_link(task) -> str:
    return django_settings.PUBLIC_URL + workspace_tab_url(task.workspace_id, "tasks", task=task.id)


def needs_you_link() -> str:
    """The "Needs you" page: everything that waits for the person, in every workspace."""
    return django_settings.PUBLIC_URL + reverse("needs_you")


def _message(kind: str, task, detail: str) -> dict:
    workspace = task.workspace.title
    if kind == "error":
        subject = f'[Malamar] Error in "{task.summary}" ({workspace})'
        intro = "An agent run failed. Malamar will retry; the error was:"
    else:
        subject = f'[Malamar] "{task.summary}" is ready for review ({workspace})'
        intro = "The task moved to In Review and waits for you. Latest agent comment:"
    text = (
        f"Workspace: {workspace}\nTask: {task.summary}\n\n{intro}\n\n{detail or '(none)'}\n\n"
        f"Open the task: {task_link(task)}\n"
        f"Everything that waits for you: {needs_you_link()}\n"
    )
    return {"subject": subject, "text": text}


def _webhook_payload(kind: str, task, detail: str) -> dict:
    return {
        "event": f"task.{kind}",
        "workspace": {"id": task.workspace_id, "title": task.workspace.title},
        "task": {"id": task.id, "summary": task.summary, "status": task.status},
        "status": task.status,
        "message": detail,
        "link": task_link(task),
        "needs_you_link": needs_you_link(),
    }


def _deliver(kind: str, task, detail, values: dict | None = None) -> None:
    """`values`: the settings, when the caller read them already (the runner, once per pass);
    `detail`: the text, or a function that reads it (only when there is somewhere to send)."""
    values = values or settings_get()
    if callable(detail) and (mailgun_configured(values) or values.get("webhook_urls")):
        detail = detail()
    if mailgun_configured(values):
        message = _message(kind, task, detail)
        _pool.submit(_send_email, values, message, task.id)
    urls = values.get("webhook_urls") or []
    payload = _webhook_payload(kind, task, detail) if urls else None
    for url in urls:
        _pool.submit(_send_webhook, url, payload, task.id)


def _send_email(values: dict, message: dict, task_id: str) -> None:
    try:
        mailgun_send(values, subject=message["subject"], text=message["text"])
    except DeliveryFailed as exc:
        log.warning("Email notification failed", extra={"task_id": task_id, "error": str(exc)})
    except Exception:
        log.exception("Email notification failed", extra={"task_id": task_id})


def _send_webhook(url: str, payload: dict, task_id: str) -> None:
    try:
        webhook_post(url, payload)
    except DeliveryFailed as exc:
        log.warning("Webhook notification failed", extra={"task_id": task_id, "error": str(exc)})
    except Exception:
        log.exception("Webhook notification failed", extra={"task_id": task_id})


def notify_task_error(
    *, task, message: str, failure_streak: int, settings: dict | None = None
) -> None:
    """After the error is committed: notify once per failure streak (the first failure).
    `settings`: already read by the caller (the runner reads them once per pass)."""
    if failure_streak != 1 or not notify_effective(task.workspace, "notify_on_error", settings):
        return
    transaction.on_commit(lambda: _deliver("error", task, message, settings))


def notify_task_in_review(*, task, last_comment, settings: dict | None = None) -> None:
    """An agent or the runner moved the task to In Review (never the user's own move).
    `last_comment`: the latest agent comment, or a function that reads it once committed."""
    if not notify_effective(task.workspace, "notify_on_in_review", settings):
        return
    transaction.on_commit(lambda: _deliver("in_review", task, last_comment, settings))


def _deliver_global(payload: dict, message: dict) -> None:
    values = settings_get()
    if mailgun_configured(values):
        _pool.submit(_send_email, values, message, "")
    for url in values.get("webhook_urls") or []:
        _pool.submit(_send_webhook, url, payload, "")


def notify_cli_limited(*, cli_type: str, label: str, until, message: str) -> None:
    """A CLI ran out of quota: one notification for all the work that now waits (never one
    per task), when error notifications are on."""
    if not settings_get()["notify_on_error"]:
        return
    when = until.isoformat() if until else None
    text = (
        f"{label} is out of quota{f' until {when}' if when else ''}. Tasks and chats that need it "
        f"wait and continue where they stopped.\n\n{label} said: {message}\n\n"
        f"What waits: {needs_you_link()}\n"
    )
    payload = {"event": "cli.limited", "cli_type": cli_type, "until": when, "message": message}
    payload["link"] = needs_you_link()
    mail = {"subject": f"[Malamar] {label} is out of quota", "text": text}
    transaction.on_commit(lambda: _deliver_global(payload, mail))


def notify_cli_broken(*, cli_type: str, label: str, reason: str) -> None:
    """A CLI cannot run at all: one notification for all the work that now waits for it
    (never one per task), when error notifications are on."""
    if not settings_get()["notify_on_error"]:
        return
    text = (
        f"{label} cannot run: {reason}\n\nTasks that need it wait and continue at the agent "
        "where they stopped once it works again (Settings → CLIs checks it when you save its "
        "settings).\n"
    )
    payload = {"event": "cli.broken", "cli_type": cli_type, "message": reason}
    mail = {"subject": f"[Malamar] {label} cannot run", "text": text}
    transaction.on_commit(lambda: _deliver_global(payload, mail))


def notify_cli_resumed(*, cli_type: str, label: str) -> None:
    """The CLI's quota is back: the paused work continues (one notification)."""
    if not settings_get()["notify_on_error"]:
        return
    payload = {"event": "cli.resumed", "cli_type": cli_type}
    text = f"{label} works again; the tasks and chats that waited for it continue.\n"
    mail = {"subject": f"[Malamar] {label} works again", "text": text}
    transaction.on_commit(lambda: _deliver_global(payload, mail))


def test_email_send() -> None:
    """Send the test email now and wait for Mailgun's answer."""
    values = settings_get()
    missing = [
        k
        for k in ("mailgun_api_key", "mailgun_domain", "mailgun_from_email", "mailgun_to_email")
        if not values.get(k)
    ]
    if missing:
        raise ValidationFailed(
            f"Email is not configured: set {', '.join(missing)} first", field=missing[0]
        )
    try:
        mailgun_send(values, subject=TEST_SUBJECT, text=TEST_BODY)
    except DeliveryFailed as exc:
        raise EmailFailed(f"Mailgun error: {exc}") from None
