"""Issue #16's browser items re-checked on the UI added since: the Changes tab, branch per task,
task dependencies, per-agent model and fallback CLI, the usage-limit pause, Settings' Workers.
One walk with a real worker (fake CLIs) through every new page and action, on a desktop and on
a phone: no Content-Security-Policy violation, no console error, no sideways pan."""

import re

import pytest
from playwright.sync_api import expect

from tests import databases
from tests.browser.conftest import new_page
from tests.browser.test_board_ui import LONG_SUMMARY, PHONE_390, fill_board, no_sideways_scroll
from tests.gitrepo import make_repo
from tests.live import django_script

pytestmark = pytest.mark.browser

RUN_TIMEOUT = 30_000
# A path and a line far wider than a phone (and than the popup on a desktop).
LONG_DIR = "src/" + "/".join(["a_rather_long_folder_name"] * 4)
LONG_FILE = f"{LONG_DIR}/and_an_even_longer_module_name_for_the_checkout_flow.py"
LONG_LINE = "total\\s=\\s" + "+".join(["price_of_the_item_in_the_basket"] * 12)


def fits(page, where):
    no_sideways_scroll(page, where)


@pytest.mark.parametrize("viewport", [None, PHONE_390], ids=["desktop", "phone"])
def test_every_new_page_and_action_without_csp_errors_or_sideways_pan(
    browser, stack, tmp_path, viewport
):
    repo = make_repo(tmp_path / "repo")
    workspace = stack.workspace(
        "Repo",
        agents=[("Builder", "claude", "")],
        working_directory_mode="static",
        working_directory_path=str(repo),
        isolation="branch",
    )
    edit = (
        f"write {LONG_FILE} {LONG_LINE}\\n write README.md hello\\nworld\\n"
        f" lines {LONG_DIR}/big.txt 1600 lines mid.txt 700"  # on its own page; loads when opened
    )
    first = stack.task(workspace, f"@fake {edit} review Made the change", summary="Long lines")
    second = stack.task(workspace, "@fake review Second", summary="Second task")
    for task in (first, second):
        stack.wait_status(task, "in_review", timeout=RUN_TIMEOUT / 1000)
    url = stack.server.url
    base = f"{url}/workspaces/{workspace['id']}/"

    page = new_page(browser, viewport=viewport)
    page.goto(f"{base}?tab=tasks&task={first['id']}")
    expect(page.locator("body")).to_have_attribute("data-live-state", "open")
    dialog = page.locator("#task-dialog")
    if viewport:  # a phone's head keeps the branch in its menu
        dialog.get_by_role("button", name="More actions").click()
    expect(dialog.locator("#task-branch-name")).to_be_visible()
    fits(page, "popup with a branch")
    if viewport:
        page.keyboard.press("Escape")

    # The Changes tab: a long path and a long line scroll inside their own box.
    dialog.get_by_role("tab", name="Changes").click()
    changes = dialog.locator("#task-changes")
    file = changes.locator(f'.change-file[data-change-path="{LONG_FILE}"]')
    expect(file.locator(".diff__line--add").first).to_be_visible()
    fits(page, "changes tab")
    box = file.locator(".diff")
    # The diff's own styles apply (a lost `}` in tasks.css once nested them away).
    expect(box).to_have_css("overflow-x", "auto")
    expect(file.locator(".diff__line--add .diff__code").first).to_have_css("white-space", "pre")
    assert box.evaluate("(el) => el.scrollWidth > el.clientWidth"), "the long line scrolls"
    assert box.evaluate("(el) => el.getBoundingClientRect().right") <= page.evaluate("innerWidth")
    changes.locator("#task-changes-run").select_option(index=1)
    expect(changes.locator("#task-changes-run")).not_to_have_value("")
    # The run's diff has landed (the server marks its option; a pick alone does not): a file
    # opened in the whole task's diff before would be closed by its swap.
    expect(changes.locator("#task-changes-run option[selected]")).to_have_count(1)
    expect(file).to_be_visible()
    changes.locator('.change-file[data-change-path="README.md"] summary').click()
    fits(page, "changes of one run")
    later = changes.locator('.change-file[data-change-path="mid.txt"]')
    later.locator("summary").click()
    expect(later.locator(".diff__line--add").first).to_be_visible()
    fits(page, "a diff loaded when opened")
    own_page = changes.locator(f'.change-file[data-change-path="{LONG_DIR}/big.txt"] a')
    own_page = own_page.get_attribute("href")

    # The Activity tab: the run with its steps.
    dialog.get_by_role("tab", name="Activity").click()
    expect(dialog.locator(".run").first).to_be_visible()
    dialog.locator(".run summary").first.click()
    fits(page, "activity tab")
    dialog.get_by_role("tab", name="Comments").click()

    # Dependencies: make it wait for the second task, from the popup's head (its menu).
    more = dialog.get_by_role("button", name="More actions")
    if viewport:
        more.click()
    dialog.locator("#task-deps-edit summary").click()
    form = dialog.locator("#task-blockers-form")
    form.get_by_role("checkbox", name="Second task (In Review)").check()
    form.get_by_role("button", name="Save").click()
    expect(dialog.locator("#task-blockers")).to_contain_text("Second task")
    fits(page, "popup with dependencies")

    # The branch's discard dialog, opened and dismissed.
    if viewport:
        more.click()
    dialog.get_by_role("button", name="Discard").click()
    discard = page.locator("#task-discard-dialog")
    discard.get_by_label("Type").fill("not it")
    fits(page, "discard dialog")
    discard.get_by_role("button", name="Cancel").click()
    expect(discard).to_be_hidden()
    if viewport:
        page.keyboard.press("Escape")  # the menu first
        expect(dialog.locator("#task-head-more")).to_be_hidden()
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    fits(page, "board with a chain")

    # An agent with a model, a reasoning effort and a fallback CLI.
    page.goto(f"{base}?tab=agents")
    page.get_by_role("button", name="Edit Builder").click()
    agent = page.locator("#agent-dialog")
    agent.get_by_label("Model").fill("sonnet")
    agent.get_by_label("Reasoning effort").select_option("high")
    agent.get_by_label("Fallback CLI").select_option("codex")
    fits(page, "agent dialog")
    agent.get_by_role("button", name="Save changes").click()
    expect(agent).to_be_hidden()
    expect(page.locator("#agents-panel")).to_contain_text("sonnet")
    fits(page, "agents tab")

    # Workspace settings with branch per task, saved.
    page.goto(f"{base}settings/")
    fits(page, "workspace settings")
    page.get_by_role("button", name="Save settings").click()
    expect(page.locator(".toast", has_text="Settings saved")).to_be_visible()

    # Settings: the Workers section, a CLI saved and tested.
    page.goto(f"{url}/settings/")
    if databases.ON_POSTGRES:  # several workers may share the database: each one listed
        expect(page.locator("#workers .worker-row")).to_have_count(1)
    else:
        expect(page.locator("#workers")).to_contain_text("One worker on this machine")
    fits(page, "settings")
    page.locator("#save-claude").click()
    expect(page.locator(".toast", has_text="saved").first).to_be_visible()
    page.locator("#test-claude").click()
    expect(page.locator("#cli-status-claude [data-cli-answer]")).to_be_visible()
    fits(page, "settings after a test")

    page.goto(url + "/")
    expect(page.locator(".workspace-card").first).to_be_visible()
    fits(page, "workspaces")

    # A long file's diff on its own page.
    page.goto(url + own_page)
    expect(page.locator(".diff__line--add").first).to_be_visible()
    fits(page, "a file's own page")
    page.console_errors.check()  # and every CSP violation
    page.close()


# The card and popup states added since #16, straight through the ORM (no worker): a task that
# waits for a CLI out of quota, a failing one, a chain, changes totals, a long live action.
NEW_STATES = """
from datetime import timedelta
from django.utils import timezone
from core.ids import new_id
from runner.limits import Limit
from runner.models import AgentRun
from notifications.cli_states import cli_limit_set
from tasks.models import QueueStatus, Task, TaskComment, TaskQueueItem

ids = {ids!r}
cli_limit_set(cli_type="claude", limit=Limit("You've hit your session limit", None))
TaskQueueItem.objects.filter(task_id=ids["waiting"]).update(waiting_for_cli="claude")
failing = Task.objects.get(id=ids["failing"])
Task.objects.filter(id=failing.id).update(
    failure_streak=4, retry_not_before=timezone.now() + timedelta(minutes=7))
TaskComment.objects.create(id=new_id(), task=failing, workspace_id={workspace!r}, kind="error",
                           content="CLI could not be started: " + {long_word!r})
Task.objects.filter(id=ids["changed"]).update(status="in_review")
AgentRun.objects.create(
    id=new_id(), workspace_id={workspace!r}, task_id=ids["changed"], agent_name="Builder",
    cli_type="claude", started_at=timezone.now(), status="completed",
    task_files_changed=1234, task_lines_added=987654, task_lines_removed=123456)
working = Task.objects.get(id=ids["working"])
Task.objects.filter(id=working.id).update(status="in_progress")
TaskQueueItem.objects.filter(task=working).update(status=QueueStatus.IN_PROGRESS)
AgentRun.objects.create(
    id=new_id(), workspace_id={workspace!r}, task=working, agent_name="Builder",
    cli_type="claude", started_at=timezone.now(),
    current_action="Editing " + {long_word!r} + "/" + {long_word!r} + ".py")
"""
LONG_WORD = "checkout_" + "x" * 140


def test_new_card_and_popup_states_fit_a_phone(browser, server):
    workspace = server.workspace("New states")
    server.agent(workspace["id"], "Builder")
    post = lambda body: server.api(  # noqa: E731
        "POST", f"/workspaces/{workspace['id']}/tasks", body
    )
    first = post({"summary": LONG_WORD})
    made = {
        "waiting": post({"summary": "Waits for the quota " + LONG_WORD}),
        "failing": post({"summary": "Fails " + LONG_WORD}),
        "chained": post({"summary": "Chained " + LONG_WORD, "blocked_by": [first["id"]]}),
        "changed": post({"summary": "Changed a lot"}),
        "working": post({"summary": "Working " + LONG_WORD}),
    }
    django_script(
        server.data_dir,
        NEW_STATES.format(
            ids={key: task["id"] for key, task in made.items()},
            workspace=workspace["id"],
            long_word=LONG_WORD,
        ),
    )
    page = new_page(browser, viewport=PHONE_390)
    base = f"{server.url}/workspaces/{workspace['id']}/"
    page.goto(f"{base}?tab=tasks")
    expect(page.locator('[data-banner="cli-limited"]')).to_be_visible()
    expect(page.locator(f'[data-task-error="{made["failing"]["id"]}"]')).to_be_visible()
    expect(page.locator(f"#task-card-{made['chained']['id']} .task-card__blocker")).to_be_visible()
    expect(page.locator(".task-card__changes")).to_have_count(1)
    no_sideways_scroll(page, "board with the new card states")
    for jump in ("In Progress", "In Review"):
        page.get_by_role("navigation", name="Jump to a column").get_by_role(
            "link", name=re.compile(f"^{jump}")
        ).click()
        no_sideways_scroll(page, f"board at {jump}")
    for key, task in made.items():
        page.goto(f"{base}?tab=tasks&task={task['id']}")
        dialog = page.locator("#task-dialog")
        expect(dialog.locator("#task-status")).to_be_visible()
        no_sideways_scroll(page, f"popup of the {key} task")
        # (Send comment, or an In Review task's verdicts)
        expect(dialog.locator(".composer__send, #task-review-approve")).to_be_in_viewport()
        expect(dialog.locator("#task-actions .btn").first).to_be_in_viewport()
    page.console_errors.check()
    page.close()


def test_a_live_refresh_never_lands_on_the_open_dependencies_editor(browser, server):
    """The "Wait for other tasks…" editor in the popup's head, opened with a choice made when a
    live event would refresh the head: the refresh waits (the choice survives), and runs once
    the editor is closed."""
    workspace = server.workspace("Deps")
    other = server.api("POST", f"/workspaces/{workspace['id']}/tasks", {"summary": "Other"})
    task = server.api("POST", f"/workspaces/{workspace['id']}/tasks", {"summary": "Mine"})
    page = new_page(browser)
    page.goto(f"{server.url}/workspaces/{workspace['id']}/?tab=tasks&task={task['id']}")
    expect(page.locator("body")).to_have_attribute("data-live-state", "open")
    dialog = page.locator("#task-dialog")
    head = dialog.locator("#task-head")
    title = dialog.locator("#task-dialog-title")
    rename = lambda summary: server.api(  # noqa: E731
        "PUT", f"/tasks/{task['id']}", {"summary": summary}
    )

    editor = dialog.locator("#task-deps-edit")
    editor.locator("summary").click()
    choice = dialog.locator(f"#task-blockers-form input[value='{other['id']}']")
    choice.check()
    # Renamed elsewhere: the card shows it, the head's refresh waits for the editor.
    rename("Renamed while I chose")
    expect(page.locator(f"#task-card-{task['id']}")).to_contain_text("Renamed while I chose")
    expect(head).to_have_attribute("data-live-due", "")
    expect(editor).to_have_attribute("open", "")
    expect(choice).to_be_checked()
    expect(title).to_have_text("Mine")
    dialog.locator("#task-blockers-form").get_by_role("button", name="Save").click()
    expect(dialog.locator("#task-blockers")).to_contain_text("Other")
    expect(title).to_have_text("Renamed while I chose")

    # Held back while open, the refresh runs when the editor is closed without saving.
    editor.locator("summary").click()
    expect(editor).to_have_attribute("open", "")
    rename("Renamed again")
    expect(head).to_have_attribute("data-live-due", "")
    expect(title).to_have_text("Renamed while I chose")
    editor.locator("summary").click()
    expect(title).to_have_text("Renamed again")
    expect(head).not_to_have_attribute("data-live-due", "")
    page.console_errors.check()
    page.close()


ISOLATE = """
from tasks.models import Task
from workspaces.models import Workspace
Workspace.objects.filter(id__in={workspaces!r}).update(isolation="branch")
Task.objects.filter(id={task!r}).update(branch_name="malamar/abc123-long-job", branch_base="main")
"""


def test_cancel_and_delete_say_what_happens_to_the_work_in_every_mode(browser, server, tmp_path):
    folder = tmp_path / "project"
    folder.mkdir()
    modes = {
        "temp": ({}, "What it made so far stays in the task's temporary folder"),
        "static": (
            {"working_directory_mode": "static", "working_directory_path": str(folder)},
            f"What it already changed in {folder} stays there: nothing is undone.",
        ),
        "branch": (
            {"working_directory_mode": "static", "working_directory_path": str(folder)},
            "What it already changed stays in the task's worktree, on branch "
            "malamar/abc123-long-job.",
        ),
        "branch, none yet": (
            {"working_directory_mode": "static", "working_directory_path": str(folder)},
            f"It works in a git worktree of its own: {folder} is not touched.",
        ),
    }
    tasks = {}
    for mode, (fields, _) in modes.items():
        workspace = server.workspace(f"Mode {mode}", **fields)
        tasks[mode] = (workspace, fill_board(server, workspace, working=["Long job"])["working"][0])
    django_script(
        server.data_dir,
        ISOLATE.format(
            workspaces=[tasks[mode][0]["id"] for mode in ("branch", "branch, none yet")],
            task=tasks["branch"][1]["id"],
        ),
    )
    page = new_page(browser)
    confirm = page.locator("#confirm-dialog")
    for mode, (_, says) in modes.items():
        workspace, task = tasks[mode]
        page.goto(f"{server.url}/workspaces/{workspace['id']}/?tab=tasks&task={task['id']}")
        dialog = page.locator("#task-dialog")
        dialog.get_by_role("button", name="Cancel", exact=True).click()
        expect(confirm).to_contain_text("The running agent is stopped")
        expect(confirm.locator("#confirm-text")).to_contain_text(says)
        expect(confirm.get_by_role("button")).to_have_text(["Keep running", "Cancel task"])
        confirm.get_by_role("button", name="Keep running").click()
        expect(confirm).to_be_hidden()
        # Delete says what goes with the task: with a branch, the agents' unmerged work.
        dialog.get_by_role("button", name="Delete", exact=True).click()
        branch = "Its worktree goes too, and its branch malamar/abc123-long-job with every "
        branch += "change not merged into main."
        if mode == "branch":
            expect(confirm.locator("#confirm-text")).to_contain_text(branch)
        else:
            expect(confirm.locator("#confirm-text")).not_to_contain_text("branch")
        confirm.get_by_role("button", name="Cancel").click()
        expect(confirm).to_be_hidden()
    page.goto(f"{server.url}/workspaces/{tasks['branch'][0]['id']}/?tab=tasks")
    page.evaluate("document.getElementById('task-delete-done-dialog').showModal()")
    expect(page.locator("#task-delete-done-dialog")).to_contain_text(
        "its worktree, and its branch unless it was merged"
    )
    page.console_errors.check()
    page.close()


def overlap(a, b) -> bool:
    return not (
        a["x"] + a["width"] <= b["x"]
        or b["x"] + b["width"] <= a["x"]
        or a["y"] + a["height"] <= b["y"]
        or b["y"] + b["height"] <= a["y"]
    )


@pytest.mark.parametrize("viewport", [None, PHONE_390], ids=["desktop", "phone"])
def test_toasts_never_cover_the_task_comment_box(browser, server, viewport):
    """Like the chat's composer: toasts stack above the task popup's comment box and Send."""
    workspace = server.workspace("Toasty")
    task = server.api("POST", f"/workspaces/{workspace['id']}/tasks", {"summary": "Talk"})
    page = new_page(browser, viewport=viewport)
    page.goto(f"{server.url}/workspaces/{workspace['id']}/?tab=tasks&task={task['id']}")
    dialog = page.locator("#task-dialog")
    expect(dialog.get_by_role("button", name="Send comment")).to_be_visible()
    for n in range(1, 4):  # three toasts: the most the stack shows
        page.evaluate(
            "n => window.malamarToast({level: 'info', message: `News ${n}`, detail: 'x'})", n
        )
        expect(page.locator(".toast")).to_have_count(n)
    send = dialog.get_by_role("button", name="Send comment").bounding_box()
    box = dialog.get_by_label("Add a comment").bounding_box()
    for toast in page.locator(".toast").all():
        expect(toast).to_be_in_viewport()
        where = toast.bounding_box()
        assert not overlap(where, send), (where, send)
        assert not overlap(where, box), (where, box)
    page.console_errors.check()
    page.close()


@pytest.mark.parametrize("viewport", [None, PHONE_390], ids=["desktop", "phone"])
def test_toasts_never_cover_a_dialogs_buttons(browser, server, viewport):
    """A form dialog's footer (Create task, Save changes) stays free of toasts too."""
    workspace = server.workspace("Toasty")
    page = new_page(browser, viewport=viewport)
    page.goto(f"{server.url}/workspaces/{workspace['id']}/?tab=tasks")
    page.locator("#new-task").click()
    create = page.locator("#task-create-dialog")
    expect(create.get_by_role("button", name="Create task")).to_be_visible()
    for n in range(1, 4):
        page.evaluate(
            "n => window.malamarToast({level: 'info', message: `News ${n}`, detail: 'x'})", n
        )
        expect(page.locator(".toast")).to_have_count(n)
    footer = create.locator(".dialog__footer").bounding_box()
    for toast in page.locator(".toast").all():
        expect(toast).to_be_in_viewport()
        assert not overlap(toast.bounding_box(), footer), (toast.bounding_box(), footer)
    page.console_errors.check()
    page.close()


CROWDED = """
from django.utils import timezone
from datetime import timedelta
from core.ids import new_id
from tasks.models import Task, TaskComment
from workspaces.models import Workspace

ids = {ids!r}
Workspace.objects.filter(id={workspace!r}).update(isolation="branch")
Task.objects.filter(id=ids["failing"]).update(
    failure_streak=3, retry_not_before=timezone.now() + timedelta(minutes=5))
TaskComment.objects.create(id=new_id(), task_id=ids["failing"], workspace_id={workspace!r},
                           kind="error", content="CLI could not be started: " + "x" * 200)
Task.objects.filter(id=ids["branched"]).update(
    status="in_review", branch_name="malamar/abc123-" + "long-branch-name-" * 4, branch_base="main")
"""


@pytest.mark.parametrize("viewport", [PHONE_390, {"width": 1280, "height": 720}])
def test_a_crowded_popup_head_keeps_its_actions_and_comment_box_in_reach(
    browser, server, tmp_path, viewport
):
    """A long summary with everything the head can show since #16: the error banner, what it
    waits for and what waits for it, the task branch with Merge and Discard."""
    folder = tmp_path / "repo"
    folder.mkdir()
    workspace = server.workspace(
        "Crowded", working_directory_mode="static", working_directory_path=str(folder)
    )
    post = lambda body: server.api(  # noqa: E731
        "POST", f"/workspaces/{workspace['id']}/tasks", body
    )
    blockers = [post({"summary": f"Blocker {n} {LONG_SUMMARY}"[:500]})["id"] for n in range(3)]
    made = {
        "failing": post({"summary": LONG_SUMMARY, "blocked_by": blockers}),
        "branched": post({"summary": LONG_SUMMARY, "blocked_by": blockers}),
    }
    for n in range(3):
        post({"summary": f"Waits {n} {LONG_SUMMARY}"[:500], "blocked_by": [made["failing"]["id"]]})
    django_script(
        server.data_dir,
        CROWDED.format(ids={k: t["id"] for k, t in made.items()}, workspace=workspace["id"]),
    )
    page = new_page(browser, viewport=viewport)
    for key, actions in (
        ("failing", ["Retry now", "Stop retrying", "Delete"]),
        ("branched", ["Move to Done", "Merge into main", "Discard", "Delete"]),
    ):
        page.goto(f"{server.url}/workspaces/{workspace['id']}/?tab=tasks&task={made[key]['id']}")
        dialog = page.locator("#task-dialog")
        expect(dialog.locator("#task-status")).to_be_visible()
        if viewport == PHONE_390:  # a phone's head: one line, the rest in its menu
            dialog.get_by_role("button", name="More actions").click()
        expect(dialog.locator("#task-blockers")).to_be_visible()
        for name in actions:
            expect(dialog.get_by_role("button", name=name, exact=True)).to_be_in_viewport()
        if viewport == PHONE_390:
            page.keyboard.press("Escape")
        expect(dialog.get_by_label("Add a comment")).to_be_in_viewport()
        expect(dialog.locator(".composer__send, #task-review-approve")).to_be_in_viewport()
        no_sideways_scroll(page, f"crowded popup ({key})")
    page.console_errors.check()
    page.close()


def test_a_crowded_group_chat_fits_a_phone(browser, server):
    """A group chat of agents with long names, a long title and long unbroken messages (a
    path, a code line): no sideways pan, the composer and Send on screen."""
    workspace = server.workspace("Talky")
    agents = [
        server.agent(workspace["id"], f"Agent{n}_" + "x" * 60, cli)
        for n, cli in enumerate(("claude", "codex", "gemini", "opencode"))
    ]
    chat = server.api(
        "POST",
        f"/workspaces/{workspace['id']}/chats",
        {"agent_id": agents[0]["id"], "title": "A title " + "y" * 190},
    )
    for agent in agents[1:]:
        server.api("POST", f"/chats/{chat['id']}/participants", {"agent_id": agent["id"]})
    server.api(
        "POST",
        f"/chats/{chat['id']}/messages",
        {"message": f"See {LONG_FILE}\n\n```\n{LONG_LINE.replace(chr(92) + 's', ' ')}\n```"},
    )
    page = new_page(browser, viewport=PHONE_390)
    base = f"{server.url}/workspaces/{workspace['id']}/?tab=chat"
    page.goto(base)
    expect(page.locator(".chat-row")).to_have_count(1)
    no_sideways_scroll(page, "chat list")
    page.goto(f"{base}&chat={chat['id']}")
    dialog = page.locator("#chat-dialog")
    expect(dialog.locator(".chat-msg--user")).to_be_visible()
    no_sideways_scroll(page, "group chat")
    overflow = dialog.evaluate("(el) => el.scrollWidth - el.clientWidth")
    culprits = dialog.evaluate(
        """(dialog) => Array.from(dialog.querySelectorAll('*'))
            .filter((el) => el.getBoundingClientRect().right > dialog.clientWidth + 0.5)
            .filter((el) => !el.parentElement.closest('pre'))
            .slice(0, 6).map((el) => `${el.tagName.toLowerCase()}.${el.className}`)"""
    )
    assert overflow <= 0, f"the chat popup scrolls sideways by {overflow} px: {culprits}"
    # Answering (no worker here): Stop stands where Send was.
    for control in ("#chat-message", "#chat-stop"):
        expect(page.locator(control)).to_be_in_viewport()
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    page.locator("[data-chat-menu] > summary").first.click()
    expect(page.locator("[data-chat-menu][open]")).to_have_count(1)
    no_sideways_scroll(page, "new chat menu")
    page.goto(f"{server.url}/workspaces/{workspace['id']}/?tab=agents")
    expect(page.locator(".agent-row")).to_have_count(4)
    no_sideways_scroll(page, "agents with long names")
    page.console_errors.check()
    page.close()


LONG_HEALTH = """
from datetime import timedelta
from django.utils import timezone
from runner.limits import Limit
from runner.models import CliHealth
from notifications.cli_states import cli_limit_set

word = {long_word!r}
CliHealth.objects.update_or_create(cli_type="claude", defaults=dict(
    status="unhealthy", error="Binary not found: /opt/" + word + "/bin/claude " + word,
    binary_path="/opt/" + word + "/bin/claude", version="2.1.197 " + word,
    checked_at=timezone.now()))
CliHealth.objects.update_or_create(cli_type="codex", defaults=dict(
    status="healthy", answer="OK " + word, binary_path="/usr/bin/codex", checked_at=timezone.now()))
until = timezone.now() + timedelta(hours=2)
cli_limit_set(cli_type="codex", limit=Limit("Rate limit: " + word, until))
"""


def test_settings_with_long_cli_answers_errors_and_limits_fit_a_phone(browser, server):
    django_script(server.data_dir, LONG_HEALTH.format(long_word=LONG_WORD))
    workspace = server.workspace("Phone settings")
    server.agent(workspace["id"], "Builder", "codex")
    page = new_page(browser, viewport=PHONE_390)
    page.goto(f"{server.url}/settings/")
    expect(page.locator("#cli-status-claude [data-cli-error]")).to_be_visible()
    expect(page.locator("#cli-status-codex [data-cli-limited]")).to_be_visible()
    no_sideways_scroll(page, "settings with long CLI errors")
    page.locator("#cli-form-claude").get_by_label("Binary path").fill("/nope/" + LONG_WORD)
    page.locator("#save-claude").click()
    expect(page.locator("#cli-form-claude [aria-invalid=true]")).to_be_visible()
    no_sideways_scroll(page, "settings with a refused binary path")
    page.goto(f"{server.url}/workspaces/{workspace['id']}/?tab=tasks")
    expect(page.locator('[data-banner="cli-limited"]')).to_be_visible()
    no_sideways_scroll(page, "board with a long limit message")
    page.console_errors.check()
    page.close()


def test_workspace_settings_with_a_long_path_and_branch_per_task_fit_a_phone(browser, server):
    workspace = server.workspace("Phone workspace", stall_kill_minutes=15)
    page = new_page(browser, viewport=PHONE_390)
    page.goto(f"{server.url}/workspaces/{workspace['id']}/settings/")
    expect(page.get_by_label("Stop a silent run after (minutes)")).to_have_value("15")
    page.get_by_text("Static directory").click()
    page.get_by_label("Directory path").fill(f"/nowhere/{LONG_WORD}/{LONG_WORD}")
    expect(page.locator("#path-warning-text")).to_be_visible()
    no_sideways_scroll(page, "workspace settings with a path warning")
    page.get_by_label("Isolation").select_option("branch")
    page.get_by_label("Setup command").fill("npm ci --prefix " + LONG_WORD)
    page.get_by_role("button", name="Save settings").click()
    # A folder that does not exist is refused on save (issue 29), its long path included.
    expect(page.get_by_label("Directory path")).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#settings-form")).to_contain_text("does not exist: create it first")
    no_sideways_scroll(page, "workspace settings refused")
    page.console_errors.check()
    page.close()


@pytest.mark.parametrize("viewport", [None, PHONE_390], ids=["desktop", "phone"])
def test_notifications_export_clone_and_import_without_csp_errors(
    browser, server, tmp_path, viewport
):
    """The forms no other browser test posts: notifications, a workspace's export, clone and
    import (API tokens show only with a password set)."""
    workspace = server.workspace("Portable")
    server.agent(workspace["id"], "Builder")
    server.api("POST", f"/workspaces/{workspace['id']}/tasks", {"summary": "Carry me"})
    page = new_page(browser, viewport=viewport)
    page.goto(f"{server.url}/settings/")
    notifications = page.locator("#notification-settings")
    notifications.get_by_label("Warn when a run is silent for (minutes)").fill("20")
    notifications.get_by_role("button", name="Save notifications").click()
    expect(page.locator(".toast").first).to_be_visible()
    expect(notifications.get_by_label("Warn when a run is silent for (minutes)")).to_have_value(
        "20"
    )
    no_sideways_scroll(page, "settings after a save")

    page.goto(f"{server.url}/workspaces/{workspace['id']}/settings/")
    with page.expect_download() as download:
        page.locator("#export-workspace").click()
    export = tmp_path / "export.json"
    download.value.save_as(export)
    page.locator("#clone-title").fill("Portable copy")
    page.locator("#clone-workspace").click()
    expect(page.locator(".toast", has_text="Cloned into “Portable copy”")).to_be_visible()
    no_sideways_scroll(page, "the clone's settings")
    page.goto(f"{server.url}/")
    page.locator("#import-workspace").click()
    page.locator("#import-file").set_input_files(export)
    page.locator("#import-submit").click()
    expect(page.locator(".toast", has_text="Imported “Portable”")).to_be_visible()
    expect(page.locator(".task-card", has_text="Carry me")).to_be_visible()
    no_sideways_scroll(page, "the imported workspace")
    page.goto(f"{server.url}/")
    expect(page.locator(".workspace-card")).to_have_count(3)
    no_sideways_scroll(page, "workspaces after an import")
    page.console_errors.check()
    page.close()


WIDE_COMMENT = f"""Here is the plan for `{LONG_WORD}` and https://example.com/{LONG_WORD}/{LONG_WORD}

| File | Change | Why |
|------|--------|-----|
| {LONG_FILE} | {LONG_WORD} | {LONG_WORD} |

```
{LONG_LINE}
```
"""


def test_wide_comments_scroll_in_their_own_boxes_on_a_phone(browser, server):
    """Agents' comments hold tables, links, inline code and code blocks wider than a phone:
    each scrolls or wraps inside the comment, the popup never scrolls sideways."""
    workspace = server.workspace("Wide")
    task = server.api("POST", f"/workspaces/{workspace['id']}/tasks", {"summary": "Wide"})
    for _ in range(2):
        server.api("POST", f"/tasks/{task['id']}/comments", {"content": WIDE_COMMENT})
    page = new_page(browser, viewport=PHONE_390)
    page.goto(f"{server.url}/workspaces/{workspace['id']}/?tab=tasks&task={task['id']}")
    dialog = page.locator("#task-dialog")
    expect(dialog.locator("#task-comments .comment table")).to_have_count(2)
    no_sideways_scroll(page, "popup with wide comments")
    # A code block's copy button (shown on a touch screen) copies it, and a toast says so.
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    dialog.locator(".comment .code-block__copy").first.click()
    expect(page.locator(".toast", has_text="Copied")).to_be_visible()
    assert page.evaluate("navigator.clipboard.readText()").strip() == LONG_LINE
    for part in ("#task-dialog", ".task-detail__body", "#task-comments"):
        overflow = page.locator(part).evaluate("(el) => el.scrollWidth - el.clientWidth")
        assert overflow <= 0, f"{part} scrolls sideways by {overflow} px"
    expect(dialog.get_by_role("button", name="Send comment")).to_be_in_viewport()
    page.console_errors.check()
    page.close()
