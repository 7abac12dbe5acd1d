"""The board in a real browser (issue 29): cards moved by drag and drop and by the keyboard
(the card's grip opens a move dialog), a refused move that says why, search and filters that
keep the address, and the searchable "Waits for" picker; on a desktop and a 390 px phone."""

import os
import re

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import drag, new_page
from tests.browser.test_board_ui import PHONE_390, fill_board, no_sideways_scroll
from tests.live import django_script

pytestmark = pytest.mark.browser

SHOTS = os.environ.get("MALAMAR_SCREENSHOTS")


def open_board(page, server, workspace, query: str = "") -> None:
    page.goto(f"{server.url}/workspaces/{workspace['id']}/?tab=tasks{query}")
    expect(page.locator("body")).to_have_attribute("data-live-state", "open")


def card(page, status: str, summary: str):
    return page.locator(f"#col-{status} .task-card-item", has_text=summary)


# What moved the focus, and every swap, in order: said when a focus check fails (it failed once
# in a whole suite's run, not in 20 runs of its own: the next failure says which swap lost it).
FOCUS_LOG = """
window.focusLog = [];
const note = (...what) => window.focusLog.push([Math.round(performance.now()), ...what]);
document.addEventListener("focusin", (e) => note("focus", e.target.id || e.target.tagName), true);
document.addEventListener("focusout", (e) => note("blur", e.target.id || e.target.tagName), true);
document.addEventListener("close", (e) => note("close", e.target.id), true);
document.addEventListener("htmx:beforeSwap", (e) => note("swap", e.detail.target.id,
  (e.detail.pathInfo || {}).requestPath), true);
"""


def expect_focused(page, locator) -> None:
    try:
        expect(locator).to_be_focused()
    except AssertionError as error:
        active = page.evaluate("document.activeElement && document.activeElement.outerHTML")
        log = page.evaluate("window.focusLog.slice(-40)")
        raise AssertionError(f"{error}\nfocused: {active}\nlast focus moves: {log}") from None


def test_cards_move_by_drag_and_drop_and_by_keyboard(browser, server):
    workspace = server.workspace("Shop")
    made = fill_board(server, workspace, todo=["Login page"], in_review=["Cart"], done=["Footer"])
    page = new_page(browser)
    page.add_init_script(FOCUS_LOG)
    open_board(page, server, workspace, "&all=done")  # (Done shown whole)

    # A drop on a column it may go to moves it (the columns it may go to light up meanwhile).
    drag(page, card(page, "in_review", "Cart"), page.locator("#col-done"))
    expect(card(page, "done", "Cart")).to_be_visible()
    expect(page.locator(".toast", has_text="Moved to Done")).to_be_visible()
    expect(page.locator("#col-done[data-show-all]")).to_have_count(1)  # still shown whole
    assert server.api("GET", f"/tasks/{made['in_review'][0]['id']}")["status"] == "done"

    # A drop it may not make: it stays, and the toast says why.
    drag(page, card(page, "todo", "Login page"), page.locator("#col-in_progress"))
    refusal = page.locator(".toast--error", has_text="cannot move a task from Todo")
    expect(refusal).to_contain_text("the agents pick up Todo tasks themselves")
    expect(card(page, "todo", "Login page")).to_be_visible()

    # The keyboard: Tab to the card's grip, Enter opens the moves, the allowed one first.
    grip = card(page, "done", "Footer").locator("[data-card-move]")
    grip.focus()
    page.keyboard.press("Enter")
    dialog = page.locator("#task-move-dialog")
    expect(dialog).to_be_visible()
    expect(dialog.locator("[data-move-summary]")).to_have_text("Footer")
    expect(dialog.locator("[data-move-to=done]")).to_be_hidden()  # where it is
    todo = dialog.locator("[data-move-to=todo]")
    expect(todo).to_be_focused()
    expect(dialog.locator("[data-move-to=in_review]")).to_have_class(re.compile("refused"))
    page.keyboard.press("Enter")
    expect(dialog).to_be_hidden()
    expect(card(page, "todo", "Footer")).to_be_visible()
    expect_focused(page, card(page, "todo", "Footer").locator("[data-card-move]"))  # still on it
    expect(page.locator("#col-done[data-show-all]")).to_have_count(1)  # (the dialog's move too)
    if SHOTS:
        page.screenshot(path=os.path.join(SHOTS, "board-moves.png"))
    page.console_errors.check()
    page.close()


SEARCHABLE = """
from core.actors import USER
from tasks import services
from tasks.models import Task
from tests.failures import fail_task

cart = Task.objects.get(id={cart!r})
services.comment_create(task=cart, content="The coupon box overflows", actor=USER)
Task.objects.filter(id=cart.id).update(status="in_review")  # (a comment sends it back)
fail_task(Task.objects.get(id={login!r}), "exit 1")
"""


def test_search_and_filters_narrow_the_board_and_stay_in_the_address(browser, server):
    workspace = server.workspace("Shop")
    made = fill_board(
        server, workspace, todo=["Login page", "Footer"], in_review=["Cart"], done=["Docs"]
    )
    login = made["todo"][0]
    django_script(
        server.data_dir, SEARCHABLE.format(cart=made["in_review"][0]["id"], login=login["id"])
    )
    page = new_page(browser, viewport=PHONE_390, has_touch=True, is_mobile=True)
    open_board(page, server, workspace)
    expect(page.locator("#task-board .task-card-item")).to_have_count(4)
    no_sideways_scroll(page, "board with its filters")

    page.get_by_label("Search tasks").fill("coupon")  # a comment's words
    expect(page.locator("#task-board .task-card-item")).to_have_count(1)
    expect(card(page, "in_review", "Cart")).to_be_attached()
    expect(page).to_have_url(re.compile(r"[?&]q=coupon"))
    page.get_by_label("Search tasks").fill("")
    expect(page.locator("#task-board .task-card-item")).to_have_count(4)

    if SHOTS:
        page.screenshot(path=os.path.join(SHOTS, "board-phone.png"))
    page.get_by_label("Failing").check()
    expect(page.locator("#task-board .task-card-item")).to_have_count(1)
    expect(card(page, "todo", "Login page")).to_be_attached()
    expect(page.locator("#col-todo .kanban-col__count")).to_have_text("1")
    expect(page).to_have_url(re.compile(r"[?&]failing=1"))
    page.reload()  # the address keeps the filter
    expect(page.get_by_label("Failing")).to_be_checked()
    expect(page.locator("#task-board .task-card-item")).to_have_count(1)

    page.get_by_label("Search tasks").fill("kubernetes")
    expect(page.locator("#tasks-no-match")).to_contain_text("No task matches")
    no_sideways_scroll(page, "a search that matches nothing")

    # A phone moves a card with the grip (touch screens always show it).
    page.get_by_role("link", name="Clear search and filters").click()
    grip = card(page, "in_review", "Cart").locator("[data-card-move]")
    expect(grip).to_be_visible()
    grip.tap()
    page.locator("#task-move-dialog [data-move-to=todo]").tap()
    expect(card(page, "todo", "Cart")).to_be_visible()
    page.console_errors.check()
    page.close()


def test_waits_for_is_a_searchable_picker(browser, server):
    workspace = server.workspace("Shop")
    fill_board(server, workspace, todo=["Design the schema", "Write the API", "Docs"])
    page = new_page(browser)
    open_board(page, server, workspace)
    page.locator("#new-task").click()
    dialog = page.locator("#task-create-dialog")
    dialog.get_by_label("Summary").fill("Ship it")
    picker = dialog.locator("[data-picker]")
    expect(picker.get_by_role("checkbox")).to_have_count(3)
    search = picker.get_by_role("searchbox")
    search.fill("schema")
    expect(picker.locator("[data-picker-option]:visible")).to_have_count(1)
    search.press("Enter")  # does not send the form
    expect(dialog).to_be_visible()
    picker.get_by_role("checkbox", name="Design the schema").check()
    expect(picker.locator("[data-picker-count]")).to_have_text("1 chosen")
    search.fill("api")  # a chosen task stays in view
    expect(picker.locator("[data-picker-option]:visible")).to_have_count(2)
    picker.get_by_role("checkbox", name="Write the API").check()
    search.fill("nothing like it")
    expect(picker.locator("[data-picker-empty]")).to_be_hidden()  # the chosen ones show
    dialog.get_by_role("button", name="Create task").click()
    expect(dialog).to_be_hidden()
    waiting = card(page, "todo", "Ship it")
    expect(waiting.locator(".task-card__blocker")).to_have_count(2)

    # The popup's editor: the chosen ones come first, checked; unchecking one saves.
    waiting.locator(".task-card").click()
    popup = page.locator("#task-dialog")
    popup.get_by_text("Change what it waits for").click()
    boxes = popup.locator("[data-picker] [data-picker-choice]")
    expect(boxes.nth(0)).to_be_checked()
    expect(boxes.nth(1)).to_be_checked()
    expect(boxes.nth(2)).not_to_be_checked()
    popup.locator("[data-picker]").get_by_role("checkbox", name="Write the API").uncheck()
    popup.get_by_role("button", name="Save").click()
    expect(page.locator(".toast", has_text="Saved what the task waits for")).to_be_visible()
    expect(popup.locator("#task-blockers")).to_contain_text("Design the schema")
    expect(popup.locator("#task-blockers")).not_to_contain_text("Write the API")
    page.console_errors.check()
    page.close()
