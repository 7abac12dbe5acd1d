"""Chat rules: create/update/switch/override, send + queue, CLI availability, cancel, delete,
attachments on disk, list selectors, and the Malamar agent's bundled content."""

import dataclasses
import io
import os
import stat

import pytest
from django.core.files.uploadedfile import TemporaryUploadedFile

from agents.services import agent_create
from chats import selectors, services
from chats.attachments import attachment_name, attachments_dir
from chats.malamar_agent import (
    KNOWLEDGE_BASE_FILES,
    MALAMAR_INSTRUCTION,
    knowledge_base_dir,
    malamar_instruction,
)
from chats.models import Chat, ChatMessage, ChatParticipant, ChatQueueItem
from core.errors import Conflict, ServiceError, ValidationFailed
from core.models import OutboxEvent
from core.settings_store import settings_get, settings_public, settings_update
from malamar_site.services import workspace_delete
from runner.models import CliHealth, QueueStatus
from workspaces.models import Workspace
from workspaces.services import workspace_create


@pytest.fixture
def temp_dir(tmp_path, settings):
    settings.CONFIG = dataclasses.replace(settings.CONFIG, temp_dir=tmp_path)
    return tmp_path


@pytest.fixture
def chat(workspace):
    return services.chat_create(workspace=workspace)


def unhealthy(*clis):
    for cli in clis:
        CliHealth.objects.update_or_create(
            cli_type=cli, defaults={"status": "unhealthy", "error": "boom"}
        )


def events(event_type):
    return [e.payload for e in OutboxEvent.objects.filter(type=event_type).order_by("id")]


def texts(chat):
    return [(m.role, m.message) for m in selectors.chat_messages(chat.id)]


def upload(name, content=b"data"):
    """A file object with the raw client name (SimpleUploadedFile would sanitise it first)."""
    source = io.BytesIO(content)
    source.name = name
    return source


# --- create / update -------------------------------------------------------------------------


def test_create_defaults_to_malamar_and_untitled(workspace):
    before = Workspace.objects.get(id=workspace.id).last_activity_at
    chat = services.chat_create(workspace=workspace)
    lead = chat.participants.lead()
    assert (chat.title, lead.agent_id, lead.cli_type) == ("Untitled chat", None, None)
    assert Workspace.objects.get(id=workspace.id).last_activity_at > before
    assert events("chat.updated") == [
        {"chat_id": chat.id, "chat_title": "Untitled chat", "workspace_id": workspace.id}
    ]


def test_create_with_agent_and_title(workspace, agents):
    chat = services.chat_create(workspace=workspace, agent=agents[1], title="  Ideas ")
    assert (chat.participants.lead().agent_id, chat.title) == (agents[1].id, "Ideas")


def test_create_refuses_an_agent_of_another_workspace(workspace):
    other = workspace_create(title="Other")
    stranger = agent_create(workspace=other, name="Stranger", instruction="x")
    with pytest.raises(ValidationFailed) as err:
        services.chat_create(workspace=workspace, agent=stranger)
    assert err.value.field == "agent_id"


def test_rename(chat):
    services.chat_update(chat=chat, title="Reviewer setup")
    assert Chat.objects.get(id=chat.id).title == "Reviewer setup"
    assert events("chat.updated")[-1]["chat_title"] == "Reviewer setup"
    with pytest.raises(ValidationFailed):
        services.chat_update(chat=chat, title="   ")
    with pytest.raises(ValidationFailed):
        services.chat_update(chat=chat, title="x" * 501)


def test_switching_agent_adds_note_and_resets_cli(chat, agents):
    services.chat_update(chat=chat, cli_type="gemini")
    services.chat_update(chat=chat, agent_id=agents[0].id)
    lead = chat.participants.lead()
    assert (lead.agent_id, lead.cli_type) == (agents[0].id, None)
    services.chat_update(chat=chat, agent_id=agents[2].id)
    services.chat_update(chat=chat, agent_id=None)
    assert texts(chat) == [
        ("system", "Switched from Malamar to Planner"),
        ("system", "Switched from Planner to Reviewer"),
        ("system", "Switched from Reviewer to Malamar"),
    ]
    assert chat.participants.lead().agent_id is None
    assert [e["author_type"] for e in events("chat.message_added")] == ["system"] * 3


def test_switching_to_the_same_agent_changes_nothing(chat, agents):
    services.chat_update(chat=chat, agent_id=agents[0].id, cli_type="codex")
    assert chat.participants.lead().cli_type == "codex"  # override applied after switch
    services.chat_update(chat=chat, agent_id=agents[0].id)
    assert chat.participants.lead().cli_type == "codex"
    assert len(texts(chat)) == 1


def test_cli_override_stored_validated_and_cleared(chat):
    services.chat_update(chat=chat, cli_type="opencode")
    assert chat.participants.lead().cli_type == "opencode"
    with pytest.raises(ValidationFailed) as err:
        services.chat_update(chat=chat, cli_type="vim")
    assert err.value.field == "cli_type"
    services.chat_update(chat=chat, cli_type=None)
    assert chat.participants.lead().cli_type is None
    assert texts(chat) == []  # an override is not a conversation event


def test_switching_to_a_foreign_agent_is_refused(chat):
    other = workspace_create(title="Other")
    stranger = agent_create(workspace=other, name="Stranger", instruction="x")
    with pytest.raises(ValidationFailed) as err:
        services.chat_update(chat=chat, agent_id=stranger.id)
    assert err.value.field == "agent_id"
    with pytest.raises(ValidationFailed):
        services.chat_update(chat=chat, agent_id="nope")
    assert chat.participants.lead().agent_id is None


def test_agent_deletion_switches_chats_to_malamar(workspace, agents):
    chat = services.chat_create(workspace=workspace, agent=agents[0])
    services.chat_update(chat=chat, cli_type="gemini")
    services.chats_agent_delete(agent=agents[0])
    summary = selectors.chat_summary(chat.id)
    assert (summary.agent_id, summary.agent_name, summary.cli_type) == (None, "Malamar", None)


# --- CLI selection -------------------------------------------------------------------------------


def _lead_cli(chat) -> str | None:
    return selectors.participant_cli_type(chat.participants.lead())


def test_the_lead_cli_follows_override_then_agent_then_malamar_default(workspace, agents):
    malamar = services.chat_create(workspace=workspace)
    assert _lead_cli(malamar) == "claude"  # "not checked yet" counts as available
    unhealthy("claude")
    assert _lead_cli(malamar) == "codex"  # Claude → Codex → Gemini → OpenCode
    unhealthy("codex", "gemini")
    assert _lead_cli(malamar) == "opencode"
    unhealthy("opencode")
    assert _lead_cli(malamar) is None
    with_agent = services.chat_create(workspace=workspace, agent=agents[0])
    assert _lead_cli(with_agent) == "claude"  # the agent's CLI, healthy or not
    services.chat_update(chat=with_agent, cli_type="gemini")
    assert _lead_cli(with_agent) == "gemini"


# --- send ----------------------------------------------------------------------------------------


def test_send_stores_message_queues_and_pokes_worker(chat, monkeypatch):
    pokes = []
    monkeypatch.setattr(services, "wake_worker_on_commit", lambda: pokes.append(1))
    before = Workspace.objects.get(id=chat.workspace_id).last_activity_at
    msg = services.chat_message_send(chat=chat, message="  Help me add a reviewer  ")
    assert (msg.role, msg.message, msg.actions) == ("user", "Help me add a reviewer", None)
    item = ChatQueueItem.objects.get(chat=chat)
    assert (item.status, item.workspace_id) == ("queued", chat.workspace_id)
    assert pokes == [1]
    assert events("chat.message_added") == [
        {
            "chat_id": chat.id,
            "chat_title": "Untitled chat",
            "workspace_id": chat.workspace_id,
            "author_type": "user",
        }
    ]
    assert Workspace.objects.get(id=chat.workspace_id).last_activity_at > before


def test_send_requires_text(chat):
    with pytest.raises(ValidationFailed) as err:
        services.chat_message_send(chat=chat, message=" \n ")
    assert err.value.field == "message"
    assert not ChatQueueItem.objects.exists()


@pytest.mark.pg
@pytest.mark.parametrize("status", ["queued", "in_progress"])
def test_second_send_refused_while_pending(chat, status):
    services.chat_message_send(chat=chat, message="one")
    ChatQueueItem.objects.update(status=status)
    with pytest.raises(Conflict):
        services.chat_message_send(chat=chat, message="two")
    assert ChatMessage.objects.filter(chat=chat).count() == 1


@pytest.mark.parametrize("status", ["completed", "failed"])
def test_send_allowed_after_finished_item(chat, status):
    services.chat_message_send(chat=chat, message="one")
    ChatQueueItem.objects.update(status=status)
    services.chat_message_send(chat=chat, message="two")
    assert ChatQueueItem.objects.filter(chat=chat, status="queued").count() == 1


def test_send_refused_when_every_cli_is_unhealthy(chat):
    unhealthy("claude", "codex", "gemini", "opencode")
    with pytest.raises(Conflict) as err:
        services.chat_message_send(chat=chat, message="hello")
    assert err.value.message.startswith("No CLI available")
    assert not ChatMessage.objects.exists() and not ChatQueueItem.objects.exists()


def test_send_refused_when_the_override_cli_is_unhealthy(chat):
    unhealthy("gemini")
    services.chat_update(chat=chat, cli_type="gemini")
    with pytest.raises(Conflict) as err:
        services.chat_message_send(chat=chat, message="hello")
    assert "No CLI available" in err.value.message and "Gemini CLI" in err.value.message


def test_send_refused_when_the_agents_cli_is_unhealthy_but_override_helps(workspace, agents):
    chat = services.chat_create(workspace=workspace, agent=agents[0])  # Planner on claude
    unhealthy("claude")
    with pytest.raises(Conflict) as err:
        services.chat_message_send(chat=chat, message="hello")
    assert "No CLI available" in err.value.message and "Planner" in err.value.message
    services.chat_update(chat=chat, cli_type="codex")
    services.chat_message_send(chat=chat, message="hello")
    assert ChatQueueItem.objects.filter(chat=chat).count() == 1


def test_system_messages_never_queue(chat, temp_dir):
    services.chat_message_add_system(chat=chat, message="note")
    services.chat_attachments_add(chat=chat, files=[upload("a.txt")])
    assert not ChatQueueItem.objects.exists()


# --- cancel --------------------------------------------------------------------------------------


def test_cancel_queued_marks_it_failed(chat):
    services.chat_message_send(chat=chat, message="hi")
    services.chat_cancel(chat=chat)
    item = ChatQueueItem.objects.get(chat=chat)
    assert item.status == "failed" and item.stop_requested_at is not None
    assert texts(chat)[-1] == ("system", "Stopped by user")
    assert selectors.chat_summary(chat.id).is_processing is False
    services.chat_message_send(chat=chat, message="again")  # free to send again


def test_cancel_in_progress_only_requests_the_stop(chat):
    services.chat_message_send(chat=chat, message="hi")
    ChatQueueItem.objects.update(status=QueueStatus.IN_PROGRESS)
    services.chat_cancel(chat=chat)
    item = ChatQueueItem.objects.get(chat=chat)
    assert item.status == "in_progress"  # only the worker changes a running item's status
    first_stop = item.stop_requested_at
    assert first_stop is not None
    services.chat_cancel(chat=chat)  # again while stopping: harmless
    assert ChatQueueItem.objects.get(chat=chat).stop_requested_at == first_stop
    assert [t for t in texts(chat) if t[0] == "system"] == [("system", "Stopped by user")]
    with pytest.raises(Conflict):
        services.chat_message_send(chat=chat, message="too early")


def test_cancel_with_nothing_pending_is_a_conflict(chat):
    with pytest.raises(Conflict):
        services.chat_cancel(chat=chat)
    services.chat_message_send(chat=chat, message="hi")
    ChatQueueItem.objects.update(status=QueueStatus.COMPLETED)
    with pytest.raises(Conflict):
        services.chat_cancel(chat=chat)


# --- delete --------------------------------------------------------------------------------------


def test_delete_removes_rows_and_attachment_folder(
    chat, temp_dir, django_capture_on_commit_callbacks
):
    chat_id = chat.id
    services.chat_message_send(chat=chat, message="hi")
    services.chat_attachments_add(chat=chat, files=[upload("a.txt")])
    folder = attachments_dir(chat.id)
    assert folder.is_dir()
    with django_capture_on_commit_callbacks(execute=True):
        services.chat_delete(chat=chat)
    assert not folder.exists()
    assert not Chat.objects.exists() and not ChatMessage.objects.exists()
    assert not ChatQueueItem.objects.exists()  # the worker sees the row vanish and stops
    assert events("chat.deleted") == [
        {"chat_id": chat_id, "chat_title": "Untitled chat", "workspace_id": chat.workspace_id}
    ]


def test_delete_without_attachments_and_symlinked_folder(
    workspace, temp_dir, django_capture_on_commit_callbacks
):
    plain = services.chat_create(workspace=workspace)
    with django_capture_on_commit_callbacks(execute=True):
        services.chat_delete(chat=plain)  # no folder: fine
    linked = services.chat_create(workspace=workspace)
    outside = temp_dir / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    attachments_dir(linked.id).symlink_to(outside)
    with django_capture_on_commit_callbacks(execute=True):
        services.chat_delete(chat=linked)
    assert not attachments_dir(linked.id).exists()
    assert (outside / "keep.txt").read_text() == "keep"  # never followed


def test_workspace_delete_removes_chat_folders(
    workspace, temp_dir, django_capture_on_commit_callbacks
):
    chat = services.chat_create(workspace=workspace)
    services.chat_attachments_add(chat=chat, files=[upload("a.txt")])
    with django_capture_on_commit_callbacks(execute=True):
        workspace_delete(workspace=workspace)
    assert not attachments_dir(chat.id).exists()


# --- attachments ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw,name",
    [
        ("notes.md", "notes.md"),
        ("../../x", "x"),
        ("..\\y", "y"),
        ("C:\\Users\\me\\plan.txt", "plan.txt"),
        ("/etc/passwd", "passwd"),
        ("a/b/.hidden", ".hidden"),
        ("  spaced name.txt ", "spaced name.txt"),
        ("tab\there", "tabhere"),
    ],
)
def test_attachment_names_are_reduced_to_a_base_name(raw, name):
    assert attachment_name(raw) == name


@pytest.mark.parametrize("raw", ["", None, ".", "..", "../..", "a/..", "dir/", "\\", " . "])
def test_unusable_attachment_names_are_refused(raw):
    with pytest.raises(ValidationFailed):
        attachment_name(raw)


@pytest.mark.parametrize(
    ("raw", "ending"),
    [
        ("x" * 256, "x…"),
        ("x" * 2000 + ".txt", "x….txt"),
        ("é" * 1000 + ".tar.gz", "é….gz"),
        ("日本" * 300 + ".pdf", "….pdf"),
        ("report." + "b" * 300, "b…"),  # a 300-character "extension" is part of the name
    ],
)
def test_overlong_attachment_names_are_shortened_keeping_the_extension(raw, ending):
    name = attachment_name(raw)
    assert len(name.encode()) <= 255 and name.endswith(ending)
    assert name[: -len(ending)] == raw[: len(name) - len(ending)]
    assert attachment_name("x" * 255) == "x" * 255


def test_attachments_stored_0600_with_one_system_message_each(chat, temp_dir):
    files = [upload("../../x", b"one"), upload("..\\y", b"two"), upload("/etc/passwd", b"three")]
    messages = services.chat_attachments_add(chat=chat, files=files)
    folder = attachments_dir(chat.id)
    assert folder == temp_dir / f"malamar_chat_{chat.id}_attachments"
    assert sorted(p.name for p in folder.iterdir()) == ["passwd", "x", "y"]
    assert (folder / "x").read_bytes() == b"one"
    for path in folder.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert [m.message for m in messages] == [
        f"User has uploaded {folder / 'x'}",
        f"User has uploaded {folder / 'y'}",
        f"User has uploaded {folder / 'passwd'}",
    ]
    assert all(m.role == "system" for m in messages)
    assert os.path.isabs(messages[0].message.removeprefix("User has uploaded "))
    assert [e["author_type"] for e in events("chat.message_added")] == ["system"] * 3
    assert not (temp_dir.parent / "x").exists()


def test_same_name_overwrites_and_resets_mode(chat, temp_dir):
    services.chat_attachments_add(chat=chat, files=[upload("a.txt", b"first version, long")])
    path = attachments_dir(chat.id) / "a.txt"
    path.chmod(0o644)
    services.chat_attachments_add(chat=chat, files=[upload("a.txt", b"second")])
    assert path.read_bytes() == b"second"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(texts(chat)) == 2


def test_uploaded_files_are_streamed_in_chunks(chat, temp_dir):
    content = os.urandom(3 * 1024 * 1024 + 7)
    big = TemporaryUploadedFile("blob.bin", "application/octet-stream", len(content), None)
    big.write(content)
    big.seek(0)
    sizes = []
    original = big.chunks
    big.chunks = lambda size=None: (sizes.append(len(c)) or c for c in original(size))
    services.chat_attachments_add(chat=chat, files=[big])
    assert (attachments_dir(chat.id) / "blob.bin").read_bytes() == content
    assert len(sizes) == 4 and max(sizes) <= 1024 * 1024


def test_a_bad_name_refuses_the_whole_upload(chat, temp_dir):
    with pytest.raises(ValidationFailed):
        services.chat_attachments_add(chat=chat, files=[upload("ok.txt"), upload("..")])
    assert not attachments_dir(chat.id).exists()
    assert not ChatMessage.objects.exists()
    with pytest.raises(ValidationFailed):
        services.chat_attachments_add(chat=chat, files=[])


def test_symlink_at_the_target_name_is_not_followed(chat, temp_dir):
    victim = temp_dir / "victim.txt"
    victim.write_text("precious")
    folder = attachments_dir(chat.id)
    folder.mkdir(mode=0o700)
    (folder / "ok.txt").symlink_to(victim)
    with pytest.raises(ServiceError) as err:
        services.chat_attachments_add(chat=chat, files=[upload("first.txt"), upload("ok.txt")])
    assert "ok.txt" in err.value.message
    assert victim.read_text() == "precious"
    # the file stored before the failure is still announced to the agent
    assert texts(chat) == [("system", f"User has uploaded {folder / 'first.txt'}")]


def test_symlinked_attachment_folder_is_refused(chat, temp_dir):
    elsewhere = temp_dir / "elsewhere"
    elsewhere.mkdir()
    attachments_dir(chat.id).symlink_to(elsewhere)
    with pytest.raises(ServiceError):
        services.chat_attachments_add(chat=chat, files=[upload("a.txt")])
    assert list(elsewhere.iterdir()) == []


def test_missing_temp_dir_is_created(chat, tmp_path, settings):
    settings.CONFIG = dataclasses.replace(settings.CONFIG, temp_dir=tmp_path / "not" / "yet")
    services.chat_attachments_add(chat=chat, files=[upload("a.txt")])
    assert (attachments_dir(chat.id) / "a.txt").exists()


# --- selectors -----------------------------------------------------------------------------------


@pytest.mark.pg
def test_list_orders_by_latest_message_then_creation(workspace):
    a = services.chat_create(workspace=workspace, title="A")
    b = services.chat_create(workspace=workspace, title="B")
    c = services.chat_create(workspace=workspace, title="C")
    assert [x.title for x in selectors.chats_for_workspace(workspace.id)] == ["C", "B", "A"]
    services.chat_message_send(chat=a, message="bump")
    assert [x.title for x in selectors.chats_for_workspace(workspace.id)] == ["A", "C", "B"]
    services.chat_update(chat=b, title="B renamed")  # a rename is not chat activity
    assert [x.title for x in selectors.chats_for_workspace(workspace.id)] == [
        "A",
        "C",
        "B renamed",
    ]
    services.chat_message_add_system(chat=c, message="note")
    listed = selectors.chats_for_workspace(workspace.id)
    assert listed[0].id == c.id and listed[0].last_activity_at > c.created_at


@pytest.mark.pg
def test_list_search_and_workspace_scope(workspace):
    services.chat_create(workspace=workspace, title="Reviewer setup")
    services.chat_create(workspace=workspace, title="Deploy questions")
    services.chat_create(workspace=workspace_create(title="Other"), title="Reviewer elsewhere")
    assert [c.title for c in selectors.chats_for_workspace(workspace.id, "review")] == [
        "Reviewer setup"
    ]
    assert len(selectors.chats_for_workspace(workspace.id, "  ")) == 2


def test_summary_fields(workspace, agents):
    chat = services.chat_create(workspace=workspace, agent=agents[1])
    summary = selectors.chat_summary(chat.id)
    assert (summary.agent_name, summary.effective_cli_type) == ("Implementer", "claude")
    assert (summary.last_message_preview, summary.is_processing) == ("", False)
    assert summary.last_activity_at == chat.created_at
    services.chat_message_send(chat=chat, message="Line one\n\n  line   two")
    summary = selectors.chat_summary(chat.id)
    assert summary.last_message_preview == "Line one line two"
    assert summary.is_processing is True


def test_preview_of_agent_actions_without_text(chat):
    services.chat_message_add_agent(
        chat=chat,
        message="",
        actions=[
            {"type": "create_agent", "name": "Reviewer", "instruction": "..."},
            {"type": "rename_chat", "title": "Team setup"},
            {"type": "reorder_agents", "agent_ids": ["a", "b"]},
            {"type": "brand_new"},
        ],
    )
    preview = selectors.chat_summary(chat.id).last_message_preview
    assert preview == (
        'Created agent "Reviewer"; Renamed the chat "Team setup"; Reordered agents; Brand new'
    )
    services.chat_message_add_agent(chat=chat, message="Done!", actions=[{"type": "x"}])
    assert selectors.chat_summary(chat.id).last_message_preview == "Done!"


def test_long_preview_is_truncated(chat):
    services.chat_message_send(chat=chat, message="word " * 100)
    preview = selectors.chat_summary(chat.id).last_message_preview
    assert len(preview) <= selectors.PREVIEW_LENGTH and preview.endswith("…")


@pytest.mark.pg
def test_list_query_count_does_not_grow(workspace, agents, django_assert_num_queries):
    def make(n):
        for i in range(n):
            chat = services.chat_create(workspace=workspace, agent=agents[i % 2] if i % 3 else None)
            services.chat_message_send(chat=chat, message=f"m{i}")

    make(2)
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as few:
        selectors.chats_for_workspace(workspace.id)
    make(8)
    with django_assert_num_queries(len(few.captured_queries)):
        assert len(selectors.chats_for_workspace(workspace.id)) == 10


def test_detail_messages_oldest_first(chat):
    services.chat_message_send(chat=chat, message="first")
    ChatQueueItem.objects.update(status="completed")
    services.chat_message_add_agent(chat=chat, message="second", actions=None)
    services.chat_message_add_system(chat=chat, message="third")
    detail = selectors.chat_detail(chat.id)
    assert [m.message for m in detail.message_list] == ["first", "second", "third"]
    assert selectors.chat_detail("nope") is None


# --- settings and the Malamar agent --------------------------------------------------------------


def test_knowledge_base_url_setting(db):
    assert settings_get()["knowledge_base_url"] == ""
    settings_update(changes={"knowledge_base_url": " https://example.com/kb/README.md "})
    assert settings_public()["knowledge_base_url"] == "https://example.com/kb/README.md"
    assert settings_public()["mailgun_configured"] is False
    with pytest.raises(ValidationFailed):
        settings_update(changes={"knowledge_base_url": "file:///etc/passwd"})
    settings_update(changes={"knowledge_base_url": None})
    assert settings_get()["knowledge_base_url"] == ""


def test_knowledge_base_ships_with_the_app():
    folder = knowledge_base_dir()
    assert folder.is_absolute() and folder.is_dir()
    expected = {
        "README.md",
        "concepts.md",
        "writing-agent-instructions.md",
        "workflow-patterns.md",
        "workspace-configuration.md",
        "troubleshooting.md",
    }
    assert {name for name, _ in KNOWLEDGE_BASE_FILES} == expected
    for name in expected:
        assert (folder / name).read_text().startswith("# ")
    troubleshooting = (folder / "troubleshooting.md").read_text()
    for trap in ("IS_SANDBOX=1", "selectedType", "CODEX_API_KEY", "CODEX_HOME", "OpenCode"):
        assert trap in troubleshooting


def test_malamar_instruction(db):
    assert "one question at a time" in MALAMAR_INSTRUCTION.lower()
    for needle in ("skip", "comment", "review", "context file", "agent id"):
        assert needle in MALAMAR_INSTRUCTION.lower()
    text = malamar_instruction()
    assert str(knowledge_base_dir() / "concepts.md") in text
    assert "remote knowledge base" not in text
    settings_update(changes={"knowledge_base_url": "https://kb.example/README.md"})
    assert "https://kb.example/README.md" in malamar_instruction()


# --- migration -------------------------------------------------------------------------------


@pytest.mark.pg
@pytest.mark.django_db(transaction=True)
def test_migration_gives_every_chat_its_participant_before_the_chat_fields_go():
    from django.db import connection

    from tests.migration_history import migrate_through_originals

    old = migrate_through_originals(connection, [("chats", "0005_usage_limits")]).apps
    workspace = old.get_model("workspaces", "Workspace").objects.create(id="w" * 21, title="W")
    agent = old.get_model("agents", "Agent").objects.create(
        id="a" * 21, workspace=workspace, name="Planner", instruction="Plan", order=1
    )
    Chat, Participant = old.get_model("chats", "Chat"), old.get_model("chats", "ChatParticipant")
    only_fields = Chat.objects.create(
        id="c" * 21, workspace=workspace, agent=agent, cli_type="codex"
    )
    malamar = Chat.objects.create(id="m" * 21, workspace=workspace)
    grouped = Chat.objects.create(id="g" * 21, workspace=workspace, agent=agent)
    Participant.objects.create(id="p" * 21, chat=grouped, agent=agent, position=0)
    Participant.objects.create(id="q" * 21, chat=grouped, agent=None, position=1)

    migrate_through_originals(connection)
    rows = {
        chat_id: list(
            ChatParticipant.objects.filter(chat_id=chat_id)
            .in_order()
            .values_list("agent_id", "cli_type", "position")
        )
        for chat_id in (only_fields.id, malamar.id, grouped.id)
    }
    assert rows == {
        only_fields.id: [(agent.id, "codex", 0)],
        malamar.id: [(None, None, 0)],
        grouped.id: [(agent.id, None, 0), (None, None, 1)],  # already had its rows: untouched
    }
    assert selectors.chat_summary(only_fields.id).effective_cli_type == "codex"
