"""A chat reply's rules, the worker's side (DESIGN "One run pipeline"): its answer applied, its
failure, its wait for a CLI. Services like chats.services (each runs in the reply's finish
transaction), kept apart only because running the answer's actions (chats.actions) imports
agents.services, which imports chats.services: one module could not import the other.
"""

from agents.models import Agent
from chats import actions as chat_actions
from chats.models import Chat, ChatQueueItem
from chats.selectors import MALAMAR_NAME
from chats.services import chat_message_add_agent, chat_message_add_system, chat_run_finished
from notifications.cli_states import cli_broken_set, cli_limit_set
from runner.models import QueueStatus
from runner.plans import Wait, cli_for_run
from runner.selectors import cli_states


class ReplyEnd:
    """How a reply's run ended: `outcome` of chat.processing_finished (only "replied" is toasted
    as a reply; a stopped run, by the user or a shutdown, is discarded and says nothing)."""

    REPLIED = "replied"  # the agent's message was stored
    FAILED = "failed"  # a system message says why
    STOPPED = "stopped"  # stopped by the user (or shutdown): output discarded
    WAITING = "waiting"  # the CLI is out of quota: the reply comes when it is back


def chat_reply_answered(*, chat: Chat, item, agent: Agent | None, message: str, actions) -> None:
    """The agent answered (inside the reply's finish transaction): its actions run, its message
    is stored with what they did (one system message lists the failed ones), the item ends."""
    results = chat_actions.execute_actions(chat=chat, actions=actions, is_malamar=agent is None)
    chat_message_add_agent(
        chat=chat, message=message, actions=[r.as_stored() for r in results], agent=agent
    )
    summary = chat_actions.failure_summary(results)
    if summary:
        chat_message_add_system(chat=chat, message=summary)
    ChatQueueItem.objects.finish(item, QueueStatus.COMPLETED)
    chat_run_finished(
        chat=chat, agent_name=agent.name if agent else MALAMAR_NAME, outcome=ReplyEnd.REPLIED
    )


def chat_reply_failed(
    *, chat: Chat, item, agent_name: str, message: str, cli: str = "", cannot_run=None
) -> None:
    """The reply failed: a system message says why, the item ends. `cannot_run`: the CLI (`cli`,
    a health key) cannot run at all, and is marked so (notifications.cli_states.cli_broken_set); the
    user sees it at once and may pick another CLI (a reply never waits for a broken CLI)."""
    if cannot_run:
        cli_broken_set(cli_type=cli, reason=cannot_run)
    if Chat.objects.filter(id=chat.id).exists():
        chat_message_add_system(chat=chat, message=message)
        chat_run_finished(chat=chat, agent_name=agent_name, outcome=ReplyEnd.FAILED)
    ChatQueueItem.objects.finish(item, QueueStatus.FAILED)


def chat_reply_waits(*, chat: Chat, item, agent_name: str, cli: str) -> None:
    """The reply waits for `cli` (out of quota; "": it runs again at once, on the agent's
    fallback CLI): the item goes back to the queue for it, without a system message (a limit
    is not an error)."""
    ChatQueueItem.objects.pause(item, cli_type=cli)
    chat_run_finished(chat=chat, agent_name=agent_name, outcome=ReplyEnd.WAITING)


def chat_reply_limited(
    *, chat: Chat, item, agent: Agent | None, cli: str, ran_on: str, limit
) -> None:
    """The reply's run ended on `ran_on`'s usage limit (DESIGN "Usage limits"): that CLI is
    limited (one notification for all waiting work), and the reply waits for the CLI it asked
    for (`cli`), or runs again at once on the agent's fallback CLI."""
    cli_limit_set(cli_type=ran_on, limit=limit)
    states = cli_states()
    choice = cli_for_run(agent, limited=states.limited, broken=states.broken, cli=cli)
    name = agent.name if agent else MALAMAR_NAME
    chat_reply_waits(
        chat=chat, item=item, agent_name=name, cli=choice.cli if isinstance(choice, Wait) else ""
    )
