""" "Needs you" in a real browser (issue 29): a phone's home screen while anything waits, with
a verdict from it; the header's count and the page following other workspaces' news live; a
branch task's Approve that asks to merge or keep its branch."""

import os

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import drag, new_page
from tests.browser.test_board_ui import PHONE_390, no_sideways_scroll
from tests.gitrepo import make_repo
from tests.live import django_script

pytestmark = pytest.mark.browser

SHOTS = os.environ.get("MALAMAR_SCREENSHOTS")  # a folder: the tests save what they saw there

# Puts tasks and chats where "Needs you" lists them, through the services (as the runner
# would: System moves, a failed run, an agent's reply).
WAITING = """
from chats import services as chats
from chats.models import Chat
from core.actors import SYSTEM
from tasks import services
from tasks.models import Task
from tests.failures import fail_task

for task_id in {review!r}:
    task = Task.objects.get(id=task_id)
    services.task_status_set(task=task, status="in_progress", actor=SYSTEM)
    services.task_status_set(task=task, status="in_review", actor=SYSTEM)
for task_id in {failing!r}:
    fail_task(Task.objects.get(id=task_id), "CLI exited with code 7")
for chat_id in {replied!r}:
    chats.chat_message_add_agent(
        chat=Chat.objects.get(id=chat_id), message="Set up 2 agents", actions=None, agent=None
    )
"""


def put_waiting(server, review=(), failing=(), replied=()) -> None:
    django_script(
        server.data_dir,
        WAITING.format(review=list(review), failing=list(failing), replied=list(replied)),
    )


def shot(page, name: str) -> None:
    if SHOTS:
        page.screenshot(path=os.path.join(SHOTS, f"{name}.png"), full_page=True)


def tasks(server, workspace, *summaries) -> list[dict]:
    return [
        server.api("POST", f"/workspaces/{workspace['id']}/tasks", {"summary": summary})
        for summary in summaries
    ]


def test_a_phone_opens_on_what_needs_you_and_takes_a_verdict_from_it(browser, server):
    shop = server.workspace("Shop")
    blog = server.workspace("Blog")
    checkout, refunds = tasks(server, shop, "Checkout page", "Refunds")
    (feed,) = tasks(server, blog, "RSS feed")
    (payments,) = tasks(server, shop, "Payments")
    chat = server.api("POST", f"/workspaces/{blog['id']}/chats", {"title": "Team setup"})
    put_waiting(
        server,
        review=[checkout["id"], refunds["id"], feed["id"]],
        failing=[payments["id"]],
        replied=[chat["id"]],
    )

    page = new_page(browser, viewport=PHONE_390, has_touch=True, is_mobile=True)
    page.goto(server.url + "/")
    expect(page.locator("body")).to_have_attribute("data-live-state", "open")
    section = page.locator("#home-needs-you .home-inbox")
    expect(section.locator(".home-inbox__title")).to_have_text("5 things need you")
    expect(page.locator("#needs-you-count .nav-count__n")).to_have_text("5")
    # On a phone it is the first screen: above the workspaces, its rows shown.
    first_row = section.locator(".inbox-row").first
    expect(first_row).to_contain_text("Checkout page")
    expect(first_row).to_be_in_viewport()
    assert section.bounding_box()["y"] < page.locator(".workspace-grid").bounding_box()["y"]
    approve = first_row.get_by_role("button", name="Approve")
    assert approve.bounding_box()["height"] >= 44  # the big button
    no_sideways_scroll(page, "home with what needs you")
    shot(page, "needs-you-phone-home")

    approve.click()
    expect(page.locator(".toast", has_text="Approved: the task is Done")).to_be_visible()
    expect(section.locator(".inbox-row", has_text="Checkout page")).to_have_count(0)
    expect(page.locator("#needs-you-count .nav-count__n")).to_have_text("4")  # its event
    assert server.api("GET", f"/tasks/{checkout['id']}")["status"] == "done"

    # Request changes: the box opens under the row, the words go to the agents.
    row = section.locator(".inbox-row", has_text="Refunds")
    row.get_by_text("Request changes").click()
    row.get_by_label("What should the agents change?").fill("Refund to the original card.")
    row.get_by_role("button", name="Send back to the agents").click()
    expect(page.locator(".toast", has_text="Sent back to the agents")).to_be_visible()
    expect(section.locator(".inbox-row", has_text="Refunds")).to_have_count(0)
    assert server.api("GET", f"/tasks/{refunds['id']}")["status"] == "todo"
    comments = server.api("GET", f"/tasks/{refunds['id']}/comments")["comments"]
    assert comments[-1]["content"] == "Refund to the original card."

    # Reading the reply (the row opens the chat) takes it off the list.
    section.locator(".inbox-row", has_text="Team setup").get_by_role("link", name="Read").click()
    expect(page.locator("#chat-dialog")).to_be_visible()
    page.goto(server.url + "/")
    expect(page.locator("#home-needs-you .home-inbox__title")).to_have_text("2 things need you")
    expect(page.locator("#home-needs-you .inbox-row", has_text="Team setup")).to_have_count(0)
    page.console_errors.check()
    page.close()


def test_the_count_and_the_page_follow_every_workspaces_news(browser, server):
    shop = server.workspace("Shop")
    blog = server.workspace("Blog")
    (checkout,) = tasks(server, shop, "Checkout page")
    (feed,) = tasks(server, blog, "RSS feed")
    chat = server.api("POST", f"/workspaces/{blog['id']}/chats", {"title": "Team setup"})

    board = new_page(browser)
    board.goto(f"{server.url}/workspaces/{shop['id']}/?tab=tasks")
    expect(board.locator("body")).to_have_attribute("data-live-state", "open")
    expect(board.locator("#needs-you-count .nav-count__n")).to_have_count(0)
    inbox = new_page(browser)
    inbox.goto(f"{server.url}/needs-you/")
    expect(inbox.locator("body")).to_have_attribute("data-live-state", "open")
    expect(inbox.locator("#needs-you-empty")).to_contain_text("Nothing needs you")

    # Another workspace's task reaches In Review: the count on Shop's board hears of it.
    put_waiting(server, review=[feed["id"]], replied=[chat["id"]])
    expect(board.locator("#needs-you-count .nav-count__n")).to_have_text("2")
    expect(inbox.locator("#needs-you-list .inbox-row")).to_have_count(2)
    shot(inbox, "needs-you-desktop")
    put_waiting(server, review=[checkout["id"]])
    expect(board.locator("#needs-you-count .nav-count__n")).to_have_text("3")
    expect(inbox.locator("#needs-you-list [data-kind=review]")).to_have_count(2)

    # Opening the chat in another tab takes its row off this page (chat.seen).
    board.goto(f"{server.url}/workspaces/{blog['id']}/?tab=chat&chat={chat['id']}")
    expect(board.locator("#chat-dialog")).to_be_visible()
    expect(inbox.locator("#needs-you-list [data-kind=chat]")).to_have_count(0)
    expect(inbox.locator("#needs-you-count .nav-count__n")).to_have_text("2")
    for page in (board, inbox):
        page.console_errors.check()
        page.close()


RUN_TIMEOUT = 30_000


def test_approve_and_drop_on_done_ask_to_merge_or_keep_a_branch(browser, stack, tmp_path):
    repo = make_repo(tmp_path / "repo")
    workspace = stack.workspace(
        "Repo",
        agents=[("Implementer", "claude", "@fake write feature.txt from\\sthe\\sagent\\n")],
        working_directory_mode="static",
        working_directory_path=str(repo),
        isolation="branch",
    )
    merged = stack.task(workspace, "Merge me", summary="Feature")
    kept = stack.task(workspace, "Keep me", summary="Experiment")
    for task in (merged, kept):
        stack.wait_status(task, "in_review", timeout=RUN_TIMEOUT / 1000)

    # From "Needs you" on a phone: Approve asks, "Merge into main and finish" merges.
    phone = new_page(browser, viewport=PHONE_390, has_touch=True, is_mobile=True)
    phone.goto(f"{stack.server.url}/needs-you/")
    row = phone.locator("#needs-you-list .inbox-row", has_text="Feature")
    row.get_by_role("button", name="Approve").click()
    dialog = phone.locator("#merge-choice")
    expect(dialog).to_be_visible()
    expect(dialog.locator("#merge-choice-title")).to_contain_text("Merge “Feature” first?")
    shot(phone, "needs-you-merge-choice-phone")
    dialog.get_by_role("button", name="Merge into main and finish").click()
    expect(phone.locator(".toast", has_text="Merged into main and finished")).to_be_visible()
    expect(dialog).to_be_hidden()
    expect(phone.locator("#needs-you-list .inbox-row", has_text="Feature")).to_have_count(0)
    assert stack.api("GET", f"/tasks/{merged['id']}")["status"] == "done"
    assert (repo / "feature.txt").exists()
    phone.console_errors.check()
    phone.close()

    # On the board: a drop on Done asks the same; "Finish without merging" keeps the branch.
    page = new_page(browser)
    page.goto(f"{stack.server.url}/workspaces/{workspace['id']}/?tab=tasks")
    card = page.locator("#col-in_review .task-card-item", has_text="Experiment")
    drag(page, card, page.locator("#col-done"))
    dialog = page.locator("#merge-choice")
    expect(dialog).to_be_visible()
    dialog.get_by_role("button", name="Finish without merging (keep the branch)").click()
    expect(dialog).to_be_hidden()
    expect(page.locator("#col-done .task-card-item", has_text="Experiment")).to_be_visible()
    task = stack.api("GET", f"/tasks/{kept['id']}")
    assert task["status"] == "done" and task["branch_name"] and not task["merged_at"]
    page.console_errors.check()
    page.close()
