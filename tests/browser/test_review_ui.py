"""The review of a task in a real browser (issue 29), on a desktop and a 390 px phone: line
comments drafted on the Changes tab's lines (a click, a drag, the keyboard) that survive a
reload and reach the agents' input with Request changes, one of them outdated by the next run;
Approve with and without a branch (a refused merge, then a merge that starts the task waiting
for it); "Move to Done" that finishes without merging from the phone's menu."""

import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from runner.git import git_text
from tests.browser.conftest import new_page
from tests.gitrepo import make_repo

pytestmark = pytest.mark.browser

RUN_TIMEOUT = 30_000
PHONE = {"width": 390, "height": 844}
VIEWPORTS = pytest.mark.parametrize("viewport", [None, PHONE], ids=["desktop", "phone"])
FIVE_LINES = "one\\ntwo\\nthree\\nfour\\nfive\\n"


def open_task(page, stack, workspace, task):
    page.goto(f"{stack.server.url}/workspaces/{workspace['id']}/?tab=tasks&task={task['id']}")
    expect(page.locator("body")).to_have_attribute("data-live-state", "open")
    dialog = page.locator("#task-dialog")
    expect(dialog.locator("#task-status")).to_be_visible()
    return dialog


def line_row(file, number: int, side: str = "new"):
    """The diff row showing line `number` on that side (its number cell, 1st old, 2nd new)."""
    column = 1 if side == "old" else 2
    cell = file.page.locator(f"td.diff__no:nth-child({column})", has_text=re.compile(f"^{number}$"))
    return file.locator("tr.diff__line").filter(has=cell)


def add_draft(page, text: str) -> None:
    box = page.locator(".draft-box")
    expect(box).to_be_visible()
    box.get_by_label("Comment on these lines").fill(text)
    box.get_by_role("button", name="Add comment").click()
    expect(box).to_have_count(0)


def in_review_task(stack, tmp_path, **workspace_fields):
    repo = make_repo(tmp_path / "repo", {"README.md": "hello\n", "app.py": "print(1)\n"})
    workspace = stack.workspace(
        "Repo",
        agents=[("Implementer", "claude", f"@fake write app.py {FIVE_LINES}")],
        working_directory_mode="static",
        working_directory_path=str(repo),
        **workspace_fields,
    )
    task = stack.task(workspace, "Rewrite app.py", summary="Five lines")
    stack.wait_status(task, "in_review", timeout=RUN_TIMEOUT / 1000)
    return repo, workspace, task


@VIEWPORTS
def test_request_changes_with_three_line_comments_that_reach_the_agent(
    browser, stack, tmp_path, viewport
):
    repo, workspace, task = in_review_task(stack, tmp_path)
    page = new_page(browser, viewport=viewport)
    dialog = open_task(page, stack, workspace, task)
    dialog.get_by_role("tab", name="Changes").click()
    file = dialog.locator('.change-file[data-change-path="app.py"]')
    expect(file.locator(".diff__line--add")).to_have_count(5)

    # A click on a line, a drag over the line numbers of two, the keyboard for the last one.
    line_row(file, 1).locator(".diff__code").click()
    add_draft(page, "Why one?")
    line_row(file, 2).locator("td.diff__no").nth(1).hover()
    page.mouse.down()
    line_row(file, 3).locator("td.diff__no").nth(1).hover()
    page.mouse.up()
    expect(page.locator(".draft-box [data-draft-where]")).to_have_text("app.py, lines 2\u20133")
    add_draft(page, "Two and three: capitals?")
    table = file.locator("table")
    table.focus()
    for _ in range(6):  # the removed line, then the five new ones
        page.keyboard.press("ArrowDown")
    page.keyboard.press("Enter")
    expect(page.locator(".draft-box [data-draft-where]")).to_have_text("app.py, line 5")
    page.keyboard.type("And five.")
    page.keyboard.press("Control+Enter")
    expect(file.locator(".diff__draft")).to_have_count(3)
    # Escape drops a box (not the popup around it).
    line_row(file, 4).locator(".diff__code").click()
    expect(page.locator(".draft-box")).to_be_visible()
    page.keyboard.press("Escape")
    expect(page.locator(".draft-box")).to_have_count(0)
    expect(dialog).to_be_visible()
    pending = dialog.locator("#task-comment-form [data-review-pending]")
    # A draft's Delete takes it away (and from the count).
    line_row(file, 4).locator(".diff__code").click()
    add_draft(page, "Never mind.")
    expect(pending).to_have_text("4 comments pending: sent with your verdict")
    unwanted = file.locator(".diff__draft", has_text="Never mind.")
    unwanted.get_by_role("button", name="Delete").click()
    expect(file.locator(".diff__draft")).to_have_count(3)
    expect(pending).to_have_text("3 comments pending: sent with your verdict")

    # The drafts survive a reload.
    page.reload()
    dialog = page.locator("#task-dialog")
    expect(pending).to_have_text("3 comments pending: sent with your verdict")
    dialog.get_by_role("tab", name="Changes").click()
    expect(file.locator(".diff__draft")).to_have_count(3)
    expect(file.locator(".diff__draft").nth(1)).to_contain_text("Two and three: capitals?")
    # And on another device (the server keeps them): a page of its own browser context.
    other = new_page(browser, viewport=viewport)
    open_task(other, stack, workspace, task)
    expect(other.locator("#task-comment-form [data-review-pending]")).to_have_text(
        "3 comments pending: sent with your verdict"
    )
    other.close()

    # Request changes: the comments go (the note rewrites line 2 in the next run).
    rewrite = "@fake write app.py one\\nTWO\\nthree\\nfour\\nfive\\n"
    dialog.get_by_label("Add a comment").fill(f"Please look again.\n{rewrite}")
    dialog.get_by_role("button", name="Request changes").click()
    expect(page.locator(".toast", has_text="Changes requested").first).to_be_visible()
    expect(pending).to_be_hidden()
    expect(dialog.locator("#task-changes .diff__draft")).to_have_count(0)  # (the server's gone)
    stack.wait_run(2)
    stack.wait_status(task, "in_review", timeout=RUN_TIMEOUT / 1000)
    text = Path(stack.task_runs()[-1]["input_path"]).read_text().replace("\\n", "\n")
    assert "Comment on `app.py`, line 1:\n\n```\none\n```\n\nWhy one?" in text
    assert "Comment on `app.py`, lines 2 to 3:\n\n```\ntwo\nthree\n```" in text
    assert "Comment on `app.py`, line 5:\n\n```\nfive\n```\n\nAnd five." in text
    assert (repo / "app.py").read_text().splitlines()[1] == "TWO"

    # The Comments tab: each with its lines; the one on lines 2-3 is outdated now.
    dialog.get_by_role("tab", name="Comments").click()
    anchors = dialog.locator("#task-comments .line-anchor")
    expect(anchors).to_have_count(3)
    outdated = anchors.filter(has_text="lines 2\u20133")
    expect(outdated.locator(".badge", has_text="outdated")).to_be_visible()
    expect(outdated.locator(".line-anchor__code")).to_have_text("two\nthree")
    expect(anchors.filter(has=page.locator(".badge", has_text="outdated"))).to_have_count(1)
    # Its link opens the diff where it stays readable, marked outdated.
    outdated.get_by_role("link").click()
    focused = dialog.locator("#task-changes .diff-comment.is-outdated.is-focused")
    expect(focused).to_contain_text("Two and three: capitals?")
    expect(focused).to_be_in_viewport()
    # It stays marked over a refresh of the tab (a run's end reloads it).
    page.evaluate(
        """() => new Promise((settled) => {
            document.addEventListener("htmx:afterSettle",
                (event) => event.detail.target.id === "task-changes" && settled());
            window.htmx.trigger("#task-changes", "live");
        })"""
    )
    expect(focused).to_contain_text("Two and three: capitals?")
    # The diff they were made on (run 1's) shows the others under their lines.
    dialog.locator("#task-changes-run").select_option(label="Run 1 by Implementer")
    under_five = line_row(file, 5).locator("xpath=following-sibling::tr[1]")
    expect(under_five).to_have_class("diff__comment")
    expect(under_five).to_contain_text("And five.")
    dialog.get_by_role("tab", name="Activity").click()
    expect(dialog.locator("#task-log")).to_contain_text("User requested changes (3 line comments)")
    page.console_errors.check()
    page.close()


@VIEWPORTS
def test_approve_a_task_without_a_branch(browser, stack, viewport):
    workspace = stack.workspace("Plain", agents=[("Writer", "claude", "@fake review Ready.")])
    task = stack.task(workspace, "Write it", summary="Docs")
    stack.wait_status(task, "in_review", timeout=RUN_TIMEOUT / 1000)
    page = new_page(browser, viewport=viewport)
    dialog = open_task(page, stack, workspace, task)
    approve = dialog.get_by_role("button", name="Approve")
    request = dialog.get_by_role("button", name="Request changes")
    expect(approve).to_be_in_viewport()
    if viewport:  # a phone: Approve is the big button, across the composer
        box, other = approve.bounding_box(), request.bounding_box()
        assert box["width"] > 0.8 * PHONE["width"] and box["height"] > other["height"]
        assert box["y"] < other["y"]
    dialog.get_by_label("Add a comment").fill("Nice work.")
    approve.click()
    expect(page.locator(".toast", has_text="Approved").first).to_be_visible()
    expect(dialog.locator("#task-status")).to_have_text("Done")
    expect(dialog.get_by_role("button", name="Send comment")).to_be_visible()  # no verdicts now
    expect(dialog.locator("#task-comments .verdict")).to_have_text("Approved")
    dialog.get_by_role("tab", name="Activity").click()
    expect(dialog.locator("#task-log")).to_contain_text("User approved")
    assert stack.status(task) == "done"
    page.console_errors.check()
    page.close()


def test_approve_merges_a_branch_and_starts_the_task_that_waits_for_it(browser, stack, tmp_path):
    repo = make_repo(tmp_path / "repo", {"README.md": "hello\n"})
    workspace = stack.workspace(
        "Branches",
        agents=[("Implementer", "claude", "@fake skip")],
        working_directory_mode="static",
        working_directory_path=str(repo),
        isolation="branch",
    )
    first = stack.task(workspace, "@fake write feature.txt done\\n", summary="Feature")
    stack.wait_status(first, "in_review", timeout=RUN_TIMEOUT / 1000)
    body = {"summary": "Next", "description": "After the feature", "blocked_by": [first["id"]]}
    second = stack.api("POST", f"/workspaces/{workspace['id']}/tasks", body, expect=201)
    assert stack.status(second) == "todo"

    page = new_page(browser)
    dialog = open_task(page, stack, workspace, first)
    # main's checkout has uncommitted changes: the merge is refused and says why.
    (repo / "README.md").write_text("edited by hand\n")
    dialog.get_by_role("button", name="Approve").click()
    dialog.get_by_role("button", name="Merge into main and finish").click()
    expect(dialog.locator("#task_comment_errors")).to_contain_text("uncommitted changes")
    expect(dialog.locator("#task-status")).to_have_text("In Review")
    assert stack.status(second) == "todo"

    (repo / "README.md").write_text("hello\n")
    dialog.get_by_role("button", name="Approve").click()
    dialog.get_by_role("button", name="Merge into main and finish").click()
    expect(page.locator(".toast", has_text="Approved and merged into main").first).to_be_visible()
    expect(dialog.locator("#task-status")).to_have_text("Done")
    merged = dialog.locator("#task-branch-merged")
    commit = git_text("rev-parse", "main", cwd=repo)[:7]
    expect(merged).to_contain_text(f"Merged into main ({commit}")
    expect(dialog.get_by_role("button", name="Merge into main", exact=True)).to_have_count(0)
    expect(dialog.get_by_role("button", name="Discard")).to_have_count(0)
    expect(dialog.get_by_role("button", name="Send comment")).to_be_visible()  # no verdicts
    assert (repo / "feature.txt").read_text() == "done\n"

    # The task that waited starts from a main that holds the feature.
    stack.wait_status(second, "in_review", timeout=RUN_TIMEOUT / 1000)
    branch = stack.api("GET", f"/tasks/{second['id']}")["branch_name"]
    assert git_text("show", f"{branch}:feature.txt", cwd=repo) == "done"
    page.console_errors.check()
    page.close()


def test_a_phone_finishes_a_branch_task_without_merging_from_its_one_line_head(
    browser, stack, tmp_path
):
    repo = make_repo(tmp_path / "repo", {"README.md": "hello\n"})
    workspace = stack.workspace(
        "Branches",
        agents=[("Implementer", "claude", "@fake skip")],
        working_directory_mode="static",
        working_directory_path=str(repo),
        isolation="branch",
    )
    task = stack.task(workspace, "@fake write feature.txt done\\n", summary="Feature")
    stack.wait_status(task, "in_review", timeout=RUN_TIMEOUT / 1000)
    branch = stack.api("GET", f"/tasks/{task['id']}")["branch_name"]
    page = new_page(browser, viewport=PHONE, is_mobile=True, has_touch=True)
    dialog = open_task(page, stack, workspace, task)

    # One line of status and the primary action; the rest waits in the menu.
    header = dialog.locator(".task-detail__header").bounding_box()
    assert header["height"] < 0.2 * PHONE["height"], header
    expect(dialog.locator("#task-branch")).to_be_hidden()
    expect(dialog.locator(".kbd-hint").first).to_be_hidden()  # no Ctrl+Enter on a touch screen
    dialog.get_by_role("button", name="Move to Done").click()
    dialog.get_by_role("button", name="Finish without merging (keep the branch)").click()
    expect(dialog.locator("#task-status")).to_have_text("Done")
    expect(dialog.locator("#task-unmerged")).to_have_text("unmerged")
    expect(page.locator(f"#task-card-{task['id']}")).to_contain_text("unmerged")
    assert git_text("branch", "--list", branch, cwd=repo)  # kept

    # The menu offers the merge later, and the delete says what it would lose.
    dialog.get_by_role("button", name="More actions").click()
    menu = dialog.locator("#task-head-more")
    expect(menu.get_by_role("button", name="Merge into main", exact=True)).to_be_visible()
    menu.get_by_role("button", name="Delete").click()
    expect(page.locator("#confirm-dialog")).to_contain_text("which was never merged into main")
    page.locator("#confirm-dialog").get_by_role("button", name="Cancel").click()
    page.console_errors.check()
    page.close()
