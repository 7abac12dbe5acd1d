"""A CLI out of quota, and back (DESIGN "Usage limits"): the worker puts together what three
apps own. The runs domain marks the CLI (runner.services), each queue lets the work that waited
run again (tasks' and chats' services), and the user gets one notification."""

from django.db import transaction
from django.utils import timezone

from chats.services import chat_queue_release
from notifications.services import notify_cli_limited, notify_cli_resumed
from runner.clis import cli_label
from runner.limits import Limit
from runner.models import CliHealth
from runner.services import cli_limit_clear, cli_limit_mark
from tasks.services import task_queue_release


def cli_limit_set(*, cli_type: str, limit: Limit, now=None) -> CliHealth:
    """The CLI ran out of quota: it is "limited until T" (None: unknown, probed on a back-off).
    `cli.limited` and one notification only when it was not limited already; a later run that
    hits the limit again only updates the reset time. Part of the caller's transaction."""
    now = now or timezone.now()
    with transaction.atomic(savepoint=False):
        row, newly = cli_limit_mark(cli_type=cli_type, limit=limit, now=now)
        if newly:
            notify_cli_limited(
                cli_type=cli_type,
                label=cli_label(cli_type),
                until=row.limited_until,
                message=row.limit_message,
            )
    return row


def cli_limit_lift(*, cli_type: str, answered_since=None) -> bool:
    """The reset time passed or a probe answered: the work that waited for the CLI runs again
    (at the agent where it stopped). `cli.resumed` and one notification; False if it was not
    limited. `answered_since`: when the answering check started; a limit set after that (a run
    hit it meanwhile) is newer news and stays."""
    with transaction.atomic():
        if not cli_limit_clear(cli_type=cli_type, answered_since=answered_since):
            return False
        task_queue_release(cli_type=cli_type)
        chat_queue_release(cli_type=cli_type)
        notify_cli_resumed(cli_type=cli_type, label=cli_label(cli_type))
    return True
