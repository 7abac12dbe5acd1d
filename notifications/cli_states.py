"""A CLI's states the user is told about (DESIGN "Usage limits", "Retries"): the runs domain
records them (runner.services) and this module adds the one notification of each. Here, not in
runner.services, because the runs domain sits under the apps and notifications
(tests/test_layering.py); a task pass's rules (tasks.services), a chat reply's (chats.replies)
and the worker's health checks and probes call these.
"""

from django.db import transaction

from notifications.services import notify_cli_broken, notify_cli_limited, notify_cli_resumed
from runner.limits import Limit
from runner.models import CliHealth
from runner.plans import health_key_label
from runner.services import cli_broken_mark, cli_limit_clear, cli_limit_mark


def cli_limit_set(*, cli_type: str, limit: Limit, now=None) -> CliHealth:
    """The CLI ran out of quota: it is "limited until T" (None: unknown, probed on a back-off).
    `cli.limited` and one notification only when it was not limited already; a later run that
    hits the limit again only updates the reset time. Part of the caller's transaction."""
    with transaction.atomic(savepoint=False):
        row, newly = cli_limit_mark(cli_type=cli_type, limit=limit, now=now)
        if newly:
            notify_cli_limited(
                cli_type=cli_type,
                label=health_key_label(cli_type),
                until=row.limited_until,
                message=row.limit_message,
            )
    return row


def cli_broken_set(*, cli_type: str, reason: str) -> CliHealth:
    """The CLI cannot run at all: marked so with why (runner.services.cli_broken_mark), and one
    notification when it was working until now. Part of the caller's transaction."""
    with transaction.atomic(savepoint=False):
        row, newly = cli_broken_mark(cli_type=cli_type, reason=reason)
        if newly:
            notify_cli_broken(cli_type=cli_type, label=health_key_label(cli_type), reason=reason)
    return row


def cli_limit_lift(*, cli_type: str, answered_since=None) -> bool:
    """The reset time passed or a probe answered: the work that waited for the CLI runs again
    (at the agent where it stopped). `cli.resumed` and one notification; False if it was not
    limited. `answered_since`: when the answering check started; a limit set after that (a run
    hit it meanwhile) is newer news and stays."""
    with transaction.atomic():
        if not cli_limit_clear(cli_type=cli_type, answered_since=answered_since):
            return False
        notify_cli_resumed(cli_type=cli_type, label=health_key_label(cli_type))
    return True
