"""Live agent activity in a real browser: while the fake CLI is still running, its trace lines
appear in the task popup's Activity tab and on the Kanban card; when the run ends it collapses
into grouped entries."""

import re

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import new_page, release_the_cli

pytestmark = pytest.mark.browser

RUN_TIMEOUT = 30_000


def test_trace_lines_appear_while_the_cli_is_still_running(browser, stack):
    workspace = stack.workspace("Live", agents=["Builder"])
    # The run starts (status line), holds, streams tool activity, then holds again: each hold
    # lasts until the test has seen what it wanted and releases the fake CLI.
    task = stack.task(workspace, "@fake hold 60 work 1 hold 60 review Done", summary="Watch me")
    page = new_page(browser)
    page.goto(f"{stack.server.url}/workspaces/{workspace['id']}/?tab=tasks&task={task['id']}")
    expect(page.locator("body")).to_have_attribute("data-live-state", "open")
    dialog = page.locator("#task-dialog")
    expect(dialog).to_be_visible()
    dialog.get_by_role("tab", name="Activity").click()

    # The running run shows up (open, with its "Now" line) before the tool activity arrives.
    run = dialog.locator("details.run--running")
    expect(run).to_be_visible(timeout=RUN_TIMEOUT)
    expect(run.locator(".run__agent")).to_have_text("Builder")
    expect(run).not_to_contain_text("pytest")  # rendered before the tool activity happened
    release_the_cli(stack, task["id"])

    # Then a trace line is appended live, and the card and "Now" line name the action.
    live_line = run.locator("[data-run-live] .trace--live", has_text="pytest -q")
    expect(live_line.first).to_be_visible(timeout=RUN_TIMEOUT)
    assert stack.status(task) == "in_progress"  # the CLI is still running (it holds)
    runs = stack.api("GET", f"/tasks/{task['id']}/runs")["runs"]
    assert runs[-1]["status"] == "running" and runs[-1]["ended_at"] is None
    # (The edit is the work's last trace: the fake CLI holds after it, so no trace comes later
    # to replace the one this test makes up next; "Reading app/models.py" comes just before.)
    expect(run.locator("[data-run-current]")).to_contain_text("Editing app/models.py")
    card_action = page.locator(f"#task-card-{task['id']} [data-task-current]")
    expect(card_action).to_have_text("Editing app/models.py")

    # A column rendered before the newest trace committed lands after it: the card keeps the
    # newest action this page has seen, not the older one the fragment was rendered with.
    page.evaluate(NEWER_TRACE, [task["id"], runs[-1]["id"]])
    expect(card_action).to_have_text("Newer than the fragment")
    page.evaluate(REFRESH_BOARD, task["id"])
    expect(page.locator(f"#task-card-{task['id']}:not([data-before-refresh])")).to_be_attached()
    expect(card_action).to_have_text("Newer than the fragment")
    release_the_cli(stack, task["id"])

    # When the run ends it is re-rendered grouped and collapsed: a command with its result and
    # an edit, with usage; the task moved to In Review.
    finished = dialog.locator("details.run--completed")
    expect(finished).to_be_visible(timeout=RUN_TIMEOUT)
    expect(finished).not_to_have_attribute("open", re.compile(".*"))
    finished.locator("summary.run__summary").click()
    expect(finished.locator(".trace--command .trace__command")).to_have_text("pytest -q")
    expect(finished.locator(".trace--command .trace__exit")).to_have_text("ok")
    expect(finished.locator(".trace--edit")).to_contain_text("Changed 1 file")
    expect(finished.locator(".run__meta")).to_contain_text("in ·")  # tokens reported
    assert stack.status(task) == "in_review"
    page.console_errors.check()


NEWER_TRACE = """([task, run]) => document.body.dispatchEvent(new CustomEvent("malamar:run.trace", {
  detail: {
    run_id: run, task_id: task, status: "running", current_action: "Newer than the fragment",
  },
}))"""

# Marks the card, then re-renders the board from the server (a new card replaces the marked one).
REFRESH_BOARD = """(task) => {
  document.getElementById(`task-card-${task}`).setAttribute("data-before-refresh", "");
  window.htmx.trigger("#task-board", "live");
}"""


def test_a_silent_run_raises_a_visible_warning(browser, stack):
    stack.api("PUT", "/settings", {"stall_warning_minutes": 0.03}, expect=200)  # ~2 s
    workspace = stack.workspace("Quiet", agents=["Sleeper"])
    task = stack.task(workspace, "@fake sleep 8 comment finally", summary="Silent one")
    page = new_page(browser)
    page.goto(f"{stack.server.url}/workspaces/{workspace['id']}/?tab=tasks")
    expect(page.locator("body")).to_have_attribute("data-live-state", "open")
    warning = page.locator(".toast--warning", has_text="Sleeper has printed nothing")
    expect(warning).to_be_visible(timeout=RUN_TIMEOUT)
    warning.get_by_role("link").click()
    dialog = page.locator("#task-dialog")
    expect(dialog).to_contain_text("Silent one")
    dialog.get_by_role("tab", name="Activity").click()
    expect(dialog.locator(".run__stalled")).to_contain_text("No output for a while")
    assert stack.status(task) == "in_progress"  # a warning only: the run goes on
    page.console_errors.check()
