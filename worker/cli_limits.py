"""A CLI out of quota is back (DESIGN "Usage limits"): the worker puts together what three apps
own. The runs domain clears the CLI's limit (runner.services), each queue lets the work that
waited run again (tasks' and chats' services), and the user gets one notification. Setting the
limit is notifications.cli_states.cli_limit_set (a task pass's rules call it too)."""

from django.db import transaction

from chats.services import chat_queue_release
from notifications.services import notify_cli_resumed
from runner.clis import cli_label
from runner.services import cli_limit_clear
from tasks.services import task_queue_release


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
