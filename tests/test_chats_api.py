"""The chat endpoints: shapes, status codes, conflicts, uploads and their protections."""

import dataclasses
import stat
import uuid

import pytest

from chats.attachments import attachments_dir
from chats.models import Chat, ChatMessage, ChatQueueItem
from core.models import OutboxEvent
from runner.models import CliHealth
from tests.conftest import error_of
from workspaces.services import workspace_create

CHAT_FIELDS = {
    "id",
    "workspace_id",
    "agent_id",
    "agent_name",
    "cli_type",
    "effective_cli_type",
    "title",
    "is_processing",
    "last_message_preview",
    "last_activity_at",
    "last_seen_at",  # "Needs you": replies after it wait for the person
    "created_at",
    "updated_at",
}
MESSAGE_FIELDS = {"id", "chat_id", "role", "message", "actions", "created_at"}
MESSAGE_FIELDS |= {"agent_id", "agent_name", "included"}  # group chat


@pytest.fixture
def temp_dir(tmp_path, settings):
    settings.CONFIG = dataclasses.replace(settings.CONFIG, temp_dir=tmp_path)
    return tmp_path


@pytest.fixture
def chat(api, workspace):
    return api.post(f"/api/workspaces/{workspace.id}/chats", {}).json()


def multipart(files: list[tuple[str, bytes]], field: str = "files") -> tuple[bytes, str]:
    """A raw multipart body, so file names reach the server exactly as a client sent them."""
    boundary = uuid.uuid4().hex
    parts = []
    for name, content in files:
        parts.append(
            f"--{boundary}\r\n"
            f'Content-Disposition: form-data; name="{field}"; filename="{name}"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n".encode()
            + content
            + b"\r\n"
        )
    body = b"".join(parts) + f"--{boundary}--\r\n".encode()
    return body, f"multipart/form-data; boundary={boundary}"


def upload(api, chat_id, files, field="files", **extra):
    body, content_type = multipart(files, field)
    return api.client.post(
        f"/api/chats/{chat_id}/attachments", body, content_type=content_type, **extra
    )


@pytest.mark.pg
def test_create_list_search_and_order(api, workspace, agents):
    base = f"/api/workspaces/{workspace.id}/chats"
    created = api.post(base, {})
    assert created.status_code == 201
    malamar = created.json()
    assert set(malamar) == CHAT_FIELDS
    assert (malamar["title"], malamar["agent_id"], malamar["agent_name"]) == (
        "Untitled chat",
        None,
        "Malamar",
    )
    assert (malamar["cli_type"], malamar["effective_cli_type"]) == (None, "claude")
    assert (malamar["is_processing"], malamar["last_message_preview"]) == (False, "")
    planner = api.post(base, {"agent_id": agents[0].id, "title": "Planning help"}).json()
    assert (planner["agent_name"], planner["title"]) == ("Planner", "Planning help")
    listed = api.get(base).json()
    assert set(listed) == {"chats"}
    assert [c["id"] for c in listed["chats"]] == [planner["id"], malamar["id"]]
    api.post(f"/api/chats/{malamar['id']}/messages", {"message": "bump"})
    assert [c["id"] for c in api.get(base).json()["chats"]] == [malamar["id"], planner["id"]]
    found = api.get(f"{base}?q=PLAN").json()["chats"]
    assert [c["id"] for c in found] == [planner["id"]]
    assert api.get(f"{base}?q=zzz").json() == {"chats": []}


def test_create_validation(api, workspace):
    base = f"/api/workspaces/{workspace.id}/chats"
    other = workspace_create(title="Other")
    stranger = api.post(
        f"/api/workspaces/{other.id}/agents", {"name": "Stranger", "instruction": "x"}
    ).json()
    refused = api.post(base, {"agent_id": stranger["id"]})
    assert refused.status_code == 400 and "agent" in error_of(refused)["message"].lower()
    extra = api.post(base, {"agent": "x"})
    assert extra.status_code == 400 and "agent" in error_of(extra)["message"]
    assert api.post("/api/workspaces/nope/chats", {}).status_code == 404
    assert api.get("/api/workspaces/nope/chats").status_code == 404
    assert not Chat.objects.exists()


def test_detail_with_messages_oldest_first(api, chat):
    api.post(f"/api/chats/{chat['id']}/messages", {"message": "first"})
    ChatQueueItem.objects.update(status="completed")
    api.post(f"/api/chats/{chat['id']}/messages", {"message": "second"})
    detail = api.get(f"/api/chats/{chat['id']}")
    assert detail.status_code == 200
    body = detail.json()
    assert set(body) == CHAT_FIELDS | {"messages", "participants"}
    assert [m["message"] for m in body["messages"]] == ["first", "second"]
    assert set(body["messages"][0]) == MESSAGE_FIELDS
    assert body["is_processing"] is True
    assert body["last_message_preview"] == "second"
    missing = api.get("/api/chats/nope")
    assert missing.status_code == 404 and error_of(missing)["message"] == "Chat not found"


def test_update_title_agent_and_cli(api, chat, agents):
    url = f"/api/chats/{chat['id']}"
    renamed = api.put(url, {"title": "Team setup"})
    assert renamed.status_code == 200 and renamed.json()["title"] == "Team setup"
    override = api.put(url, {"cli_type": "gemini"}).json()
    assert (override["cli_type"], override["effective_cli_type"]) == ("gemini", "gemini")
    switched = api.put(url, {"agent_id": agents[2].id}).json()
    assert (switched["agent_name"], switched["cli_type"]) == ("Reviewer", None)
    assert switched["effective_cli_type"] == "claude"
    assert switched["last_message_preview"] == "Switched from Malamar to Reviewer"
    back = api.put(url, {"agent_id": None}).json()
    assert (back["agent_id"], back["agent_name"]) == (None, "Malamar")
    messages = api.get(url).json()["messages"]
    assert [(m["role"], m["message"]) for m in messages] == [
        ("system", "Switched from Malamar to Reviewer"),
        ("system", "Switched from Reviewer to Malamar"),
    ]
    cleared = api.put(url, {"cli_type": None}).json()
    assert cleared["cli_type"] is None
    assert api.put(url, {}).status_code == 200


@pytest.mark.parametrize(
    "body,needle",
    [
        ({"cli_type": "vim"}, "cli_type"),
        ({"title": ""}, "Title"),
        ({"title": None}, "Title"),
        ({"agent_id": "nope"}, "Agent"),
        ({"color": "red"}, "color"),
    ],
)
def test_update_validation(api, chat, body, needle):
    response = api.put(f"/api/chats/{chat['id']}", body)
    assert response.status_code == 400 and needle in error_of(response)["message"]


def test_update_refuses_foreign_workspace_agent(api, chat):
    other = workspace_create(title="Other")
    stranger = api.post(
        f"/api/workspaces/{other.id}/agents", {"name": "Stranger", "instruction": "x"}
    ).json()
    response = api.put(f"/api/chats/{chat['id']}", {"agent_id": stranger["id"]})
    assert response.status_code == 400
    assert api.get(f"/api/chats/{chat['id']}").json()["agent_name"] == "Malamar"


def test_deleting_the_agent_switches_its_chats_to_malamar(api, workspace, agents):
    chat = api.post(f"/api/workspaces/{workspace.id}/chats", {"agent_id": agents[1].id}).json()
    api.put(f"/api/chats/{chat['id']}", {"cli_type": "codex"})
    assert api.delete(f"/api/agents/{agents[1].id}").status_code == 204
    after = api.get(f"/api/chats/{chat['id']}").json()
    assert (after["agent_id"], after["agent_name"], after["cli_type"]) == (None, "Malamar", None)
    assert after["messages"][-1]["message"] == "Switched from Implementer to Malamar"


def test_send_message(api, chat):
    response = api.post(f"/api/chats/{chat['id']}/messages", {"message": "Help me"})
    assert response.status_code == 201
    msg = response.json()
    assert set(msg) == MESSAGE_FIELDS
    assert (msg["chat_id"], msg["role"], msg["message"], msg["actions"]) == (
        chat["id"],
        "user",
        "Help me",
        None,
    )
    assert ChatQueueItem.objects.get(chat_id=chat["id"]).status == "queued"
    event = OutboxEvent.objects.filter(type="chat.message_added").get()
    assert event.payload == {
        "chat_id": chat["id"],
        "chat_title": "Untitled chat",
        "workspace_id": chat["workspace_id"],
        "author_type": "user",
    }
    assert api.get(f"/api/chats/{chat['id']}").json()["is_processing"] is True


@pytest.mark.parametrize("status", ["queued", "in_progress"])
def test_second_send_is_a_409_while_pending(api, chat, status):
    url = f"/api/chats/{chat['id']}/messages"
    api.post(url, {"message": "one"})
    ChatQueueItem.objects.update(status=status)
    again = api.post(url, {"message": "two"})
    assert again.status_code == 409 and error_of(again)["code"] == "CONFLICT"
    assert ChatMessage.objects.filter(role="user").count() == 1


def test_send_validation(api, chat):
    url = f"/api/chats/{chat['id']}/messages"
    assert api.post(url, {"message": "  "}).status_code == 400
    assert api.post(url, {}).status_code == 400
    assert api.post(url, {"message": "x", "extra": 1}).status_code == 400
    assert api.post("/api/chats/nope/messages", {"message": "x"}).status_code == 404


def test_send_without_any_cli_available(api, chat):
    for cli in ("claude", "codex", "gemini", "opencode"):
        CliHealth.objects.create(cli_type=cli, status="unhealthy", error="not installed")
    assert api.get(f"/api/chats/{chat['id']}").json()["effective_cli_type"] is None
    response = api.post(f"/api/chats/{chat['id']}/messages", {"message": "hi"})
    assert response.status_code == 409
    assert error_of(response)["message"].startswith("No CLI available")
    assert not ChatQueueItem.objects.exists()


def test_send_with_unhealthy_override_or_agent_cli(api, workspace, agents, chat):
    CliHealth.objects.create(cli_type="gemini", status="unhealthy", error="401")
    api.put(f"/api/chats/{chat['id']}", {"cli_type": "gemini"})
    response = api.post(f"/api/chats/{chat['id']}/messages", {"message": "hi"})
    assert response.status_code == 409 and "No CLI available" in error_of(response)["message"]
    gemini_agent = api.post(
        f"/api/workspaces/{workspace.id}/agents",
        {"name": "Researcher", "instruction": "Research", "cli_type": "gemini"},
    ).json()
    with_agent = api.post(
        f"/api/workspaces/{workspace.id}/chats", {"agent_id": gemini_agent["id"]}
    ).json()
    response = api.post(f"/api/chats/{with_agent['id']}/messages", {"message": "hi"})
    assert response.status_code == 409 and "Researcher" in error_of(response)["message"]
    # Not checked yet counts as available; the override rescues the chat.
    api.put(f"/api/chats/{with_agent['id']}", {"cli_type": "opencode"})
    ok = api.post(f"/api/chats/{with_agent['id']}/messages", {"message": "hi"})
    assert ok.status_code == 201


def test_cancel(api, chat):
    url = f"/api/chats/{chat['id']}/cancel"
    nothing = api.post(url)
    assert nothing.status_code == 409 and error_of(nothing)["code"] == "CONFLICT"
    api.post(f"/api/chats/{chat['id']}/messages", {"message": "hi"})
    cancelled = api.post(url)
    assert cancelled.status_code == 200
    assert set(cancelled.json()) == CHAT_FIELDS
    assert cancelled.json()["is_processing"] is False
    assert cancelled.json()["last_message_preview"] == "Stopped by user"
    assert ChatQueueItem.objects.get(chat_id=chat["id"]).status == "failed"
    assert api.post(f"/api/chats/{chat['id']}/messages", {"message": "again"}).status_code == 201
    ChatQueueItem.objects.filter(status="queued").update(status="in_progress")
    stopping = api.post(url)
    assert stopping.status_code == 200 and stopping.json()["is_processing"] is True
    running = ChatQueueItem.objects.get(status="in_progress")
    assert running.stop_requested_at is not None
    assert api.post(url).status_code == 200  # asking again while it stops is harmless


def test_delete_chat(api, chat, temp_dir, django_capture_on_commit_callbacks):
    assert upload(api, chat["id"], [("a.txt", b"x")]).status_code == 201
    api.post(f"/api/chats/{chat['id']}/messages", {"message": "hi"})
    folder = attachments_dir(chat["id"])
    assert folder.is_dir()
    with django_capture_on_commit_callbacks(execute=True):
        response = api.delete(f"/api/chats/{chat['id']}")
    assert response.status_code == 204
    assert not folder.exists()
    assert not ChatQueueItem.objects.exists() and not ChatMessage.objects.exists()
    assert api.get(f"/api/chats/{chat['id']}").status_code == 404
    assert api.delete(f"/api/chats/{chat['id']}").status_code == 404
    deleted = OutboxEvent.objects.filter(type="chat.deleted").get()
    assert deleted.payload["chat_id"] == chat["id"]


def test_upload_several_files(api, chat, temp_dir):
    response = upload(
        api,
        chat["id"],
        [
            ("notes.md", b"# notes"),
            ("../../x", b"escape"),
            ("..\\y", b"win"),
            ("/etc/passwd", b"p"),
        ],
    )
    assert response.status_code == 201
    folder = attachments_dir(chat["id"])
    assert sorted(p.name for p in folder.iterdir()) == ["notes.md", "passwd", "x", "y"]
    assert (folder / "x").read_bytes() == b"escape"
    assert not (temp_dir.parent / "x").exists() and not (temp_dir / "x").exists()
    for path in folder.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    messages = response.json()["messages"]
    assert [m["message"] for m in messages] == [
        f"User has uploaded {folder / name}" for name in ("notes.md", "x", "y", "passwd")
    ]
    assert {m["role"] for m in messages} == {"system"}
    assert set(messages[0]) == MESSAGE_FIELDS
    detail = api.get(f"/api/chats/{chat['id']}").json()
    assert len(detail["messages"]) == 4 and detail["is_processing"] is False
    assert not ChatQueueItem.objects.exists()  # uploads never start the agent


def test_upload_overwrites_same_name(api, chat, temp_dir):
    upload(api, chat["id"], [("plan.md", b"v1 with more text")])
    upload(api, chat["id"], [("plan.md", b"v2")])
    assert (attachments_dir(chat["id"]) / "plan.md").read_bytes() == b"v2"
    assert ChatMessage.objects.filter(role="system").count() == 2


def test_upload_large_file(api, chat, temp_dir):
    content = b"0123456789abcdef" * (256 * 1024 + 3)  # 4 MB: spooled to disk by Django
    assert upload(api, chat["id"], [("big.bin", content)]).status_code == 201
    assert (attachments_dir(chat["id"]) / "big.bin").read_bytes() == content


@pytest.mark.parametrize("names", [[".."], ["."], [""], ["dir/"]])
def test_upload_without_usable_names_is_refused(api, chat, temp_dir, names):
    response = upload(api, chat["id"], [(name, b"x") for name in names])
    assert response.status_code == 400 and error_of(response)["code"] == "VALIDATION_ERROR"
    assert not ChatMessage.objects.exists()


def test_upload_needs_the_files_field(api, chat, temp_dir):
    response = upload(api, chat["id"], [("a.txt", b"x")], field="file")
    assert response.status_code == 400 and "files" in error_of(response)["message"]


def test_cross_site_upload_is_refused(api, chat, temp_dir):
    response = upload(api, chat["id"], [("a.txt", b"x")], HTTP_ORIGIN="http://evil.example")
    assert response.status_code == 403 and error_of(response)["code"] == "FORBIDDEN"
    response = upload(api, chat["id"], [("a.txt", b"x")], HTTP_SEC_FETCH_SITE="cross-site")
    assert response.status_code == 403
    assert not attachments_dir(chat["id"]).exists()
    same = upload(api, chat["id"], [("a.txt", b"x")], HTTP_ORIGIN="http://testserver")
    assert same.status_code == 201


def test_multipart_is_refused_elsewhere(api, chat):
    body, content_type = multipart([("a.txt", b"x")])
    response = api.client.post(f"/api/chats/{chat['id']}/messages", body, content_type=content_type)
    assert response.status_code == 415


def test_upload_to_unknown_chat(api, temp_dir):
    assert upload(api, "nope", [("a.txt", b"x")]).status_code == 404


def test_openapi_lists_chat_endpoints(api):
    paths = api.get("/api/openapi.json").json()["paths"]
    for path in (
        "/api/workspaces/{workspace_id}/chats",
        "/api/chats/{chat_id}",
        "/api/chats/{chat_id}/messages",
        "/api/chats/{chat_id}/cancel",
        "/api/chats/{chat_id}/attachments",
    ):
        assert path in paths
