"""Group chat: several participants answer in parallel; messages can be left out of context."""

from pathlib import Path

import pytest

from agents.services import agent_create
from chats import selectors
from chats.models import ChatMessage, ChatQueueItem
from chats.services import (
    chat_create,
    chat_message_send,
    chat_message_set_included,
    chat_participant_add,
    chat_participant_remove,
    chat_participant_update,
    chats_agent_delete,
)
from core.errors import Conflict, ValidationFailed
from tests.conftest import error_of
from tests.live import wait_until
from tests.stack import alive


@pytest.fixture
def group(workspace, agents):
    chat = chat_create(workspace=workspace, agent=agents[0])
    chat_participant_add(chat=chat, agent_id=agents[1].id)
    chat_participant_add(chat=chat, agent_id=None)  # Malamar
    return chat


def test_participants_join_in_order_with_a_note(group, agents):
    names = [(p.agent.name if p.agent else "Malamar") for p in group.participants.in_order()]
    assert names == ["Planner", "Implementer", "Malamar"]
    notes = list(
        ChatMessage.objects.filter(chat=group, role="system").values_list("message", flat=True)
    )
    assert notes == ["Implementer joined the chat", "Malamar joined the chat"]


@pytest.mark.pg
def test_a_participant_joins_once(group, agents):
    with pytest.raises(Conflict):
        chat_participant_add(chat=group, agent_id=agents[1].id)
    with pytest.raises(Conflict):
        chat_participant_add(chat=group, agent_id=None)


def test_agents_from_other_workspaces_cannot_join(group):
    from workspaces.services import workspace_create

    stranger = agent_create(workspace=workspace_create(title="Other"), name="S", instruction="i")
    with pytest.raises(ValidationFailed):
        chat_participant_add(chat=group, agent_id=stranger.id)


def test_one_message_queues_one_run_per_enabled_participant(group):
    planner = group.participants.get(position=0)
    chat_participant_update(participant=planner, enabled=False)
    chat_message_send(chat=group, message="hello team")
    queued = ChatQueueItem.objects.filter(chat=group).select_related("participant__agent")
    assert sorted(
        (q.participant.agent.name if q.participant.agent else "Malamar") for q in queued
    ) == ["Implementer", "Malamar"]


def test_solo_mode_stores_the_message_and_runs_nothing(group):
    for participant in group.participants.all():
        chat_participant_update(participant=participant, enabled=False)
    chat_message_send(chat=group, message="note to self")
    chat_message_send(chat=group, message="another")  # nothing pending: no 409
    assert ChatQueueItem.objects.filter(chat=group).count() == 0
    assert ChatMessage.objects.filter(chat=group, role="user").count() == 2


def test_a_chat_keeps_at_least_one_participant(workspace, agents):
    chat = chat_create(workspace=workspace, agent=agents[0])
    with pytest.raises(Conflict):
        chat_participant_remove(participant=chat.participants.get())


def test_removing_the_first_participant_promotes_the_next(group):
    chat_participant_remove(participant=group.participants.get(position=0))
    assert group.participants.lead().agent.name == "Implementer"
    assert selectors.chat_summary(group.id).agent_name == "Implementer"
    assert (
        ChatMessage.objects.filter(chat=group).order_by("created_at").last().message
        == "Planner left the chat"
    )


def test_deleting_an_agent_removes_its_participant(group, agents):
    chats_agent_delete(agent=agents[1])
    assert group.participants.count() == 2
    assert (
        ChatMessage.objects.filter(chat=group).order_by("created_at").last().message
        == "Implementer left the chat"
    )


def test_include_flags(group):
    message = chat_message_send(chat=group, message="secret")
    chat_message_set_included(message=message, included=False)
    assert ChatMessage.objects.get(id=message.id).included is False
    system = ChatMessage.objects.filter(chat=group, role="system").first()
    with pytest.raises(ValidationFailed):
        chat_message_set_included(message=system, included=False)


def test_group_api(api, workspace, agents):
    chat = api.post(f"/api/workspaces/{workspace.id}/chats", {"agent_id": agents[0].id}).json()
    added = api.post(f"/api/chats/{chat['id']}/participants", {"agent_id": agents[2].id})
    assert added.status_code == 201
    participants = added.json()["participants"]
    assert [p["agent_name"] for p in participants] == ["Planner", "Reviewer"]
    assert participants[1]["effective_cli_type"] == "claude"
    dup = api.post(f"/api/chats/{chat['id']}/participants", {"agent_id": agents[2].id})
    assert dup.status_code == 409 and error_of(dup)["code"] == "CONFLICT"
    toggled = api.put(
        f"/api/chats/{chat['id']}/participants/{participants[1]['id']}",
        {"enabled": False, "cli_type": "gemini"},
    )
    assert toggled.json()["participants"][1]["enabled"] is False
    assert toggled.json()["participants"][1]["effective_cli_type"] == "gemini"
    sent = api.post(f"/api/chats/{chat['id']}/messages", {"message": "hi"}).json()
    assert sent["included"] is True
    excluded = api.put(f"/api/chats/{chat['id']}/messages/{sent['id']}", {"included": False})
    assert excluded.json()["included"] is False
    removed = api.delete(f"/api/chats/{chat['id']}/participants/{participants[1]['id']}")
    assert [p["agent_name"] for p in removed.json()["participants"]] == ["Planner"]
    assert api.delete(f"/api/chats/{chat['id']}/participants/nope").status_code == 404


# Live: a real worker and the fake CLIs ----------------------------------------------------


def live_group(stack, *names_and_clis):
    ws = stack.workspace(agents=list(names_and_clis))
    agents = stack.api("GET", f"/workspaces/{ws['id']}/agents")["agents"]
    chat = stack.api(
        "POST", f"/workspaces/{ws['id']}/chats", {"agent_id": agents[0]["id"]}, expect=201
    )
    for agent in agents[1:]:
        stack.api(
            "POST", f"/chats/{chat['id']}/participants", {"agent_id": agent["id"]}, expect=201
        )
    return chat


def replies(stack, chat) -> list[dict]:
    detail = stack.api("GET", f"/chats/{chat['id']}")
    return [m for m in detail["messages"] if m["role"] == "agent"]


def idle(stack, chat) -> bool:
    return not stack.api("GET", f"/chats/{chat['id']}")["is_processing"]


def chat_runs(stack):
    return [r for r in stack.fake_runs() if "malamar_chat_" in (r.get("input_path") or "")]


@pytest.mark.pg
def test_three_participants_answer_one_message_concurrently(stack):
    chat = live_group(stack, ("Ann", "claude"), ("Bob", "gemini"), ("Cy", "codex"))
    stack.api(
        "POST",
        f"/chats/{chat['id']}/messages",
        {"message": "thoughts?\n@fake sleep 1.5 reply my view"},
        expect=201,
    )
    wait_until(
        lambda: len(replies(stack, chat)) == 3 and idle(stack, chat),
        timeout=40,
        what="three answers",
    )
    assert sorted(m["agent_name"] for m in replies(stack, chat)) == ["Ann", "Bob", "Cy"]
    spans = stack.sql("SELECT started_at, ended_at FROM agent_runs")
    assert len(spans) == len(chat_runs(stack)) == 3
    # Each CLI sleeps 1.5 s: all three ran at once when the last started before any ended.
    assert max(start for start, _ in spans) < min(end for _, end in spans), "no overlap"
    assert len({r["input_path"] for r in chat_runs(stack)}) == 3, "one input file per run"


def test_disabled_participant_is_left_out_and_exclusion_reaches_the_input_file(stack):
    chat = live_group(stack, ("Ann", "claude"), ("Bob", "opencode"))
    detail = stack.api("GET", f"/chats/{chat['id']}")
    bob = detail["participants"][1]
    stack.api("PUT", f"/chats/{chat['id']}/participants/{bob['id']}", {"enabled": False})
    first = stack.api(
        "POST",
        f"/chats/{chat['id']}/messages",
        {"message": "SECRET-ONE\n@fake reply ok"},
        expect=201,
    )
    wait_until(
        lambda: len(replies(stack, chat)) == 1 and idle(stack, chat), timeout=30, what="one answer"
    )
    assert [r["cli"] for r in chat_runs(stack)] == ["claude"]
    stack.api("PUT", f"/chats/{chat['id']}/messages/{first['id']}", {"included": False})
    stack.api(
        "POST", f"/chats/{chat['id']}/messages", {"message": "two\n@fake reply ok"}, expect=201
    )
    wait_until(
        lambda: len(replies(stack, chat)) == 2 and idle(stack, chat),
        timeout=30,
        what="second answer",
    )
    assert "SECRET-ONE" not in Path(chat_runs(stack)[-1]["input_path"]).read_text()
    stack.api("PUT", f"/chats/{chat['id']}/messages/{first['id']}", {"included": True})
    stack.api(
        "POST", f"/chats/{chat['id']}/messages", {"message": "three\n@fake reply ok"}, expect=201
    )
    wait_until(
        lambda: len(replies(stack, chat)) == 3 and idle(stack, chat),
        timeout=30,
        what="third answer",
    )
    assert "SECRET-ONE" in Path(chat_runs(stack)[-1]["input_path"]).read_text()


@pytest.mark.pg
def test_stop_cancels_every_run_of_the_group(stack):
    chat = live_group(stack, ("Ann", "claude"), ("Bob", "gemini"))
    stack.api(
        "POST",
        f"/chats/{chat['id']}/messages",
        {"message": "@fake sleep 60 reply never"},
        expect=201,
    )
    wait_until(lambda: len(chat_runs(stack)) == 2, timeout=20, what="two runs")
    pids = [r["pid"] for r in chat_runs(stack)]
    stack.api("POST", f"/chats/{chat['id']}/cancel", expect=200)
    wait_until(lambda: not any(alive(pid) for pid in pids), timeout=30, what="both runs killed")
    wait_until(lambda: idle(stack, chat), timeout=10, what="idle chat")
    assert replies(stack, chat) == []
