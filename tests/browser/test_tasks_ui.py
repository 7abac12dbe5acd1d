"""The Tasks tab in a real browser, against a real server and worker running the fake CLIs:
create, watch cards move live, the task popup (comments, actions, tabs), a second tab, toasts
and a phone-width pass."""

import re

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import PHONE, new_page, release_the_cli

pytestmark = pytest.mark.browser

RUN_TIMEOUT = 30_000  # a fake CLI run plus the worker's pick-up


def board(page, stack, workspace, query=""):
    page.goto(f"{stack.server.url}/workspaces/{workspace['id']}/?tab=tasks{query}")
    expect(page.locator("body")).to_have_attribute("data-live-state", "open")


def card(page, status, summary):
    return page.locator(f"#col-{status} .task-card", has_text=summary)


def popup(page):
    return page.locator("#task-dialog")


def test_create_watch_it_run_comment_and_restart(browser, stack):
    workspace = stack.workspace("Shop", agents=["Planner", "Reviewer"])
    page = new_page(browser)
    board(page, stack, workspace)
    expect(page.get_by_text("No tasks yet")).to_be_visible()

    # Create through the dialog; the summary is required.
    page.get_by_role("button", name="Create Task").click()
    dialog = page.locator("#task-create-dialog")
    expect(dialog).to_be_visible()
    expect(dialog.get_by_label("Summary")).to_be_focused()
    dialog.get_by_role("button", name="Create task").click()
    expect(dialog.locator("#task_new_summary_error")).to_contain_text("Summary is required")
    dialog.get_by_label("Summary").fill("Add a cart")
    dialog.get_by_label("Description").fill(
        "Let people buy things.\n\n"
        "@fake Planner: work 1 hold 60 comment-once Plan: **three** steps\n"
        "@fake Reviewer: review Looks good"
    )
    dialog.get_by_role("button", name="Create task").click()
    expect(dialog).to_be_hidden()
    expect(page.locator(".toast").first).to_contain_text("Task created")

    # The card crosses the board live: In Progress (with the agent at work), then In Review.
    working = card(page, "in_progress", "Add a cart")
    expect(working).to_be_visible(timeout=RUN_TIMEOUT)
    expect(working).to_have_class(re.compile(r"\bis-working\b"))
    expect(working.locator(".task-card__agent")).to_have_text("Planner")
    # (The Planner holds until the test has seen it at work.)
    [(created,)] = stack.sql("SELECT id FROM tasks")
    release_the_cli(stack, created)
    reviewed = card(page, "in_review", "Add a cart")
    expect(reviewed).to_be_visible(timeout=RUN_TIMEOUT)
    expect(reviewed).not_to_have_class(re.compile(r"\bis-working\b"))
    expect(reviewed.locator(".badge--count")).to_contain_text("2")
    expect(page.locator("#col-in_progress .task-card")).to_have_count(0)

    # Open it: the URL names it, the agents' comments are there (markdown rendered).
    reviewed.click()
    dialog = popup(page)
    expect(dialog).to_be_visible()
    task_id = dialog.locator("[data-task-detail]").get_attribute("data-task-detail")
    expect(page).to_have_url(re.compile(rf"[?&]task={task_id}"))
    expect(dialog.locator("#task-dialog-title")).to_have_text("Add a cart")
    expect(dialog.locator("#task-status")).to_have_text("In Review")
    comments = dialog.locator("#task-comments .comment")
    expect(comments).to_have_count(2)
    expect(comments.nth(0).locator(".comment__author")).to_have_text("Planner")
    expect(comments.nth(0).locator("strong")).to_have_text("three")
    expect(comments.nth(1)).to_contain_text("Looks good")
    expect(dialog.locator(".task-description__body")).to_contain_text("Let people buy things.")

    # Reload keeps the popup open.
    page.reload()
    expect(popup(page)).to_be_visible()
    expect(popup(page).locator("#task-dialog-title")).to_have_text("Add a cart")
    expect(page.locator("body")).to_have_attribute("data-live-state", "open")

    # A comment shows at once and sends the task back through the agents (Request changes).
    dialog = popup(page)
    box = dialog.get_by_label("Add a comment")
    box.fill("Please also add a *checkout* page")
    dialog.get_by_role("button", name="Request changes").click()
    mine = dialog.locator("#task-comments .comment--user")
    expect(mine).to_have_count(1)
    expect(box).to_have_value("")
    expect(mine.locator("em")).to_have_text("checkout")  # confirmed: rendered by the server
    expect(dialog.locator(".comment--working")).to_contain_text(
        "Planner is working…", timeout=RUN_TIMEOUT
    )
    expect(card(page, "in_progress", "Add a cart")).to_be_visible()  # (while the Planner holds)
    release_the_cli(stack, task_id)
    expect(dialog.locator("#task-comments .comment", has_text="Looks good")).to_have_count(
        2, timeout=RUN_TIMEOUT
    )
    expect(dialog.locator("#task-status")).to_have_text("In Review")
    expect(dialog.locator(".comment--working")).to_have_count(0)

    # Activity: the log in words and the agents' runs.
    dialog.get_by_role("tab", name="Activity").click()
    log = dialog.locator("#task-log")
    expect(log).to_contain_text("User created the task")
    expect(log).to_contain_text("Reviewer finished: in review")
    expect(log).to_contain_text("User requested changes")
    expect(dialog.locator("[data-composer]")).to_be_hidden()
    dialog.get_by_role("tab", name="Comments").click()
    expect(dialog.locator("[data-composer]")).to_be_visible()

    # Inline edit of the summary and the description.
    dialog.locator("#task-dialog-title").hover()
    dialog.get_by_role("button", name="Edit summary").click()
    summary = dialog.get_by_role("textbox", name="Summary")  # not the "Edit summary" button
    expect(summary).to_be_focused()
    summary.fill("Add a shopping cart")
    dialog.get_by_role("button", name="Save").click()
    expect(dialog.locator("#task-dialog-title")).to_have_text("Add a shopping cart")
    expect(card(page, "in_review", "Add a shopping cart")).to_be_visible()
    dialog.locator("#task-description-edit").click()
    dialog.locator("#task_description_description").fill("Now with **coupons**")
    dialog.locator("#task_description_description").press("Escape")  # cancels, keeps popup
    expect(dialog).to_be_visible()
    expect(dialog.locator(".task-description__body")).to_contain_text("Let people buy things.")
    dialog.locator("#task-description-edit").click()
    dialog.locator("#task_description_description").fill("Now with **coupons**")
    dialog.get_by_role("button", name="Save").click()
    expect(dialog.locator(".task-description__body strong")).to_have_text("coupons")

    # Closing forgets the task in the URL.
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    expect(page).not_to_have_url(re.compile(r"task="))
    page.console_errors.check()
    page.close()


def test_cancel_prioritize_and_a_second_tab(browser, stack):
    workspace = stack.workspace("Ops", agents=["Worker"])
    task = stack.task(workspace, "@fake work 1 sleep 60", summary="Long job")
    first, second = new_page(browser), new_page(browser)
    board(first, stack, workspace)
    board(second, stack, workspace)
    second.evaluate("window.notReloaded = true")
    for page in (first, second):
        busy = card(page, "in_progress", "Long job")
        expect(busy).to_be_visible(timeout=RUN_TIMEOUT)
        expect(busy.locator(".task-card__agent")).to_have_text("Worker")

    first.locator(f"#task-card-{task['id']} a").click()
    dialog = popup(first)
    expect(dialog.locator(".comment--working")).to_contain_text("Worker is working…")
    expect(dialog.locator(f'.comment--working [data-task-current="{task["id"]}"]')).to_have_count(1)

    # Prioritize toggles, and the other tab's card follows without a reload.
    dialog.get_by_role("button", name="Prioritize").click()
    expect(dialog.locator("#task-prioritize")).to_have_text("Remove Priority")
    expect(dialog.locator(".task-head__badges")).to_contain_text("Priority")
    expect(card(second, "in_progress", "Long job").locator(".badge--priority")).to_be_visible()
    dialog.get_by_role("button", name="Remove Priority").click()
    expect(dialog.locator("#task-prioritize")).to_have_text("Prioritize")
    expect(card(second, "in_progress", "Long job").locator(".badge--priority")).to_have_count(0)

    # A comment the server did not take stays in the list, marked, and its text is kept.
    first.route("**/comments/new/", lambda route: route.fulfill(status=500, body="boom"))
    box = dialog.get_by_label("Add a comment")
    box.fill("Are you done?")
    box.press("Control+Enter")
    failed = dialog.locator("#task-comments .comment.is-failed")
    expect(failed).to_contain_text("Not sent")
    expect(failed).to_contain_text("Are you done?")
    expect(box).to_have_value("Are you done?")
    # It stays over the list's next live refresh (a change of the task refreshes the comments).
    refreshed = lambda r: r.request.headers.get("hx-target") == "task-comments"  # noqa: E731
    with first.expect_response(refreshed):
        dialog.get_by_role("button", name="Prioritize").click()
    expect(dialog.locator("#task-prioritize")).to_have_text("Remove Priority")
    expect(failed).to_contain_text("Are you done?")
    first.unroute("**/comments/new/")
    # The browser and htmx log that 500; nothing else may have gone wrong.
    first.console_errors[:] = [
        e for e in first.console_errors if "status of 500" not in e and "Code 500 from" not in e
    ]
    box.fill("")

    # Cancel asks first, then stops the agent: the task waits in In Review.
    dialog.get_by_role("button", name="Cancel").click()
    confirm = first.locator("#confirm-dialog")
    expect(confirm).to_contain_text("Cancel this task?")
    confirm.get_by_role("button", name="Cancel task").click()
    expect(dialog.locator("#task-status")).to_have_text("In Review")
    expect(dialog.locator(".comment--system")).to_contain_text("Task cancelled by user")
    expect(dialog.locator(".comment--working")).to_have_count(0)
    expect(card(second, "in_review", "Long job")).to_be_visible()
    expect(card(second, "in_review", "Long job")).not_to_have_class(re.compile(r"is-working"))
    assert stack.status(task) == "in_review"

    # Move to Done (waits for the server), then delete all done tasks from the board.
    dialog.get_by_role("button", name="Move to Done").click()
    expect(dialog.locator("#task-status")).to_have_text("Done")
    expect(card(first, "done", "Long job")).to_be_visible()
    expect(card(second, "done", "Long job")).to_be_visible()
    first.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    first.get_by_role("button", name="Delete all done tasks").click()
    delete = first.locator("#task-delete-done-dialog")
    expect(delete.locator("form:invalid")).to_have_count(1)
    delete.get_by_label("Type Ops to confirm").fill("Ops")
    expect(delete.locator("form:invalid")).to_have_count(0)
    delete.get_by_role("button", name="Delete done tasks").click()
    expect(delete).to_be_hidden()
    expect(first.locator(".toast").last).to_contain_text("Deleted 1 done task")
    for page in (first, second):
        expect(page.get_by_text("No tasks yet")).to_be_visible()
    assert second.evaluate("window.notReloaded") is True
    for page in (first, second):
        page.console_errors.check()
        page.close()


def test_a_late_swap_leaves_the_focus_in_the_comment_box(browser, stack):
    # Seen in CI under load: the Prioritize answer (or a live refresh of the popup's head) landed
    # while the user was in the comment box; htmx focused the head's [autofocus] title, and the
    # Ctrl+Enter that followed went to the title: nothing sent, no "Sending…" comment.
    workspace = stack.workspace("Late", agents=["Worker"])
    task = stack.task(workspace, "@fake work 1 sleep 60", summary="Slow answers")
    page = new_page(browser)
    board(page, stack, workspace, f"&task={task['id']}")
    dialog = popup(page)
    expect(dialog.locator("#task-dialog-title")).to_have_text("Slow answers")
    expect(dialog.locator(".comment--working")).to_be_visible(timeout=RUN_TIMEOUT)
    box = dialog.get_by_label("Add a comment")

    # The user types in the comment box; Prioritize is pressed without taking the focus from it
    # (a click from the page's script), so its answer lands while the user is in the box.
    box.fill("Are you done?")
    page.evaluate("document.getElementById('task-prioritize').click()")
    expect(dialog.locator(".task-head__badges")).to_contain_text("Priority")  # swapped in
    expect(box).to_be_focused()

    # A live refresh of the head (another tab, the worker) lands while the user types.
    page.evaluate("document.getElementById('task-head').append(document.createElement('hr'))")
    page.evaluate("window.htmx.trigger('#task-head', 'live')")
    expect(dialog.locator("#task-head > hr")).to_have_count(0)  # swapped in
    expect(box).to_be_focused()

    # The user never clicked elsewhere: Ctrl+Enter (no re-focusing, unlike box.press) sends.
    # Live refreshes of the popup wait while it is on its way (live.js): the comment's own
    # answer renders the list, once, without the "Sending…" stand-in next to it.
    page.keyboard.press("Control+Enter")
    sent = dialog.locator("#task-comments .comment--user[data-comment-id]")
    expect(sent).to_contain_text("Are you done?")
    expect(dialog.locator("#task-comments .comment--user")).to_have_count(1)
    expect(box).to_have_value("")
    page.console_errors.check()
    page.close()


def test_toast_link_opens_the_popup_and_phone_layout(browser, stack):
    workspace = stack.workspace("Toasty", agents=["Reviewer"])
    page = new_page(browser)
    board(page, stack, workspace)
    page.evaluate("window.notReloaded = true")
    task = stack.task(workspace, "@fake review Ready for you", summary="Check me")

    # The agent's review raises a toast; its link opens the popup in place.
    toast = page.locator(".toast", has_text="Ready for your review")
    expect(toast).to_be_visible(timeout=RUN_TIMEOUT)
    toast.get_by_role("link").click()
    dialog = popup(page)
    expect(dialog).to_be_visible()
    expect(dialog.locator("#task-dialog-title")).to_have_text("Check me")
    expect(page).to_have_url(re.compile(rf"task={task['id']}"))
    assert page.evaluate("window.notReloaded") is True
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    page.console_errors.check()
    page.close()

    # Phone: the popup linked by URL fills the screen and its actions are reachable.
    phone = new_page(browser, viewport=PHONE)
    board(phone, stack, workspace, f"&task={task['id']}")
    dialog = popup(phone)
    expect(dialog).to_be_visible()
    # Measure once its opening animation (a slight slide and scale) is over.
    dialog.evaluate("(el) => Promise.all(el.getAnimations().map((a) => a.finished))")
    box = dialog.bounding_box()
    assert box["x"] == 0 and box["y"] == 0
    assert box["width"] == PHONE["width"] and box["height"] == PHONE["height"]
    # One line of status and the primary action; the rest in the menu.
    expect(dialog.get_by_role("button", name="Move to Done", exact=True)).to_be_in_viewport()
    dialog.get_by_role("button", name="More actions").click()
    for name in ("Move to Todo", "Delete"):
        button = dialog.get_by_role("button", name=name, exact=True)
        expect(button).to_be_visible()
        expect(button).to_be_in_viewport()
    phone.keyboard.press("Escape")  # (closes the menu, not the popup)
    expect(dialog).to_be_visible()
    expect(dialog.get_by_role("button", name="Approve")).to_be_in_viewport()
    dialog.get_by_role("tab", name="Activity").click()
    expect(dialog.locator("#task-log")).to_contain_text("Reviewer finished: in review")
    dialog.get_by_role("tab", name="Comments").click()

    dialog.get_by_role("button", name="More actions").click()
    dialog.get_by_role("button", name="Delete", exact=True).click()
    phone.locator("#confirm-dialog").get_by_role("button", name="Delete").click()
    expect(dialog).to_be_hidden()
    expect(phone.locator(".toast").last).to_contain_text("Task deleted")
    expect(phone.get_by_text("No tasks yet")).to_be_visible()
    expect(phone).not_to_have_url(re.compile(r"task="))
    # No sideways scroll on the phone page.
    assert phone.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    phone.console_errors.check()
    phone.close()


def test_a_toast_over_an_open_popup_can_be_clicked(browser, stack):
    # A modal dialog makes the rest of the page inert; toasts must still work above it.
    workspace = stack.workspace("Toasts")
    first = stack.task(workspace, "first", summary="First task")
    second = stack.task(workspace, "second", summary="Second task")
    page = new_page(browser)
    board(page, stack, workspace, f"&task={first['id']}")
    expect(popup(page)).to_contain_text("First task")
    link = f"/workspaces/{workspace['id']}/?tab=tasks&task={second['id']}"
    page.evaluate("href => window.malamarToast({level: 'info', message: 'Look here', href})", link)
    page.locator(".toast", has_text="Look here").get_by_role("link").click()
    expect(popup(page).locator("#task-dialog-title")).to_have_text("Second task")
    page.console_errors.check()


def test_a_toast_about_a_task_not_on_the_board_opens_its_popup_in_place(browser, stack):
    # Its card is not on the page (filtered out here; or the refresh that brings a new task's
    # card is still on its way when an agent's news about it arrives): no page load either.
    workspace = stack.workspace("Filtered")
    stack.task(workspace, "shown", summary="Shown task")
    hidden = stack.task(workspace, "hidden", summary="Hidden task")
    page = new_page(browser)
    board(page, stack, workspace, "&q=Shown")
    expect(page.locator(".task-card", has_text="Shown task")).to_be_visible()
    expect(page.locator(f"#task-link-{hidden['id']}")).to_have_count(0)
    page.evaluate("window.notReloaded = true")
    link = f"/workspaces/{workspace['id']}/?tab=tasks&task={hidden['id']}"
    page.evaluate("href => window.malamarToast({level: 'info', message: 'About it', href})", link)
    page.locator(".toast", has_text="About it").get_by_role("link").click()
    expect(popup(page).locator("#task-dialog-title")).to_have_text("Hidden task")
    expect(page).to_have_url(re.compile(rf"task={hidden['id']}"))
    assert page.evaluate("window.notReloaded") is True
    expect(page.locator("#board-search")).to_have_value("Shown")  # the board as it was
    page.console_errors.check()


def test_a_failing_task_shows_its_error_collapses_repeats_and_stops_retrying(browser, stack):
    workspace = stack.workspace("Broken", agents=["Planner"])
    task = stack.task(workspace, "@fake exit 1 Upstream error 500", summary="Flaky provider")
    page = new_page(browser)
    board(page, stack, workspace)

    # The card says it is failing, why, and when it tries again; the retry 5 s later shows live.
    error = page.locator(f"#task-card-{task['id']} .task-card__error")
    expect(error.locator(".badge")).to_have_text("Failed 1 time", timeout=RUN_TIMEOUT)
    expect(error.locator(".task-card__error-text")).to_have_text(
        "Upstream error 500 (CLI exited with code 1)"
    )
    expect(error.locator(".task-card__retry")).to_have_text(
        re.compile(r"^\s*Next retry at \d\d?:\d\d:\d\d")
    )
    expect(error.locator(".badge")).to_have_text("Failed 2 times", timeout=RUN_TIMEOUT)

    # The popup: the same error twice is one comment with its count.
    page.locator(f"#task-card-{task['id']} a").click()
    dialog = popup(page)
    errors = dialog.locator("#task-comments .comment--error")
    expect(errors).to_have_count(1)
    # (Two or more: on a loaded machine the retries 10 and 20 s later may come meanwhile.)
    expect(errors.locator(".comment__repeat")).to_contain_text(re.compile(r"\d+ times, last at"))
    expect(dialog.locator("#task-error")).to_contain_text(re.compile(r"The last \d+ runs failed"))

    # Stop retrying: the task waits in Todo and nothing runs it again.
    dialog.get_by_role("button", name="Stop retrying").click()
    expect(dialog.locator("#task-status")).to_have_text("Todo")
    expect(dialog.locator("#task-error .task-error__retry")).to_have_text("Not retrying")
    expect(dialog.get_by_role("button", name="Stop retrying")).to_have_count(0)
    stopped = card(page, "todo", "Flaky provider")
    expect(stopped.locator(".task-card__retry")).to_have_text("Not retrying")
    assert (
        stack.sql("SELECT id FROM task_queue WHERE task_id = ? AND status = 'queued'", task["id"])
        == []
    )
    streak = stack.api("GET", f"/tasks/{task['id']}")["failure_streak"]

    # Retry now runs it at once (it fails again: one more in the streak, still one comment).
    dialog.get_by_role("button", name="Retry now").click()
    expect(stopped.locator(".badge")).to_have_count(0, timeout=RUN_TIMEOUT)  # left Todo
    failing = page.locator(f"#task-card-{task['id']} .task-card__error .badge")
    expect(failing).to_have_text(f"Failed {streak + 1} times", timeout=RUN_TIMEOUT)
    expect(errors).to_have_count(1)
    expect(errors.locator(".comment__repeat")).to_contain_text(f"{streak + 1} times, last at")
    page.console_errors.check()
    page.close()
