"""What waits for the person across every workspace ("Needs you", issue 29): tasks In Review
(oldest first; those whose checks fail are marked and counted), tasks failing or waiting for a
CLI, and chats whose agent replied since the person last looked. Reads only, in a fixed number
of queries whatever the number of workspaces, tasks or chats; the page, the header count and
the JSON API share them."""

from dataclasses import dataclass, field

from chats.selectors import chats_with_unseen_replies, unseen_reply_count
from tasks.selectors import in_review_oldest_first, in_trouble, needing_you_counts

LIST_LIMIT = 100  # rows of each kind listed; the counts cover all of them
HOME_ROWS = 3  # of each kind in the home page's section (a phone's first screen)
# The events that may change what needs the person: the page, the home page's section and the
# header's count refresh on them, whatever workspace they come from (README "Live refreshes").
LIVE_EVENTS = " ".join(
    (
        "task.status_changed task.reviewed task.error_occurred task.updated task.deleted",
        "cli.limited cli.resumed chat.message_added chat.seen chat.updated chat.deleted",
        "workspace.updated workspace.deleted",
    )
)


@dataclass
class NeedsYou:
    review: list = field(default_factory=list)  # Tasks In Review, oldest first
    trouble: list = field(default_factory=list)  # Tasks failing or waiting for a CLI
    chats: list = field(default_factory=list)  # Chats with a reply not seen yet
    review_count: int = 0
    checks_failing_count: int = 0  # of review_count: checks failing after the attempts
    trouble_count: int = 0
    chat_count: int = 0

    @property
    def count(self) -> int:
        return self.review_count + self.trouble_count + self.chat_count


def needs_you(*, limit: int = LIST_LIMIT) -> NeedsYou:
    """Six queries (three lists and three counts), and one more when a task waits for a CLI
    (why it cannot run, tasks.selectors.attach_cli_waits)."""
    review_count, checks_failing, trouble_count = needing_you_counts()
    return NeedsYou(
        review=in_review_oldest_first(limit),
        trouble=in_trouble(limit),
        chats=chats_with_unseen_replies(limit),
        review_count=review_count,
        checks_failing_count=checks_failing,
        trouble_count=trouble_count,
        chat_count=unseen_reply_count(),
    )


def needs_you_count() -> int:
    """The header's number: three COUNT queries."""
    review, _checks_failing, trouble = needing_you_counts()
    return review + trouble + unseen_reply_count()


def needs_you_home() -> NeedsYou:
    """The home page's section: the first rows of each kind, and all the counts."""
    return needs_you(limit=HOME_ROWS)
