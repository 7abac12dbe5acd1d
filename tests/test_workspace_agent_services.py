"""Workspaces and agents: validation, ordering, reorder rules and the cascade rules."""

import pytest

from agents.models import Agent
from agents.services import agent_create, agent_reorder, agent_update
from chats.models import Chat, ChatMessage, ChatParticipant, ChatQueueItem
from chats.services import chat_create, chats_agent_delete
from core.actors import USER, agent_actor
from core.errors import Conflict, ValidationFailed
from core.models import OutboxEvent
from malamar_site.services import workspace_delete
from tasks.models import TaskComment, TaskLog, TaskQueueItem
from tasks.selectors import comments_for_task
from tasks.services import comment_create
from workspaces.models import Workspace
from workspaces.services import workspace_create, workspace_update


def test_workspace_defaults(workspace):
    assert workspace.working_directory_mode == "temp"
    assert workspace.auto_delete_done_tasks is False  # Done tasks are kept (issue 29)
    assert workspace.keep_merged_branches is False
    assert workspace.retention_days == 7
    assert (workspace.notify_on_error, workspace.notify_on_in_review) == ("inherit", "inherit")
    assert len(workspace.id) == 21


def test_workspace_notifications_inherit_the_global_switch_until_set(db):
    from core.settings_store import settings_update
    from workspaces.selectors import notify_effective

    ws = workspace_create(title="W")  # created while the global switches are on
    assert ws.notify_on_error == "inherit" and notify_effective(ws, "notify_on_error")
    settings_update(changes={"notify_on_error": False})  # later turned off globally
    assert notify_effective(ws, "notify_on_error") is False
    assert notify_effective(ws, "notify_on_in_review") is True
    workspace_update(workspace=ws, notify_on_error="on", notify_on_in_review="off")
    assert notify_effective(ws, "notify_on_error") is True  # its own value wins
    assert notify_effective(ws, "notify_on_in_review") is False


@pytest.mark.parametrize("bad", ["yes", "", None, 1])
def test_workspace_notification_values_validated(workspace, bad):
    with pytest.raises(ValidationFailed) as err:
        workspace_update(workspace=workspace, notify_on_error=bad)
    assert err.value.field == "notify_on_error" and "'inherit', 'on' or 'off'" in err.value.message


def test_workspace_requires_title(db):
    with pytest.raises(ValidationFailed) as err:
        workspace_create(title=" ")
    assert err.value.field == "title"


def test_static_mode_requires_a_path_to_an_existing_folder(workspace, tmp_path):
    with pytest.raises(ValidationFailed) as err:
        workspace_update(workspace=workspace, working_directory_mode="static")
    assert err.value.field == "working_directory_path"
    with pytest.raises(ValidationFailed, match="does not exist: create it first") as err:
        workspace_update(
            workspace=workspace,
            working_directory_mode="static",
            working_directory_path="/does/not/exist/yet",
        )
    assert err.value.field == "working_directory_path"
    assert Workspace.objects.get(id=workspace.id).working_directory_mode == "temp"
    workspace_update(
        workspace=workspace, working_directory_mode="static", working_directory_path=str(tmp_path)
    )
    assert Workspace.objects.get(id=workspace.id).working_directory_path == str(tmp_path)


def test_workspace_update_every_setting(workspace):
    workspace_update(
        workspace=workspace,
        title="Renamed",
        description="New instruction",
        auto_delete_done_tasks=False,
        retention_days=0,
        notify_on_error="off",
        notify_on_in_review="on",
    )
    ws = Workspace.objects.get(id=workspace.id)
    assert (ws.title, ws.description, ws.retention_days) == ("Renamed", "New instruction", 0)
    assert not ws.auto_delete_done_tasks
    assert (ws.notify_on_error, ws.notify_on_in_review) == ("off", "on")
    assert OutboxEvent.objects.filter(type="workspace.updated").exists()


@pytest.mark.parametrize("bad", [-1, "7", True])
def test_retention_days_validated(workspace, bad):
    with pytest.raises(ValidationFailed):
        workspace_update(workspace=workspace, retention_days=bad)


def test_workspace_delete_cascades_everything(workspace, agents, task):
    comment_create(task=task, content="hi", actor=USER)
    chat = chat_create(workspace=workspace, agent=agents[0])
    ChatMessage.objects.create(chat=chat, role="user", message="hello")
    ChatQueueItem.objects.create(chat=chat, workspace=workspace)
    workspace_delete(workspace=workspace)
    for model in (Agent, TaskComment, TaskLog, TaskQueueItem, Chat, ChatMessage, ChatQueueItem):
        assert not model.objects.exists(), model


def test_agents_are_appended_in_order(agents):
    assert [a.order for a in agents] == [1, 2, 3]


@pytest.mark.pg
def test_agent_order_after_deleting_the_last(workspace, agents):
    chats_agent_delete(agent=agents[-1])
    assert agent_create(workspace=workspace, name="New", instruction="i").order == 3


@pytest.mark.pg
def test_agent_name_unique_per_workspace(workspace, agents):
    with pytest.raises(Conflict) as err:
        agent_create(workspace=workspace, name="planner", instruction="dup")
    assert "already exists" in err.value.message
    other = workspace_create(title="Other")
    assert agent_create(workspace=other, name="Planner", instruction="ok")


@pytest.mark.pg
def test_agent_rename_to_taken_name_conflicts(agents):
    with pytest.raises(Conflict):
        agent_update(agent=agents[1], name="Planner")
    agent_update(agent=agents[1], name="Builder", cli_type="codex")
    fresh = Agent.objects.get(id=agents[1].id)
    assert (fresh.name, fresh.cli_type) == ("Builder", "codex")


@pytest.mark.parametrize(
    "fields,field",
    [
        ({"name": "", "instruction": "i"}, "name"),
        ({"name": "N", "instruction": " "}, "instruction"),
        ({"name": "N", "instruction": "i", "cli_type": "gpt"}, "cli_type"),
    ],
)
def test_agent_validation(workspace, fields, field):
    with pytest.raises(ValidationFailed) as err:
        agent_create(workspace=workspace, **fields)
    assert err.value.field == field


@pytest.mark.pg
def test_reorder_sets_exact_order(workspace, agents):
    new = [agents[2].id, agents[0].id, agents[1].id]
    result = agent_reorder(workspace=workspace, agent_ids=new)
    assert [a.id for a in result] == new
    assert [a.order for a in result] == [1, 2, 3]


@pytest.mark.parametrize(
    "pick",
    [
        lambda ids: ids[:2],  # missing one
        lambda ids: [*ids, ids[0]],  # duplicate
        lambda ids: [*ids[:2], "x" * 21],  # foreign id
        lambda ids: [],
    ],
)
def test_reorder_rejects_anything_but_the_exact_ids(workspace, agents, pick):
    ids = [a.id for a in agents]
    with pytest.raises(ValidationFailed) as err:
        agent_reorder(workspace=workspace, agent_ids=pick(ids))
    assert err.value.field == "agent_ids"
    assert [a.id for a in Agent.objects.filter(workspace=workspace).in_order()] == ids


def test_reorder_rejects_agents_of_another_workspace(workspace, agents):
    other = workspace_create(title="Other")
    stranger = agent_create(workspace=other, name="S", instruction="i")
    with pytest.raises(ValidationFailed):
        agent_reorder(workspace=workspace, agent_ids=[a.id for a in agents[:2]] + [stranger.id])


def test_deleted_agent_comments_keep_id_and_show_deleted_agent(agents, task):
    comment_create(task=task, content="plan", actor=agent_actor(agents[0]))
    agent_id = agents[0].id
    chats_agent_delete(agent=agents[0])
    assert TaskComment.objects.get(task=task).agent_id == agent_id
    assert comments_for_task(task)[0].author_name == "(Deleted Agent)"


def test_deleted_agent_chats_switch_to_malamar(workspace, agents):
    chat = chat_create(workspace=workspace, agent=agents[0])
    ChatParticipant.objects.filter(chat=chat).update(cli_type="gemini")
    chats_agent_delete(agent=agents[0])
    lead = chat.participants.lead()
    assert lead.agent_id is None and lead.cli_type is None
    note = ChatMessage.objects.get(chat=chat)
    assert (note.role, note.message) == ("system", "Switched from Planner to Malamar")


@pytest.mark.pg
@pytest.mark.django_db(transaction=True)
def test_migration_makes_values_equal_to_the_global_default_inherit():
    from django.db import connection
    from django.utils import timezone

    from tests.migration_history import originals_executor

    before = [("workspaces", "0002_workspace_stall_kill_minutes"), ("core", "0002_api_tokens")]
    executor = originals_executor(connection)
    executor.migrate(before)
    old = executor.loader.project_state(before).apps
    old.get_model("core", "Setting").objects.create(key="notify_on_error", value=False)
    now = timezone.now()
    rows = {  # title: (notify_on_error, notify_on_in_review) as booleans
        "seeded": (False, True),  # what a workspace got from the defaults (error off globally)
        "chose on": (True, True),
        "chose off": (False, False),
    }
    for title, (error, review) in rows.items():
        old.get_model("workspaces", "Workspace").objects.create(
            title=title,
            notify_on_error=error,
            notify_on_in_review=review,
            created_at=now,
            updated_at=now,
            last_activity_at=now,
        )
    executor = originals_executor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
    migrated = {
        ws.title: (ws.notify_on_error, ws.notify_on_in_review) for ws in Workspace.objects.all()
    }
    assert migrated == {
        "seeded": ("inherit", "inherit"),
        "chose on": ("on", "inherit"),
        "chose off": ("inherit", "off"),
    }
