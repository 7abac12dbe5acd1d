"""A chain of two tasks built in the browser: the second waits (chip, chain highlight) and
starts on its own once the first is Done, against a real server and worker (fake CLIs)."""

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import new_page

pytestmark = pytest.mark.browser

RUN_TIMEOUT = 30_000  # a fake CLI run plus the worker's pick-up


def card(page, status, summary):
    return page.locator(f"#col-{status} .task-card", has_text=summary)


def create(page, summary, description, waits_for=None):
    page.locator("#new-task").click()
    dialog = page.locator("#task-create-dialog")
    expect(dialog).to_be_visible()
    dialog.get_by_label("Summary").fill(summary)
    dialog.get_by_label("Description").fill(description)
    if waits_for:
        picker = dialog.locator("[data-picker]")
        picker.get_by_role("searchbox").fill(waits_for)
        picker.get_by_role("checkbox", name=waits_for).check()
    dialog.get_by_role("button", name="Create task").click()
    expect(dialog).to_be_hidden()


def test_a_two_task_chain_runs_the_second_when_the_first_is_done(browser, stack):
    workspace = stack.workspace("Chain", agents=["Worker"])
    page = new_page(browser)
    page.goto(f"{stack.server.url}/workspaces/{workspace['id']}/?tab=tasks")
    expect(page.locator("body")).to_have_attribute("data-live-state", "open")

    create(page, "Step one", "@fake review First step done")
    expect(card(page, "in_review", "Step one")).to_be_visible(timeout=RUN_TIMEOUT)
    create(page, "Step two", "@fake review Second step done", waits_for="Step one")

    # It waits in Todo with a chip linking its blocker, and is not picked up.
    waiting = page.locator("#col-todo .task-card-item", has_text="Step two")
    expect(waiting.locator(".task-card__waiting")).to_contain_text("Waiting for")
    expect(waiting.locator(".task-card__blocker")).to_have_text("Step one")
    # Hovering it lights up its chain (both cards).
    waiting.locator(".task-card").hover()
    expect(page.locator(".task-card-item.is-chain")).to_have_count(2)
    page.mouse.move(0, 0)
    expect(page.locator(".task-card-item.is-chain")).to_have_count(0)

    # The chip opens the blocker; moving it to Done releases the second step.
    waiting.locator(".task-card__blocker").click()
    dialog = page.locator("#task-dialog")
    expect(dialog.locator("#task-dialog-title")).to_have_text("Step one")
    expect(dialog.locator("#task-dependents")).to_contain_text("Step two")
    dialog.locator("#task-move-done").click()
    expect(page.locator(".toast", has_text="No longer waiting")).to_be_visible()
    dialog.locator("[data-dialog-close]").first.click()
    expect(card(page, "in_review", "Step two")).to_be_visible(timeout=RUN_TIMEOUT)
    expect(card(page, "done", "Step one")).to_be_visible()
    page.console_errors.check()
