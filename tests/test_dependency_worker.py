"""Chains in a real worker with the fake CLIs: the Malamar agent breaks a request into tasks
that wait for each other in one answer, and the worker runs them in that order."""

import json

import pytest

from tests.live import wait_until

pytestmark = pytest.mark.live


def action(**fields):
    return "@fake action " + json.dumps(fields)


def task_runs(stack) -> int:
    return len([r for r in stack.task_runs() if "malamar_chat_" not in r["input_path"]])


def test_malamar_creates_a_chain_in_one_answer_and_the_worker_follows_it(stack):
    ws = stack.workspace(agents=[("Worker", "claude", "@fake review Finished.")])
    chat = stack.api("POST", f"/workspaces/{ws['id']}/chats", {"agent_id": None}, expect=201)
    message = "\n".join(
        [
            "Build the login feature in steps",
            "@fake reply Three steps, in order.",
            action(type="create_task", ref="plan", summary="Plan the login"),
            action(type="create_task", ref="build", summary="Build it", blocked_by=["plan"]),
            action(type="create_task", summary="Ship it", blocked_by=["build", "plan"]),
            action(type="create_task", ref="bad", summary="", blocked_by=["plan"]),
            action(type="create_task", summary="After bad", blocked_by=["bad"]),
            action(type="create_task", summary="Loose", blocked_by=["no-such-ref"]),
        ]
    )
    stack.api("POST", f"/chats/{chat['id']}/messages", {"message": message}, expect=201)

    def replied():
        d = stack.api("GET", f"/chats/{chat['id']}")
        done = len([m for m in d["messages"] if m["role"] != "user"]) >= 2
        return d if done and not d["is_processing"] else None

    d = wait_until(replied, timeout=30, what="Malamar reply")
    reply, note = d["messages"][-2:]
    assert [a["result"] for a in reply["actions"]] == [
        "ok",
        "ok",
        "ok",
        "failed",
        "failed",
        "failed",
    ]
    assert note["message"].splitlines()[1:] == [
        "Action failed: create_task - 'blocked_by': the task 'bad' could not be created",
        "Action failed: create_task - No task with id no-such-ref",
    ]
    tasks = {t["summary"]: t for t in stack.api("GET", f"/workspaces/{ws['id']}/tasks")["tasks"]}
    assert set(tasks) == {"Plan the login", "Build it", "Ship it"}
    plan, build, ship = tasks["Plan the login"], tasks["Build it"], tasks["Ship it"]
    assert build["blocked_by"] == [plan["id"]]
    assert ship["blocked_by"] == [build["id"], plan["id"]]

    stack.wait_status(plan, "in_review")
    assert [stack.status(build), stack.status(ship)] == ["todo", "todo"]
    assert task_runs(stack) == 1  # only Plan ran
    stack.api("PUT", f"/tasks/{plan['id']}", {"status": "done"}, expect=200)
    stack.wait_status(build, "in_review")
    assert stack.status(ship) == "todo" and task_runs(stack) == 2
    stack.api("PUT", f"/tasks/{build['id']}", {"status": "done"}, expect=200)
    stack.wait_status(ship, "in_review")
    events = [t for (t,) in stack.sql("SELECT type FROM event_outbox WHERE type='task.unblocked'")]
    assert len(events) == 2
