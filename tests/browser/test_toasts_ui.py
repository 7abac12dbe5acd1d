"""Toasts about the item on screen: none for news that the open popup already shows."""

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import new_page
from tests.browser.test_chats_ui import record_toasts

pytestmark = pytest.mark.browser

RUN_TIMEOUT = 30_000


def test_no_commented_toast_for_the_task_open_in_its_popup(browser, stack):
    workspace = stack.workspace("Toasts")
    task = stack.task(workspace, "Do it", summary="Job")
    stack.wait_status(task, "in_review")  # no agents yet
    url = f"{stack.server.url}/workspaces/{workspace['id']}/?tab=tasks"
    viewer, board = new_page(browser), new_page(browser)
    viewer.goto(f"{url}&task={task['id']}")
    board.goto(url)
    for page in (viewer, board):
        expect(page.locator("body")).to_have_attribute("data-live-state", "open")
        record_toasts(page)
    expect(viewer.locator(f"dialog[open] [data-task-detail='{task['id']}']")).to_be_visible()
    # An agent joins and the user's comment sends the task around again: the agent comments,
    # the next pass skips, the task is back in In Review, toasted everywhere.
    stack.api(
        "POST",
        f"/workspaces/{workspace['id']}/agents",
        {"name": "Worker", "cli_type": "claude", "instruction": "Work."},
        expect=201,
    )
    body = {"content": "Again please\n@fake comment-once Done here"}
    stack.api("POST", f"/tasks/{task['id']}/comments", body, expect=201)
    for page in (viewer, board):
        page.wait_for_function(
            "() => window.toastLog.some((t) => t.startsWith('Ready for your review'))",
            timeout=RUN_TIMEOUT,
        )
    expect(viewer.locator("dialog[open] .comment", has_text="Done here")).not_to_have_count(0)
    assert board.evaluate("window.toastLog") == [
        "Worker commented · Job",
        "Ready for your review · Job",
    ]
    assert viewer.evaluate("window.toastLog") == ["Ready for your review · Job"]
    for page in (viewer, board):
        page.console_errors.check()
        page.close()
