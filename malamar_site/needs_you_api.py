"""`GET /api/needs-you`: what waits for the person across every workspace (issue 29)."""

from datetime import datetime

from ninja import Field, Router, Schema

from malamar_site.needs_you import needs_you
from tasks.api import TaskOut
from tasks.models import ChecksStatus
from tasks.selectors import attach_blockers

router = Router(tags=["needs you"])


class ReviewRow(TaskOut):
    workspace_title: str
    in_review_since: datetime = Field(description="When it entered In Review.")
    may_need_merge_choice: bool = Field(
        description="Its branch is not merged: Approve may need `merge` (true or false)."
    )
    checks_failing: bool = Field(
        description="The workspace's checks still fail after the agents' attempts: you decide."
    )

    @staticmethod
    def resolve_checks_failing(obj) -> bool:
        return obj.checks_status == ChecksStatus.FAILING

    @staticmethod
    def resolve_workspace_title(obj) -> str:
        return obj.workspace.title


class TroubleRow(TaskOut):
    workspace_title: str
    error: str = Field(description="The first line of its latest error ('' if none).")
    waiting_for_cli: str = Field(
        description="The CLI it waits for, out of quota or unable to run ('' if none)."
    )
    waiting_reason: str = Field(
        description="Why that CLI cannot run ('' if it is out of quota, or none is waited for)."
    )

    @staticmethod
    def resolve_workspace_title(obj) -> str:
        return obj.workspace.title

    @staticmethod
    def resolve_error(obj) -> str:
        return obj.error_state.headline if obj.error_state else ""

    @staticmethod
    def resolve_waiting_for_cli(obj) -> str:
        return obj.waiting_label

    @staticmethod
    def resolve_waiting_reason(obj) -> str:
        return obj.waiting_reason


class ChatRow(Schema):
    id: str
    workspace_id: str
    workspace_title: str
    title: str
    last_reply_at: datetime
    last_reply_agent: str
    last_reply_preview: str
    last_seen_at: datetime

    @staticmethod
    def resolve_workspace_title(obj) -> str:
        return obj.workspace.title


class NeedsYouOut(Schema):
    count: int = Field(description="Everything below, all rows counted (lists stop at 100).")
    review: list[ReviewRow] = Field(description="Tasks In Review, oldest first.")
    review_count: int
    checks_failing_count: int = Field(
        description="Of the tasks In Review, those whose checks fail (all counted)."
    )
    trouble: list[TroubleRow] = Field(description="Tasks failing or waiting for a CLI.")
    trouble_count: int
    chats: list[ChatRow] = Field(description="Chats whose agent replied since you last looked.")
    chat_count: int


@router.get("/needs-you", response=NeedsYouOut)
def get_needs_you(request):
    """What waits for you in every workspace: tasks In Review (oldest first), tasks failing
    or waiting for a CLI, chats with a reply you have not seen (opening a chat, or POST
    /api/chats/{id}/seen, marks it seen)."""
    found = needs_you()
    attach_blockers(found.review + found.trouble)
    return {
        "count": found.count,
        "review": found.review,
        "review_count": found.review_count,
        "checks_failing_count": found.checks_failing_count,
        "trouble": found.trouble,
        "trouble_count": found.trouble_count,
        "chats": found.chats,
        "chat_count": found.chat_count,
    }
