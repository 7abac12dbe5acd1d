"""Export, import and clone of a workspace (one versioned JSON file), and `malamar backup`."""

import copy
import dataclasses
import io
import json

import pytest

from agents.services import agent_create
from chats import services as chat_services
from chats.attachments import attachments_dir
from core.actors import SYSTEM, USER, agent_actor
from core.errors import ValidationFailed
from tasks import services as task_services
from tasks.models import Task, TaskQueueItem, TaskStatus
from tests.htmltree import parse
from workspaces import transfer
from workspaces.models import Workspace
from workspaces.services import workspace_clone, workspace_create, workspace_import
from workspaces.transfer_format import parse_document

pytestmark = pytest.mark.django_db


@pytest.fixture
def temp_dir(tmp_path, settings):
    settings.CONFIG = dataclasses.replace(settings.CONFIG, temp_dir=tmp_path)
    return tmp_path


def upload(name, content):
    source = io.BytesIO(content)
    source.name = name
    return source


def import_file(raw, title=None):
    return workspace_import(document=parse_document(raw), title=title)


def force_status(task, status):
    Task.objects.filter(id=task.id).update(status=status)
    task.status = status


@pytest.fixture
def full(temp_dir):
    """A workspace with every kind of row the export carries."""
    ws = workspace_create(
        title="Full",
        description="Shared rules",
        working_directory_mode="temp",
        auto_delete_done_tasks=False,
        retention_days=30,
        notify_on_error="off",
        notify_on_in_review="on",
        stall_kill_minutes=12.5,
    )
    planner = agent_create(workspace=ws, name="Planner", instruction="Plan it.", cli_type="codex")
    coder = agent_create(
        workspace=ws,
        name="Coder",
        instruction="Code it.",
        cli_type="gemini",
        model="gemini-2.5-pro",
        extra_args=["--debug"],
    )
    plan = task_services.task_create(workspace=ws, summary="Plan", description="*markdown*")
    build = task_services.task_create(workspace=ws, summary="Build", blocked_by=[plan.id])
    task_services.task_create(workspace=ws, summary="Ship", blocked_by=[plan.id, build.id])
    task_services.comment_create(task=plan, content="A user note", actor=USER)
    task_services.comment_create(task=plan, content="Planned.", actor=agent_actor(planner))
    task_services.comment_create(task=plan, content="Run failed", actor=SYSTEM, kind="error")
    force_status(plan, TaskStatus.IN_REVIEW)
    task_services.task_status_set(task=plan, status=TaskStatus.DONE, actor=USER)
    review = task_services.task_create(workspace=ws, summary="Review")
    force_status(review, TaskStatus.IN_REVIEW)
    task_services.task_prioritize_toggle(task=build)
    chat = chat_services.chat_create(workspace=ws, agent=coder, title="About the build")
    chat_services.chat_participant_add(chat=chat, agent_id=None)
    chat_services.chat_attachments_add(chat=chat, files=[upload("spec.txt", b"the spec")])
    chat_services.chat_message_add_agent(
        chat=chat, message="Created it", actions=[{"type": "create_task", "task_id": build.id}]
    )
    chat_services.chat_create(workspace=ws, title="Malamar chat")
    return ws


def normalized(document: dict) -> dict:
    """The document with every id replaced by its order of first appearance, and the parts
    that differ between two exports by nature (export time, attachment folder) dropped."""
    doc = copy.deepcopy(document)
    doc.pop("exported_at")
    ids: dict[str, str] = {}

    def name(value):
        return ids.setdefault(value, f"#{len(ids)}")

    for agent in doc["agents"]:
        agent["id"] = name(agent["id"])
    for task in doc["tasks"]:
        task["id"] = name(task["id"])
    for chat in doc["chats"]:
        chat["id"] = name(chat["id"])
        folder = chat.pop("attachments_dir", None)
        for message in chat["messages"]:
            if folder:
                message["message"] = message["message"].replace(folder, "<folder>")

    def swap(value):
        if isinstance(value, str):
            return ids.get(value, value)
        if isinstance(value, list):
            return [swap(v) for v in value]
        if isinstance(value, dict):
            return {k: swap(v) for k, v in value.items()}
        return value

    swapped = swap(doc)
    for task in swapped["tasks"]:
        for row in task["comments"] + task["logs"]:
            row.pop("id")
    return swapped


@pytest.mark.pg
def test_export_import_round_trip_is_equal_but_for_ids(full):
    document = transfer.export_document(full, chats=True, attachments=True)
    assert document["format"] == "malamar.workspace" and document["version"] == 1
    assert len(document["tasks"]) == 4 and len(document["dependencies"]) == 3
    assert any(c["attachments"] for c in document["chats"])
    coder = next(a for a in document["agents"] if a["name"] == "Coder")
    assert (coder["model"], coder["extra_args"]) == ("gemini-2.5-pro", ["--debug"])
    raw = json.dumps(document)
    copy_ws = import_file(raw.encode())
    assert copy_ws.id != full.id
    again = transfer.export_document(copy_ws, chats=True, attachments=True)
    assert normalized(again) == normalized(document)
    assert not set(_all_ids(document)) & set(_all_ids(again))  # every row is new
    # The attachment is on disk for the new chat, and its message names the new folder.
    chat = copy_ws.chats.get(title="About the build")
    assert (attachments_dir(chat.id) / "spec.txt").read_bytes() == b"the spec"
    assert (
        str(attachments_dir(chat.id))
        in chat.messages.get(role="system", message__contains="upl").message
    )
    # Imported work starts paused (issue 29): nothing queued until the person resumes it;
    # blockers still hold.
    assert not TaskQueueItem.objects.filter(workspace=copy_ws).exists()
    paused = set(copy_ws.tasks.paused().values_list("summary", flat=True))
    assert paused == {"Build", "Ship"}
    ship = copy_ws.tasks.get(summary="Ship")
    assert ship.blocker_links.count() == 2
    assert task_services.tasks_resume(workspace=copy_ws) == 2
    queued = set(
        TaskQueueItem.objects.filter(workspace=copy_ws).values_list("task__summary", flat=True)
    )
    assert queued == {"Build", "Ship"} and not copy_ws.tasks.paused().exists()


def _all_ids(document):
    for key in ("agents", "tasks", "chats"):
        for row in document[key]:
            yield row["id"]


def test_export_without_chats_and_in_progress_comes_back_as_todo(full):
    force_status(full.tasks.get(summary="Build"), TaskStatus.IN_PROGRESS)
    document = transfer.export_document(full)
    assert document["chats"] == [] and document["includes"]["chats"] is False
    imported = import_file(document)
    assert imported.tasks.get(summary="Build").status == TaskStatus.TODO
    assert imported.chats.count() == 0


def snapshot():
    from django.apps import apps

    return {
        model._meta.db_table: model.objects.count()
        for model in apps.get_models()
        if model._meta.app_label in ("workspaces", "agents", "tasks", "chats")
    }


def broken_variants(document):
    def edit(change):
        doc = copy.deepcopy(document)
        change(doc)
        return doc

    yield "not json", b"{nope", "not valid JSON"
    yield "not ours", json.dumps({"hello": 1}), "not a Malamar workspace export"
    yield "newer", edit(lambda d: d.update(version=2)), "newer Malamar (format version 2"
    yield "no version", edit(lambda d: d.pop("version")), "no valid format version"
    yield "bad status", edit(lambda d: d["tasks"][0].update(status="flying")), "tasks.0.status"
    yield (
        "dangling dependency",
        edit(lambda d: d["dependencies"][0].update(blocker_id="nope")),
        "a dependency names a task that is not in the file",
    )
    yield (
        "cycle",
        edit(
            lambda d: d["dependencies"].append(
                {
                    "task_id": d["tasks"][0]["id"],
                    "blocker_id": d["tasks"][2]["id"],
                    "created_at": d["exported_at"],
                }
            )
        ),
        "form a cycle",
    )
    yield (
        "duplicate agent names (database rule)",
        edit(lambda d: d["agents"][1].update(name=d["agents"][0]["name"])),
        "The file is broken",
    )
    yield (
        "unknown agent field",
        edit(lambda d: d["agents"][0].update(colour="red")),
        "unknown agent field 'colour'",
    )
    yield (
        "unknown workspace field",
        edit(lambda d: d["workspace"].update(colour="red")),
        "unknown workspace field 'colour'",
    )
    yield (
        "bad setting",
        edit(lambda d: d["workspace"].update(retention_days=-4)),
        "retention_days",
    )
    yield (
        "NUL in a text (PostgreSQL cannot store it)",
        json.dumps(edit(lambda d: d["tasks"][0].update(description="a\x00b"))),
        "tasks.0.description: contains a NUL character",
    )
    yield (
        "a lone surrogate in a text",
        json.dumps(edit(lambda d: d["agents"][0].update(instruction="a\ud800b"))),
        "agents.0.instruction: contains an invalid character",
    )
    yield (
        "nested deeper than Python reads",
        b'{"format": "malamar.workspace", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        "nested too deeply",
    )
    yield (
        "an option as an agent's model (the agent dialog refuses it)",
        edit(lambda d: d["agents"][0].update(model="--dangerously-skip-permissions")),
        "Model must be a model name, not an option",
    )
    yield (
        "extra arguments that are one string (each character would be an argument)",
        edit(lambda d: d["agents"][0].update(extra_args="--yolo")),
        "extra_args must be a list of strings",
    )
    yield (
        "an extra argument Malamar sets itself",
        edit(lambda d: d["agents"][0].update(extra_args=["--sandbox", "danger-full-access"])),
        "is not allowed for",
    )
    yield (
        "a fallback CLI that is the agent's own",
        edit(lambda d: d["agents"][0].update(fallback_cli_type=d["agents"][0]["cli_type"])),
        "The fallback CLI must differ",
    )
    yield (
        "a chat participant on a CLI Malamar does not know (the chat then failed with "
        "'internal error (KeyError: bogus)')",
        edit(lambda d: d["chats"][0]["participants"][0].update(cli_type="bogus")),
        "cli_type must be one of claude, gemini, codex, opencode or null",
    )
    yield (
        "bad base64 in an attachment",
        edit(
            lambda d: (
                d["chats"][-1]
                .setdefault("attachments", [])
                .append({"name": "x", "content_base64": "!!!"})
            )
        ),
        "base64",
    )


@pytest.mark.pg
def test_broken_or_newer_files_are_refused_and_leave_the_database_unchanged(full, temp_dir):
    document = transfer.export_document(full, chats=True, attachments=True)
    before = snapshot()
    folders = sorted(p.name for p in temp_dir.iterdir())
    for label, raw, message in broken_variants(document):
        with pytest.raises(ValidationFailed) as err:
            import_file(raw)
        assert message in err.value.message, label
        assert snapshot() == before, label
    assert sorted(p.name for p in temp_dir.iterdir()) == folders


@pytest.mark.pg
def test_a_failure_late_in_the_import_rolls_everything_back(full, temp_dir, monkeypatch):
    document = transfer.export_document(full, chats=True, attachments=True)
    before = snapshot()
    folders = sorted(p.name for p in temp_dir.iterdir())
    monkeypatch.setattr(
        "workspaces.services.events.publish", lambda *a, **k: (_ for _ in ()).throw(OSError("disk"))
    )
    with pytest.raises(OSError):
        import_file(document)
    assert snapshot() == before
    assert sorted(p.name for p in temp_dir.iterdir()) == folders  # attachment files removed


def test_clone_copies_settings_and_agents_but_no_tasks_or_chats(full):
    clone = workspace_clone(workspace=full)
    assert clone.title == "Full (copy)"
    for field in transfer.SETTING_FIELDS[1:]:
        assert getattr(clone, field) == getattr(full, field), field
    fields = ("name", "cli_type", "instruction", "model", "extra_args", "custom_env")
    assert [[getattr(a, f) for f in fields] for a in clone.agents.order_by("order")] == [
        [getattr(a, f) for f in fields] for a in full.agents.order_by("order")
    ]
    assert clone.tasks.count() == 0 and clone.chats.count() == 0
    named = workspace_clone(workspace=full, title="Second team")
    assert named.title == "Second team"
    assert Workspace.objects.count() == 3


# --- JSON API -------------------------------------------------------------------------------


def test_api_export_import_and_clone(api, full):
    from tests.conftest import error_of

    response = api.get(f"/api/workspaces/{full.id}/export?chats=true")
    assert response.status_code == 200
    assert response["Content-Disposition"].startswith('attachment; filename="malamar-full-')
    document = response.json()
    assert document["includes"] == {"tasks": True, "chats": True, "attachments": False}
    response = api.post("/api/workspaces/import", document)
    assert response.status_code == 201, response.content
    imported = response.json()
    assert imported["title"] == "Full" and imported["id"] != full.id
    before = snapshot()
    response = api.post("/api/workspaces/import", {**document, "version": 99})
    assert response.status_code == 400
    assert "newer Malamar" in error_of(response)["message"]
    assert snapshot() == before
    response = api.post(f"/api/workspaces/{full.id}/clone", {"title": "Team B"})
    assert response.status_code == 201 and response.json()["title"] == "Team B"
    assert api.post(f"/api/workspaces/{full.id}/clone").status_code == 201
    assert api.post("/api/workspaces/nope/clone").status_code == 404


# --- pages ----------------------------------------------------------------------------------


def test_pages_export_clone_and_import_upload(client, full):
    from django.core.files.uploadedfile import SimpleUploadedFile

    page = parse(client.get(f"/workspaces/{full.id}/settings/").content.decode())
    assert page.by_id("export-form").tag == "form" and page.by_id("clone-form").tag == "form"
    response = client.get(f"/workspaces/{full.id}/export/?chats=1")
    assert response.status_code == 200 and "attachment;" in response["Content-Disposition"]
    raw = response.content
    assert json.loads(raw)["includes"]["chats"] is True

    response = client.post(f"/workspaces/{full.id}/clone/", {"title": ""})
    clone = Workspace.objects.get(title="Full (copy)")
    assert response.status_code == 302 and response["Location"].endswith(f"/{clone.id}/settings/")

    home = client.get("/").content.decode()
    assert 'id="import-form"' in home and 'enctype="multipart/form-data"' in home
    upload = SimpleUploadedFile("export.json", raw, content_type="application/json")
    response = client.post("/workspaces/import/", {"file": upload})
    assert response.status_code == 302
    imported = Workspace.objects.filter(title="Full").exclude(id=full.id).get()
    assert response["Location"].endswith(f"/workspaces/{imported.id}/")
    page = client.get(response["Location"]).content.decode()
    assert "its 2 tasks wait, paused, until you resume them" in page

    before = snapshot()
    newer = json.dumps({**json.loads(raw), "version": 7}).encode()
    upload = SimpleUploadedFile("export.json", newer, content_type="application/json")
    response = client.post("/workspaces/import/", {"file": upload}, follow=True)
    flash = parse(response.content.decode()).by_id("flash-messages").find_all(tag="li")
    assert any(
        message.text.startswith("Nothing was imported: The file is from a newer Malamar")
        for message in flash
    )
    assert snapshot() == before


def test_secret_agent_fields_keep_their_names_and_lose_their_values():
    row = {"name": "Coder", "custom_env": {"API_KEY": "sk-secret", "REGION": "eu"}}
    assert transfer.without_secrets(row) == {
        "name": "Coder",
        "custom_env": {"API_KEY": "", "REGION": ""},
    }
    assert transfer.without_secrets({"name": "No env"}) == {"name": "No env"}


def test_a_custom_cli_agent_travels_without_its_env_values(workspace):
    agent_create(
        workspace=workspace,
        name="Local",
        instruction="Work.",
        cli_type="custom",
        custom_binary="/bin/true",
        custom_args="{prompt}",
        custom_env={"API_KEY": "sk-secret"},
    )
    document = transfer.export_document(workspace)
    [agent] = document["agents"]
    assert agent["custom_env"] == {"API_KEY": ""} and "sk-secret" not in json.dumps(document)
    imported = import_file(document)
    copy_agent = imported.agents.get()
    assert (copy_agent.cli_type, copy_agent.custom_binary) == ("custom", "/bin/true")
    assert copy_agent.custom_env == {"API_KEY": ""}
    assert workspace_clone(workspace=workspace).agents.get().custom_env == {"API_KEY": "sk-secret"}
