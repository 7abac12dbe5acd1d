"""The Changes tab in a real browser: opened while an agent edits a file of the user's
repository, it shows the diff once the run ends (task.changes_updated), without a reload."""

import os
import subprocess

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import PHONE, new_page
from tests.live import wait_until

pytestmark = pytest.mark.browser

RUN_TIMEOUT = 30_000


def make_repo(path):
    path.mkdir()
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    (path / "app.py").write_text("def main():\n    return 1\n")
    for args in (
        ["init", "-q", "-b", "main"],
        ["add", "."],
        ["-c", "user.name=U", "-c", "user.email=u@x", "commit", "-qm", "start"],
    ):
        subprocess.run(["git", *args], cwd=path, env=env, check=True, capture_output=True)
    return path


@pytest.mark.parametrize("viewport", [None, PHONE], ids=["desktop", "phone"])
def test_the_changes_tab_shows_the_diff_after_the_run(browser, stack, tmp_path, viewport):
    repo = make_repo(tmp_path / "repo")
    workspace = stack.workspace(
        "Repo",
        agents=["Builder"],
        working_directory_mode="static",
        working_directory_path=str(repo),
    )
    edit = "write app.py def\\smain():\\n\\s\\s\\s\\sreturn\\s2\\n"
    task = stack.task(workspace, f"@fake sleep 8 {edit} sleep 1", summary="Edit app")
    page = new_page(browser, viewport=viewport)
    page.goto(f"{stack.server.url}/workspaces/{workspace['id']}/?tab=tasks&task={task['id']}")
    expect(page.locator("body")).to_have_attribute("data-live-state", "open")
    dialog = page.locator("#task-dialog")
    runs = lambda: stack.api("GET", f"/tasks/{task['id']}/runs")["runs"]  # noqa: E731
    wait_until(lambda: runs() and runs()[0]["status"] == "running", timeout=20, what="a run")
    dialog.get_by_role("tab", name="Changes").click()
    changes = dialog.locator("#task-changes")
    expect(changes.locator("#task-changes-empty")).to_be_visible()
    assert stack.status(task) == "in_progress"  # opened while the run edits the file

    # After the run: the working directory with its branch, the file, its highlighted diff.
    file = changes.locator('.change-file[data-change-path="app.py"]')
    expect(file).to_be_visible(timeout=RUN_TIMEOUT)
    expect(changes.locator("#task-changes-path")).to_have_text(str(repo))
    expect(changes.locator(".changes__branch")).to_have_text("main")
    expect(changes.locator("#task-changes-totals")).to_contain_text("1 file changed, +1 \u22121")
    expect(file.locator(".diff__line--del .diff__code")).to_have_text("    return 1")
    expect(file.locator(".diff__line--add .diff__code")).to_have_text("    return 2")
    expect(file.locator(".diff__line--add .diff__code span").first).to_be_visible()  # Pygments

    # The run selector, and the card's totals.
    expect(changes.locator("#task-changes-run option")).to_have_text(
        ["Whole task", "Run 1 by Builder"]
    )
    changes.locator("#task-changes-run").select_option(label="Run 1 by Builder")
    expect(changes.locator("#task-changes-run")).to_have_value(
        stack.api("GET", f"/tasks/{task['id']}/runs")["runs"][0]["id"]
    )
    expect(file).to_be_visible()
    card = page.locator(f"#task-card-{task['id']}")
    expect(card.locator(".task-card__changes")).to_have_text("+1 \u22121")
    page.console_errors.check()


def two_runs_in_their_popup(browser, stack):
    """A task whose two runs each wrote a file (a.txt, then b.txt), open in its popup."""
    workspace = stack.workspace("Two runs", agents=["Builder", "Reviewer"])
    task = stack.task(
        workspace,
        "@fake Builder: write a.txt one\n@fake Reviewer: write b.txt two\\nthree\\n",
        summary="Two runs",
    )
    stack.wait_status(task, "in_review")
    page = new_page(browser)
    page.goto(f"{stack.server.url}/workspaces/{workspace['id']}/?tab=tasks&task={task['id']}")
    return task, page, page.locator("#task-dialog")


def test_the_activity_timeline_links_a_run_to_its_changes(browser, stack):
    _task, page, dialog = two_runs_in_their_popup(browser, stack)
    dialog.get_by_role("tab", name="Activity").click()
    link = dialog.locator(".run", has_text="Reviewer").locator("[data-changes-run]")
    expect(link).to_have_text("changed 1 file, +2 \u22120")
    link.click()
    changes = dialog.locator("#task-changes")
    expect(dialog.get_by_role("tab", name="Changes")).to_have_attribute("aria-selected", "true")
    expect(changes.locator("#task-changes-run")).to_have_value(
        link.get_attribute("data-changes-run")
    )
    expect(changes.locator("[data-change-path]")).to_have_count(1)
    expect(changes.locator('[data-change-path="b.txt"]')).to_be_visible()
    page.console_errors.check()


# Counts the swaps into the Changes tab (body[data-changes-swaps]).
COUNT_SWAPS = """() => document.addEventListener("htmx:afterSwap", (event) => {
    if (event.detail.target.id !== "task-changes") return;
    document.body.dataset.changesSwaps = Number(document.body.dataset.changesSwaps || 0) + 1;
})"""


def test_a_run_ending_while_the_tab_loads_queues_behind_the_load(browser, stack):
    """A run's end (task.changes_updated) used to abort a load of the tab in flight, which htmx
    logs as a console error; now every load of the tab queues behind the one in flight, and the
    run the tab shows (its selector, or one picked in the Activity tab) stays the run shown."""
    _task, page, dialog = two_runs_in_their_popup(browser, stack)
    changes = dialog.locator("#task-changes")
    swaps = page.locator("body")
    page.evaluate(COUNT_SWAPS)
    # In one turn of the page: the tab opens (its load is sent) and a run ends (live.js fires
    # the tab's "live" refresh) while that load is on its way.
    page.evaluate(
        """() => {
            document.querySelector('[data-task-tab="changes"]').click();
            window.htmx.trigger("#task-changes", "live");
        }"""
    )
    expect(swaps).to_have_attribute("data-changes-swaps", "2")
    expect(changes.locator("[data-change-path]")).to_have_count(2)
    expect(changes.locator("#task-changes-run")).to_have_value("")

    # A run picked in the Activity tab, and a run ends while its load is on its way.
    dialog.get_by_role("tab", name="Activity").click()
    link = dialog.locator(".run", has_text="Builder").locator("[data-changes-run]")
    expect(link).to_be_visible()
    page.evaluate(
        """(run) => {
            document.querySelector(`[data-changes-run="${run}"]`).click();
            window.htmx.trigger("#task-changes", "live");
        }""",
        link.get_attribute("data-changes-run"),
    )
    expect(swaps).to_have_attribute("data-changes-swaps", "4")  # both landed
    expect(changes.locator("#task-changes-run")).to_have_value(
        link.get_attribute("data-changes-run")
    )
    expect(changes.locator("[data-change-path]")).to_have_count(1)
    expect(changes.locator('[data-change-path="a.txt"]')).to_be_visible()

    # A run picked in the selector while a refresh is on its way: the pick is sent from the tab
    # (htmx drops a queued request whose element a swap removed: the selector's would be), after
    # the refresh lands.
    select = changes.locator("#task-changes-run")
    other = page.evaluate(
        """() => {
            const select = document.getElementById('task-changes-run');
            return [...select.options].map((o) => o.value).find((v) => v && v !== select.value);
        }"""
    )
    page.evaluate(
        """(run) => {
            window.htmx.trigger("#task-changes", "live");
            const select = document.getElementById("task-changes-run");
            select.value = run;
            select.dispatchEvent(new Event("change", { bubbles: true }));
        }""",
        other,
    )
    expect(swaps).to_have_attribute("data-changes-swaps", "6")  # the refresh, then the pick
    expect(select).to_have_value(other)
    page.console_errors.check()

    # A run picked in the selector while a run's link (the Activity tab's) loads another: the
    # pick came later, so it is the run shown. (htmx drops a request queued behind another one
    # of the tab once that one's swap removes its element: the selector, here.)
    builder_run = link.get_attribute("data-changes-run")
    page.evaluate(
        """(run) => {
            document.querySelector(`[data-changes-run="${run}"]`).click();
            const select = document.getElementById("task-changes-run");
            select.value = "";
            select.dispatchEvent(new Event("change", { bubbles: true }));
        }""",
        builder_run,
    )
    expect(swaps).to_have_attribute("data-changes-swaps", "8")  # the link's load, the pick
    expect(select).to_have_value("")
    expect(changes.locator("[data-change-path]")).to_have_count(2)
    page.console_errors.check()


def test_a_run_ending_while_a_pick_waits_behind_a_load_keeps_the_pick(browser, stack):
    """A run's end refreshes the tab only once no load of it is on its way: queued there, its
    refresh would take the place of a run picked meanwhile (hx-sync "queue last") and read the
    tab as the load in flight leaves it, showing that load's run instead of the pick."""
    task, page, dialog = two_runs_in_their_popup(browser, stack)
    changes = dialog.locator("#task-changes")
    dialog.get_by_role("tab", name="Changes").click()
    select = changes.locator("#task-changes-run")
    expect(select).to_have_value("")
    runs = [run["id"] for run in stack.api("GET", f"/tasks/{task['id']}/runs")["runs"]]
    held = []  # the link's load, answered once the run's end is due
    page.route(lambda url: f"run={runs[0]}" in url, lambda route: held.append(route))
    dialog.get_by_role("tab", name="Activity").click()
    dialog.locator(f'[data-changes-run="{runs[0]}"]').click()
    expect(dialog.get_by_role("tab", name="Changes")).to_have_attribute("aria-selected", "true")
    select.select_option(runs[1])  # sent after the link's load
    page.evaluate(
        """(task) => document.body.dispatchEvent(new CustomEvent("malamar:live",
            { bubbles: true, detail: { type: "task.changes_updated", task_id: task } }))""",
        task["id"],
    )
    expect(changes).to_have_attribute("data-live-due", "")
    assert len(held) == 1
    held[0].continue_()
    expect(changes).not_to_have_attribute("data-live-due", "")  # the refresh ran, last
    expect(select).to_have_value(runs[1])
    expect(changes.locator("[data-change-path]")).to_have_count(1)
    expect(changes.locator('[data-change-path="b.txt"]')).to_be_visible()
    page.console_errors.check()
