"""Every write to chats, chat messages and the chat queue (outside the worker's own runs).

Each function is one transaction with its events and the workspace `last_activity_at` bump.
The server never touches a running CLI: stopping a run means setting `stop_requested_at` on
its queue item or deleting its rows; the worker does the rest (DESIGN "Stopping runs").
"""

import logging

from django.db import transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from agents.cli_fields import clean_override_cli
from agents.models import Agent
from agents.services import agent_delete
from chats import attachments
from chats.cli_notes import no_cli_message
from chats.models import (
    DEFAULT_CHAT_TITLE,
    Chat,
    ChatMessage,
    ChatParticipant,
    ChatQueueItem,
    ChatRole,
)
from chats.selectors import ACTIVE_STATUSES, MALAMAR_NAME, created_tasks, participant_cli_type
from core import events
from core.errors import Conflict, NotFound, ServiceError, ValidationFailed, require_text
from core.fields import max_length_of
from core.wake import wake_worker_on_commit
from runner.clis import CUSTOM_CLI, cli_label
from runner.models import QueueStatus
from runner.selectors import cli_available, runs_locked
from workspaces.models import Workspace
from workspaces.services import workspace_touch

log = logging.getLogger(__name__)

CANCEL_MESSAGE = "Stopped by user"
TITLE_MAX_LENGTH = max_length_of(Chat, "title")
UNSET = object()  # "not given", as opposed to None ("set to null")


def _chat_payload(chat: Chat) -> dict:
    return {"chat_id": chat.id, "chat_title": chat.title, "workspace_id": chat.workspace_id}


def _agent_label(agent: Agent | None) -> str:
    return agent.name if agent else MALAMAR_NAME


def _clean_title(title) -> str:
    return require_text(title, field="title", label="Title", max_length=TITLE_MAX_LENGTH)


def _clean_cli(cli_type) -> str | None:
    return clean_override_cli(cli_type)


def chat_agent_resolve(*, workspace_id: str, agent_id: str | None) -> Agent | None:
    """The agent a chat may use: None (Malamar) or an agent of the same workspace."""
    if agent_id is None:
        return None
    agent = Agent.objects.filter(id=agent_id, workspace_id=workspace_id).first()
    if agent is None:
        raise ValidationFailed("Agent not found in this workspace", field="agent_id")
    return agent


def _added(chat: Chat, role: str, now, **extra) -> None:
    Chat.objects.filter(id=chat.id).update(updated_at=now)
    chat.updated_at = now
    workspace_touch(chat.workspace_id, now=now)
    events.publish("chat.message_added", {**_chat_payload(chat), "author_type": role, **extra})


def chat_create(
    *, workspace: Workspace, agent: Agent | None = None, title: str | None = None
) -> Chat:
    """A new chat with `agent` (None = the Malamar agent)."""
    if agent is not None and agent.workspace_id != workspace.id:
        raise ValidationFailed("Agent not found in this workspace", field="agent_id")
    title = _clean_title(title) if title and title.strip() else DEFAULT_CHAT_TITLE
    now = timezone.now()
    with transaction.atomic():
        chat = Chat.objects.create(workspace=workspace, title=title, created_at=now, updated_at=now)
        ChatParticipant.objects.create(chat=chat, agent=agent, position=0, created_at=now)
        workspace_touch(workspace.id, now=now)
        events.publish("chat.updated", _chat_payload(chat))
    return chat


def chat_start(*, workspace: Workspace, agent: Agent | None = None, message: str) -> Chat:
    """A new chat with `agent` and the user's first message, all or nothing (a message that
    cannot be sent, e.g. no CLI available, leaves no empty chat behind)."""
    require_text(message, field="message", label="Message")
    with transaction.atomic():
        chat = chat_create(workspace=workspace, agent=agent)
        chat_message_send(chat=chat, message=message)
    return chat


def chat_update(*, chat: Chat, title=UNSET, agent_id=UNSET, cli_type=UNSET) -> Chat:
    """Rename, switch the (first participant's) agent, or set/clear its CLI override.

    Switching the agent keeps the history, adds "Switched from A to B" and clears the CLI
    override (the new agent's own CLI applies); `cli_type` given in the same call is applied
    after the switch.
    """
    changes = {}
    if title is not UNSET:
        changes["title"] = _clean_title(title)
    new_agent = UNSET
    if agent_id is not UNSET:
        new_agent = chat_agent_resolve(workspace_id=chat.workspace_id, agent_id=agent_id)
    if cli_type is not UNSET:
        cli_type = _clean_cli(cli_type)
    now = timezone.now()
    with transaction.atomic():
        lead = chat.participants.lead()
        lead_changes, switched = {}, None
        if new_agent is not UNSET and getattr(new_agent, "id", None) != lead.agent_id:
            if chat.participants.exclude(id=lead.id).filter(agent=new_agent).exists():
                label = _agent_label(new_agent)
                raise Conflict(f"{label} is already in this chat", field="agent_id")
            switched = f"Switched from {_agent_label(lead.agent)} to {_agent_label(new_agent)}"
            lead_changes = {"agent": new_agent, "cli_type": None}
        if cli_type is not UNSET:
            lead_changes["cli_type"] = cli_type
        if not changes and not lead_changes:
            return chat
        changes["updated_at"] = now
        for field, value in changes.items():
            setattr(chat, field, value)
        Chat.objects.filter(id=chat.id).update(**changes)
        if lead_changes:
            ChatParticipant.objects.filter(id=lead.id).update(**lead_changes)
        if switched:
            chat_message_add_system(chat=chat, message=switched)
        workspace_touch(chat.workspace_id, now=now)
        events.publish("chat.updated", _chat_payload(chat))
    return chat


def chat_delete(*, chat: Chat) -> None:
    """Delete the chat, its messages, queue items and attachment folder.

    A running CLI is stopped by the worker when it sees the queue row disappear.
    """
    chat_id = chat.id
    with transaction.atomic():
        payload = _chat_payload(chat)
        runs_locked(chat.runs.all())
        chat.delete()
        workspace_touch(payload["workspace_id"])
        events.publish("chat.deleted", payload)
        wake_worker_on_commit()
        transaction.on_commit(lambda: attachments.attachments_remove(chat_id))


def chat_message_add_system(*, chat: Chat, message: str) -> ChatMessage:
    """A system note in a chat. System messages never start processing."""
    now = timezone.now()
    with transaction.atomic(savepoint=False):  # nothing to roll back alone
        msg = ChatMessage.objects.create(
            chat=chat, role=ChatRole.SYSTEM, message=message, created_at=now
        )
        _added(chat, ChatRole.SYSTEM, now)
    return msg


def chat_message_add_agent(
    *, chat: Chat, message: str, actions: list | None, agent: Agent | None = UNSET
) -> ChatMessage:
    """An agent's reply (text may be empty when it only returned actions), attributed to the
    agent that wrote it (None = Malamar; not given = the chat's first participant)."""
    if agent is UNSET:
        agent = chat.participants.lead().agent
    now = timezone.now()
    with transaction.atomic(savepoint=False):  # nothing to roll back alone
        msg = ChatMessage.objects.create(
            chat=chat,
            role=ChatRole.AGENT,
            message=message or "",
            actions=actions or None,
            agent_id=agent.id if agent else None,
            agent_name=_agent_label(agent),
            created_at=now,
        )
        # The page toasts a link to each task the reply created (chat.message_added).
        tasks = created_tasks(actions)
        _added(chat, ChatRole.AGENT, now, **({"created_tasks": tasks} if tasks else {}))
    return msg


def _no_cli_message(participant: ChatParticipant, cli: str | None) -> str:
    if cli is None:
        return no_cli_message([])
    source = (
        "the CLI override" if participant.cli_type else f"{_agent_label(participant.agent)}'s CLI"
    )
    return no_cli_message([f"{cli_label(cli)} ({source})"])


def _runnable(participants: list[ChatParticipant]) -> tuple[list, list[str]]:
    """The participants whose CLI is available, and a note for each one that is not."""
    ready, notes = [], []
    for participant in participants:
        cli = participant_cli_type(participant)
        # A custom-command agent has a health check of its own.
        key = participant.agent.health_key if cli == CUSTOM_CLI else cli
        if cli is not None and cli_available(key):
            ready.append(participant)
        else:
            notes.append(_no_cli_message(participant, cli))
    return ready, notes


def chat_message_send(*, chat: Chat, message: str) -> ChatMessage:
    """The user's message: stored, and queued once per enabled participant (they answer in
    parallel). With every participant disabled (solo mode) it is only stored.

    Refused while any answer is still pending, and when no enabled participant has a CLI.
    """
    message = require_text(message, field="message", label="Message")
    now = timezone.now()
    with transaction.atomic():
        # Serialises concurrent sends to one chat (SQLite's IMMEDIATE transactions already do).
        if not Chat.objects.select_for_update().filter(id=chat.id).exists():
            raise NotFound("Chat not found")
        if ChatQueueItem.objects.filter(chat=chat, status__in=ACTIVE_STATUSES).exists():
            raise Conflict(
                "The agents are still answering the previous message: wait, or stop them first.",
                field="message",
            )
        enabled = list(chat.participants.filter(enabled=True).select_related("agent").in_order())
        ready, notes = _runnable(enabled)
        if enabled and not ready:
            raise Conflict(notes[0], field="cli_type")
        msg = ChatMessage.objects.create(
            chat=chat, role=ChatRole.USER, message=message, created_at=now
        )
        _added(chat, ChatRole.USER, now)
        Chat.objects.filter(id=chat.id).update(last_seen_at=now)  # they are looking
        for note in notes:
            chat_message_add_system(chat=chat, message=note)
        for participant in ready:
            ChatQueueItem.objects.create(
                chat=chat,
                workspace_id=chat.workspace_id,
                participant=participant,
                created_at=now,
                updated_at=now,
            )
        if ready:
            wake_worker_on_commit()
    return msg


def chat_seen(*, chat: Chat) -> bool:
    """The person looked at the chat: the replies so far no longer "need you". One UPDATE that
    changes nothing (and is not made) when no agent replied since they last looked; when it
    moved, `chat.seen` tells the other tabs' "Needs you". Returns whether it moved."""
    now = timezone.now()
    newer = ChatMessage.objects.filter(
        chat_id=OuterRef("pk"), role=ChatRole.AGENT, created_at__gt=OuterRef("last_seen_at")
    )
    with transaction.atomic():
        moved = Chat.objects.filter(id=chat.id).filter(Exists(newer)).update(last_seen_at=now)
        if moved:
            events.publish("chat.seen", _chat_payload(chat))
    return bool(moved)


def chat_cancel(*, chat: Chat) -> Chat:
    """Stop the answer in progress: the worker kills the CLI and discards its output.

    A still-queued item is marked failed here (nothing runs yet); a running one gets
    `stop_requested_at` and only the worker changes its status. Asking again while the stop
    is under way is harmless; asking when nothing is pending is a 409.
    """
    now = timezone.now()
    with transaction.atomic():
        active = ChatQueueItem.objects.filter(chat=chat, status__in=ACTIVE_STATUSES)
        if not active.exists():
            raise Conflict("Nothing to stop: the chat is not answering a message")
        failed = active.filter(status=QueueStatus.QUEUED).update(
            status=QueueStatus.FAILED, stop_requested_at=now, updated_at=now
        )
        stopping = active.unstopped().update(stop_requested_at=now)
        if failed or stopping:
            chat_message_add_system(chat=chat, message=CANCEL_MESSAGE)
            events.publish("chat.updated", _chat_payload(chat))
            wake_worker_on_commit()
    return chat


def chat_attachments_add(*, chat: Chat, files) -> list[ChatMessage]:
    """Store each file at `{temp}/malamar_chat_{id}_attachments/{base name}` (mode 0600; the
    same name overwrites) and add one "User has uploaded {path}" system message per file."""
    files = list(files or [])
    if not files:
        raise ValidationFailed("Choose at least one file to upload", field="files")
    named = [(attachments.attachment_name(getattr(f, "name", None)), f) for f in files]
    stored, failure = [], None
    for name, source in named:
        try:
            stored.append(attachments.attachment_store(chat.id, name, source))
        except OSError as exc:
            log.warning("Could not store chat attachment %r", name, exc_info=True)
            failure = (name, exc)
            break
    messages = []
    if stored:
        with transaction.atomic():
            for path in stored:
                messages.append(
                    chat_message_add_system(chat=chat, message=f"User has uploaded {path}")
                )
    if failure:
        name, exc = failure
        reason = exc.strerror or exc.__class__.__name__
        raise ServiceError(f"Could not save the attachment '{name}': {reason}")
    return messages


def chats_switch_to_malamar(*, agent) -> None:
    """Before an agent is deleted: it leaves the chats it takes part in. A chat it was alone
    in continues with the Malamar agent."""
    with transaction.atomic():
        for participant in ChatParticipant.objects.filter(agent=agent).select_related("chat"):
            chat = participant.chat
            if chat.participants.count() > 1:
                participant.delete()
                chat_message_add_system(chat=chat, message=f"{agent.name} left the chat")
            else:
                ChatParticipant.objects.filter(id=participant.id).update(agent=None, cli_type=None)
                chat_message_add_system(
                    chat=chat, message=f"Switched from {agent.name} to {MALAMAR_NAME}"
                )
            events.publish("chat.updated", _chat_payload(chat))


def chats_agent_delete(*, agent) -> None:
    """Delete an agent: it leaves its chats first (a chat it was alone in continues with the
    Malamar agent), in the delete's transaction."""
    with transaction.atomic():
        chats_switch_to_malamar(agent=agent)
        agent_delete(agent=agent)


def chat_participant_add(
    *, chat: Chat, agent_id: str | None, cli_type: str | None = None
) -> ChatParticipant:
    """Add an agent (None = Malamar) to the chat; it answers from the next message on."""
    agent = chat_agent_resolve(workspace_id=chat.workspace_id, agent_id=agent_id)
    cli_type = _clean_cli(cli_type)
    with transaction.atomic():
        if chat.participants.filter(agent=agent).exists():
            raise Conflict(f"{_agent_label(agent)} is already in this chat", field="agent_id")
        last = chat.participants.order_by("-position").values_list("position", flat=True).first()
        participant = ChatParticipant.objects.create(
            chat=chat, agent=agent, cli_type=cli_type, position=(last or 0) + 1
        )
        chat_message_add_system(chat=chat, message=f"{_agent_label(agent)} joined the chat")
        events.publish("chat.updated", _chat_payload(chat))
    return participant


def chat_participant_update(
    *, participant: ChatParticipant, enabled=UNSET, cli_type=UNSET
) -> ChatParticipant:
    """Enable/disable a participant (a disabled one does not answer) or set its CLI."""
    changes = {}
    if enabled is not UNSET:
        if not isinstance(enabled, bool):
            raise ValidationFailed("enabled must be true or false", field="enabled")
        changes["enabled"] = enabled
    if cli_type is not UNSET:
        changes["cli_type"] = _clean_cli(cli_type)
    with transaction.atomic():
        for field, value in changes.items():
            setattr(participant, field, value)
        ChatParticipant.objects.filter(id=participant.id).update(**changes)
        chat = participant.chat
        events.publish("chat.updated", _chat_payload(chat))
    return participant


def chat_participant_remove(*, participant: ChatParticipant) -> None:
    chat = participant.chat
    with transaction.atomic():
        if chat.participants.count() <= 1:
            raise Conflict("A chat needs at least one agent", field="participant")
        name = _agent_label(participant.agent)
        participant.delete()
        chat_message_add_system(chat=chat, message=f"{name} left the chat")
        events.publish("chat.updated", _chat_payload(chat))


def chat_message_set_included(*, message: ChatMessage, included: bool) -> ChatMessage:
    """Keep a user or agent message in (or out of) what agents see from the next run on."""
    if not isinstance(included, bool):
        raise ValidationFailed("included must be true or false", field="included")
    if message.role == ChatRole.SYSTEM:
        raise ValidationFailed("System messages are always included", field="included")
    with transaction.atomic():
        ChatMessage.objects.filter(id=message.id).update(included=included)
        message.included = included
        events.publish("chat.updated", _chat_payload(message.chat))
    return message


# a reply's run (written by the worker's run pipeline) ---------------------------------------


def _run_payload(chat: Chat, agent_name: str, **extra) -> dict:
    return {
        "chat_id": chat.id,
        "chat_title": chat.title,
        "agent_name": agent_name,
        "workspace_id": chat.workspace_id,
        **extra,
    }


def chat_run_started(*, chat: Chat, agent_name: str) -> None:
    """An agent started answering (in the run step's start transaction)."""
    events.publish("chat.processing_started", _run_payload(chat, agent_name))


def chat_run_finished(*, chat: Chat, agent_name: str, outcome: str) -> None:
    """The answer ended (chats.replies.ReplyEnd): open pages learn how."""
    events.publish("chat.processing_finished", _run_payload(chat, agent_name, outcome=outcome))
