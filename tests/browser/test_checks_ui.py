"""Checks (issue 30) in a real browser: a check's output streams into the task's Activity tab
while it runs, the card and the popup show "Checks failing" and then, after "Run checks" by
hand, "Checks passed"."""

import sys

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import new_page
from tests.gitrepo import make_repo

pytestmark = pytest.mark.browser

RUN_TIMEOUT = 30_000
# Prints, waits for the test's `release` file, then fails unless the file `fixed` exists.
HELD_CHECK = """import os, sys, time
print("collecting 3 tests", flush=True)
while not os.path.exists("release"):
    time.sleep(0.05)
os.remove("release")
if os.path.exists("fixed"):
    print("3 passed")
    sys.exit(0)
print("FAILED test_total: expected 3 got 2")
sys.exit(1)
"""


def test_a_check_runs_live_in_the_activity_and_its_verdict_shows_on_card_and_popup(
    browser, stack, tmp_path
):
    repo = make_repo(tmp_path / "repo", {"check.py": HELD_CHECK})
    workspace = stack.workspace(
        "Checked",
        agents=["Builder"],
        working_directory_mode="static",
        working_directory_path=str(repo),
        checks=[{"name": "tests", "command": f"{sys.executable} check.py"}],
        checks_attempts=1,
    )
    task = stack.task(workspace, "Nothing to do.", summary="Gate me")
    page = new_page(browser)
    page.goto(f"{stack.server.url}/workspaces/{workspace['id']}/?tab=tasks&task={task['id']}")
    expect(page.locator("body")).to_have_attribute("data-live-state", "open")
    dialog = page.locator("#task-dialog")
    dialog.get_by_role("tab", name="Activity").click()

    # The check runs like an agent: its run opens, its output arrives line by line.
    run = dialog.locator("details.run--running")
    expect(run.locator(".run__agent")).to_have_text("tests", timeout=RUN_TIMEOUT)
    expect(run.locator(".run__meta")).to_contain_text("Check")
    expect(run.locator("[data-run-live] .trace--output")).to_contain_text("collecting 3 tests")
    assert stack.status(task) == "in_progress"
    (repo / "release").touch()

    # It failed once, and one attempt was allowed: In Review, "Checks failing" on both.
    card_badge = page.locator(f"#task-card-{task['id']} .checks-badge")
    expect(card_badge).to_have_text("Checks failing", timeout=RUN_TIMEOUT)
    expect(dialog.locator("#task-checks-badge")).to_have_text("Checks failing")
    failed = dialog.locator("details.run--failed")
    expect(failed.locator(".run__state")).to_contain_text("exit 1")
    failed.locator("summary.run__summary").click()
    expect(failed.locator(".trace__output--check")).to_contain_text("expected 3 got 2")
    dialog.get_by_role("tab", name="Comments").click()
    expect(dialog.locator(".comment", has_text="expected 3 got 2")).to_contain_text("Checks")

    # The person fixes it and runs the checks by hand: "Checks passed", still In Review.
    (repo / "fixed").touch()
    dialog.locator("#task-run-checks").click()
    (repo / "release").touch()
    expect(card_badge).to_have_text("Checks passed", timeout=RUN_TIMEOUT)
    expect(dialog.locator("#task-checks-badge")).to_have_text("Checks passed")
    expect(dialog.locator(".task-checks__item--passed")).to_contain_text("tests")
    assert stack.status(task) == "in_review"
    page.console_errors.check()
