"""Branch per task in a real browser: the isolation setting, and the task popup's branch with
its copy button, "Merge into <base>" and the type-to-confirm "Discard"."""

import pytest
from playwright.sync_api import expect

from runner.git import git_text
from tests.browser.conftest import PHONE, new_page
from tests.gitrepo import make_repo

pytestmark = pytest.mark.browser

RUN_TIMEOUT = 30_000


def open_task(page, stack, workspace, task):
    page.goto(f"{stack.server.url}/workspaces/{workspace['id']}/?tab=tasks&task={task['id']}")
    expect(page.locator("body")).to_have_attribute("data-live-state", "open")
    return page.locator("#task-dialog")


def test_the_setting_refuses_a_folder_that_is_no_repository(browser, stack, tmp_path):
    workspace = stack.workspace("Plain")
    page = new_page(browser)
    page.goto(f"{stack.server.url}/workspaces/{workspace['id']}/settings/")
    # A temp folder is no repository: the git-only settings show with a static directory.
    expect(page.get_by_label("Isolation")).to_be_hidden()
    page.get_by_text("Static directory", exact=True).click()
    page.get_by_label("Directory path").fill(str(tmp_path))
    page.get_by_label("Isolation").select_option("branch")
    page.get_by_role("button", name="Save settings").click()
    expect(page.locator("#settings-form")).to_contain_text(
        f"Branch per task needs a git repository: {tmp_path} is not the top folder of one"
    )
    expect(page.get_by_label("Isolation")).to_have_attribute("aria-invalid", "true")
    page.console_errors.check()
    page.close()


def test_copy_discard_and_merge_a_task_branch(browser, stack, tmp_path):
    repo = make_repo(tmp_path / "repo")
    workspace = stack.workspace(
        "Repo",
        agents=[("Implementer", "claude", "@fake write feature.txt from\\sthe\\sagent\\n")],
        working_directory_mode="static",
        working_directory_path=str(repo),
        isolation="branch",
    )
    first = stack.task(workspace, "Throw me away", summary="Experiment")
    second = stack.task(workspace, "Keep me", summary="Feature")
    for task in (first, second):
        stack.wait_status(task, "in_review", timeout=RUN_TIMEOUT / 1000)
    branch = stack.api("GET", f"/tasks/{first['id']}")["branch_name"]

    page = new_page(browser)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    dialog = open_task(page, stack, workspace, first)
    expect(dialog.locator("#task-branch-name")).to_have_text(branch)
    dialog.get_by_role("button", name="Copy branch name").click()
    # (other toasts, e.g. the runs' "In Review", may arrive after it)
    expect(page.locator(".toast", has_text="Copied").first).to_be_visible()
    assert page.evaluate("navigator.clipboard.readText()") == branch

    # Discard waits for the exact branch name.
    dialog.get_by_role("button", name="Discard").click()
    discard = page.locator("#task-discard-dialog")
    submit = discard.get_by_role("button", name="Discard branch")
    typed = discard.get_by_label(f"Type {branch} to confirm")
    expect(discard.locator("form:invalid")).to_have_count(1)
    typed.fill("malamar/nope")
    typed.evaluate("el => el.addEventListener('invalid', () => (el.dataset.refused = 'yes'))")
    submit.click()  # (the browser's own validation refuses it: no request)
    expect(typed).to_have_attribute("data-refused", "yes")
    expect(typed).to_be_focused()
    expect(dialog.locator("#task-branch-name")).to_have_text(branch)
    typed.fill(branch)
    expect(discard.locator("form:invalid")).to_have_count(0)
    submit.click()
    expect(page.locator(".toast").last).to_contain_text("Branch discarded")
    expect(dialog.locator("#task-branch")).to_have_count(0)
    expect(dialog.locator(".comment--system").last).to_contain_text(f"Discarded branch {branch}")
    assert not git_text("branch", "--list", branch, cwd=repo)

    # Merge asks first, then fast-forwards main: the task is Done.
    dialog = open_task(page, stack, workspace, second)
    dialog.get_by_role("button", name="Merge into main").click()
    page.locator("#confirm-dialog").get_by_role("button", name="Merge").click()
    expect(dialog.locator("#task-status")).to_have_text("Done")
    expect(page.locator(".toast").last).to_contain_text("Merged into main")
    assert (repo / "feature.txt").read_text() == "from the agent\n"
    page.console_errors.check()
    page.close()

    phone = new_page(browser, viewport=PHONE)
    dialog = open_task(phone, stack, workspace, second)
    dialog.get_by_role("button", name="More actions").click()  # (a phone's head: its menu)
    expect(dialog.locator("#task-branch-name")).to_be_visible()
    width = phone.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], "the branch row fits a phone"
    phone.console_errors.check()
    phone.close()
