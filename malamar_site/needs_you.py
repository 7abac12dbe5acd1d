"""What waits for the person across every workspace ("Needs you", issue 29): tasks In Review
(oldest first), tasks failing or waiting for a CLI, and chats whose agent replied since the
person last looked. Reads only, in a fixed number of queries whatever the number of
workspaces, tasks or chats; the page, the header count and the JSON API share them."""

from dataclasses import dataclass, field

from chats.selectors import chats_with_unseen_replies, unseen_reply_count
from tasks.selectors import in_review_oldest_first, in_trouble, needing_you_counts

LIST_LIMIT = 100  # rows of each kind listed; the counts cover all of them


@dataclass
class NeedsYou:
    review: list = field(default_factory=list)  # Tasks In Review, oldest first
    trouble: list = field(default_factory=list)  # Tasks failing or waiting for a CLI
    chats: list = field(default_factory=list)  # Chats with a reply not seen yet
    review_count: int = 0
    trouble_count: int = 0
    chat_count: int = 0

    @property
    def count(self) -> int:
        return self.review_count + self.trouble_count + self.chat_count


def needs_you(*, limit: int = LIST_LIMIT) -> NeedsYou:
    """Six queries (three lists and three counts), and one more when a task waits for a CLI
    (why it cannot run, tasks.selectors.attach_cli_waits)."""
    review_count, trouble_count = needing_you_counts()
    return NeedsYou(
        review=in_review_oldest_first(limit),
        trouble=in_trouble(limit),
        chats=chats_with_unseen_replies(limit),
        review_count=review_count,
        trouble_count=trouble_count,
        chat_count=unseen_reply_count(),
    )


def needs_you_count() -> int:
    """The header's number: three COUNT queries."""
    review, trouble = needing_you_counts()
    return review + trouble + unseen_reply_count()
