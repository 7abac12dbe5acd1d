"""Answer one chat message: run the chat's CLI, store the reply, execute its actions.

Chats run concurrently (several in one workspace too). The CLI is the chat's override, else
the agent's, else for the Malamar agent the first available in Claude → Codex → Gemini →
OpenCode. A stopped run (cancel, chat deleted, shutdown) is discarded.
"""

import logging
import threading
from pathlib import Path

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from agents.models import Agent
from chats.actions import execute_actions, failure_summary
from chats.malamar_agent import knowledge_base_dir, malamar_instruction
from chats.models import Chat, ChatQueueItem
from chats.selectors import MALAMAR_NAME, participant_cli_type
from chats.services import chat_message_add_agent, chat_message_add_system
from core import events
from core.settings_store import mailgun_configured, settings_get
from runner import execution, prompts
from runner.files import fresh_output_path, temp_dir, working_directory, write_private
from runner.recorder import RunRecorder, stall_limits
from runner.schemas import AGENT_CHAT_ACTION_TYPES, MALAMAR_CHAT_ACTION_TYPES, chat_schema
from runner.selectors import cli_health_all
from runner.task_loop import internal_error_message
from tasks.models import QueueStatus

log = logging.getLogger(__name__)


class ChatStopped(Exception):
    pass


class Outcome:
    """`outcome` of chat.processing_finished."""

    REPLIED = "replied"  # the agent's message was stored
    FAILED = "failed"  # a system message says why
    STOPPED = "stopped"  # stopped by the user (or shutdown): output discarded


def claim_next() -> ChatQueueItem | None:
    for item in ChatQueueItem.objects.filter(status=QueueStatus.QUEUED).order_by("created_at")[:20]:
        if ChatQueueItem.objects.claim(item.id):
            return item
    return None


def has_queued() -> bool:
    return ChatQueueItem.objects.filter(status=QueueStatus.QUEUED).exists()


def _finish(item_id: str, status: str) -> None:
    ChatQueueItem.objects.filter(id=item_id, status=QueueStatus.IN_PROGRESS).update(
        status=status, pid=None, pgid=None, updated_at=timezone.now()
    )


def _check_wanted(item_id: str, stop: threading.Event) -> Chat:
    item = ChatQueueItem.objects.filter(
        id=item_id, status=QueueStatus.IN_PROGRESS, stop_requested_at__isnull=True
    ).first()
    chat = (
        Chat.objects.select_related("workspace", "agent").filter(id=item.chat_id).first()
        if (item)
        else None
    )
    if stop.is_set() or chat is None:
        raise ChatStopped
    return chat


def _payload(chat: Chat, agent_name: str, **extra) -> dict:
    return {
        "chat_id": chat.id,
        "chat_title": chat.title,
        "agent_name": agent_name,
        "workspace_id": chat.workspace_id,
        **extra,
    }


def _history(chat: Chat) -> list[dict]:
    """What agents see: included messages (system messages always), oldest first."""
    rows = []
    for m in chat.messages.filter(Q(included=True) | Q(role="system")).order_by("created_at", "id"):
        row = {"role": m.role}
        if m.role == "agent" and m.agent_name:
            row["agent"] = m.agent_name
        rows.append({**row, "content": m.message, "created_at": prompts.iso(m.created_at)})
    return rows


def _write_files(chat: Chat, agent, item_id: str, output_path: Path) -> Path:
    """One input file per run, so parallel answers never share a file."""
    is_malamar = agent is None
    settings = settings_get()
    context_path = write_private(
        temp_dir() / f"malamar_chat_{chat.id}_{item_id}_context.md",
        prompts.chat_context(
            workspace=chat.workspace,
            agents=list(Agent.objects.filter(workspace_id=chat.workspace_id).in_order()),
            clis=cli_health_all(),
            mailgun_configured=mailgun_configured(settings),
            temp_dir=str(temp_dir()),
        ),
    )
    text = prompts.chat_input(
        chat_id=chat.id,
        workspace_title=chat.workspace.title,
        agent_name=MALAMAR_NAME if is_malamar else agent.name,
        instruction=malamar_instruction() if is_malamar else agent.instruction,
        history=_history(chat),
        context_path=str(context_path),
        output_path=str(output_path),
        schema=chat_schema(malamar=is_malamar),
        action_names=MALAMAR_CHAT_ACTION_TYPES if is_malamar else AGENT_CHAT_ACTION_TYPES,
    )
    return write_private(temp_dir() / f"malamar_chat_{chat.id}_{item_id}.md", text)


def _parse(data) -> tuple[str, list]:
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object, got {type(data).__name__}")
    message = data.get("message")
    if message is not None and not isinstance(message, str):
        raise ValueError('"message" must be a string')
    actions = data.get("actions") or []
    if not isinstance(actions, list):
        raise ValueError('"actions" must be an array')
    return message or "", actions


def _record_process(item_id: str):
    def on_started(started) -> None:
        ChatQueueItem.objects.filter(id=item_id).update(
            pid=started.pid, pgid=started.pgid, process_started_at=started.create_time
        )

    return on_started


def _speaker(chat: Chat, item: ChatQueueItem):
    """(participant, agent) answering this item; older items fall back to the first one."""
    participant = item.participant or chat.participants.order_by("position").first()
    agent = participant.agent if participant else chat.agent
    return participant, agent


def _run(chat: Chat, item: ChatQueueItem, stop: threading.Event) -> str | tuple[str, list]:
    """Run the CLI; returns an error message or (message, actions)."""
    participant, agent = _speaker(chat, item)
    cli = participant_cli_type(participant) if participant else None
    if cli is None:
        return "No CLI available: every CLI failed its health check."
    cwd, problem = working_directory(chat.workspace, f"malamar_chat_{chat.id}")
    if cwd is None:
        return problem
    output_path = fresh_output_path("malamar_chat_output")
    input_path = _write_files(chat, agent, item.id, output_path)
    recorder = RunRecorder(
        cli_type=cli,
        workspace_id=chat.workspace_id,
        agent_id=agent.id if agent else None,
        agent_name=agent.name if agent else MALAMAR_NAME,
        chat_id=chat.id,
        **stall_limits(chat.workspace),
    )
    try:
        return _execute(chat, item, stop, cli, cwd, input_path, output_path, recorder)
    finally:
        recorder.finish(status=recorder.status, exit_code=recorder.exit_code)


def _execute(chat, item, stop, cli, cwd, input_path, output_path, recorder):
    run = execution.execute(
        cli_type=cli,
        input_path=input_path,
        output_path=output_path,
        schema=chat_schema(malamar=recorder.run.agent_id is None),
        schema_kind="malamar" if recorder.run.agent_id is None else "chat",
        cwd=cwd,
        stop=stop,
        include_dirs=(str(temp_dir()), str(knowledge_base_dir())),
        on_started=_record_process(item.id),
        recorder=recorder,
    )
    recorder.note(run)
    if run.stopped or stop.is_set():
        raise ChatStopped
    if run.error:
        return run.error
    try:
        return _parse(run.data)
    except ValueError as exc:
        return f"CLI output structure was invalid: {exc}"


def process_item(item: ChatQueueItem, *, stop: threading.Event, shutdown: threading.Event) -> None:
    chat = Chat.objects.select_related("workspace", "agent").filter(id=item.chat_id).first()
    if chat is None:
        return
    _participant, agent = _speaker(chat, item)
    agent_name = agent.name if agent else MALAMAR_NAME
    with transaction.atomic():
        events.publish("chat.processing_started", _payload(chat, agent_name))
    # How the run ended, for the page: only "replied" is toasted as a reply; a stopped run
    # (Stop, shutdown) is discarded and says nothing.
    outcome = Outcome.FAILED
    try:
        result = _run(chat, item, stop)
        with transaction.atomic():
            chat = _check_wanted(item.id, stop)
            if isinstance(result, str):
                chat_message_add_system(chat=chat, message=result)
                _finish(item.id, QueueStatus.FAILED)
            else:
                message, actions = result
                results = execute_actions(chat=chat, actions=actions, is_malamar=agent is None)
                chat_message_add_agent(
                    chat=chat,
                    message=message,
                    actions=[r.as_stored() for r in results],
                    agent=agent,
                )
                summary = failure_summary(results)
                if summary:
                    chat_message_add_system(chat=chat, message=summary)
                _finish(item.id, QueueStatus.COMPLETED)
                outcome = Outcome.REPLIED
    except ChatStopped:
        outcome = Outcome.STOPPED
        if not shutdown.is_set():
            _finish(item.id, QueueStatus.FAILED)
    except Exception as exc:  # a bug must not leave the user waiting for a reply forever
        log.exception("Chat processing failed", extra={"chat_id": chat.id})
        if Chat.objects.filter(id=chat.id).exists():
            chat_message_add_system(chat=chat, message=internal_error_message(exc))
        _finish(item.id, QueueStatus.FAILED)
    finally:
        if Chat.objects.filter(id=chat.id).exists():
            with transaction.atomic():
                events.publish(
                    "chat.processing_finished", _payload(chat, agent_name, outcome=outcome)
                )
