"""The board and the task popup under stress: phone widths, long text, live refreshes that race
the user, and the page script's CSP hygiene."""

import re

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import new_page
from tests.live import django_script, wait_until

pytestmark = pytest.mark.browser

PHONE_390 = {"width": 390, "height": 844}
LONG_WORD = "Refactor" + "x" * 120
# As long as a summary may be (500 characters).
LONG_SUMMARY = " ".join(["Make the checkout page handle every currency we sell in"] * 12)[:500]

# Puts tasks in the states the board shows differently. Straight through the ORM: without a
# worker, a test cannot otherwise hold a task In Progress with an agent at work.
BOARD_STATES = """
from django.utils import timezone
from core.ids import new_id
from runner.models import AgentRun
from tasks.models import QueueStatus, Task, TaskQueueItem

ids = {ids!r}
Task.objects.filter(id__in=ids["in_review"]).update(status="in_review")
Task.objects.filter(id__in=ids["done"]).update(status="done")
Task.objects.filter(id__in=ids["priority"]).update(is_priority=True)
for task in Task.objects.filter(id__in=ids["working"]):
    task.status = "in_progress"
    task.save(update_fields=["status"])
    TaskQueueItem.objects.create(
        task=task, workspace_id=task.workspace_id, status=QueueStatus.IN_PROGRESS
    )
    AgentRun.objects.create(
        id=new_id(), workspace_id=task.workspace_id, task=task, agent_name="Implementer",
        cli_type="claude", started_at=timezone.now(),
        current_action="Bash: pytest -q tests/test_checkout_with_a_very_long_name_indeed.py",
    )
"""


def fill_board(server, workspace, **states) -> dict:
    """Create tasks (kind -> list of summaries) and put them in their states; returns ids."""
    ids = {key: [] for key in ("in_review", "done", "priority", "working")}
    made = {}
    for kind, summaries in states.items():
        for summary in summaries:
            task = server.api("POST", f"/workspaces/{workspace['id']}/tasks", {"summary": summary})
            made.setdefault(kind, []).append(task)
            if kind in ("in_review", "done", "priority_review"):
                for text in ("Plan: three steps", "Please also check the **cart**"):
                    server.api("POST", f"/tasks/{task['id']}/comments", {"content": text})
            if kind in ids:
                ids[kind].append(task["id"])
            if kind == "priority_review":
                ids["priority"].append(task["id"])
                ids["in_review"].append(task["id"])
    django_script(server.data_dir, BOARD_STATES.format(ids=ids))
    return made


def no_sideways_scroll(page, where: str) -> None:
    width = page.evaluate("window.innerWidth")
    scroll = page.evaluate("document.documentElement.scrollWidth")
    if scroll > width:
        culprits = page.evaluate(
            """() => Array.from(document.querySelectorAll('body *'))
                .filter((el) => el.getBoundingClientRect().right > window.innerWidth + 0.5)
                .filter((el) => getComputedStyle(el).position === 'absolute'
                  || !el.parentElement.closest('.kanban, .tabs'))
                .slice(0, 8)
                .map((el) => `${el.tagName.toLowerCase()}.${el.className}`)"""
        )
        pytest.fail(f"{where}: the page scrolls sideways ({scroll} > {width} px): {culprits}")


def test_no_sideways_scroll_at_390px_for_any_card_or_page(browser, server):
    workspace = server.workspace("Phone shop")
    server.agent(workspace["id"], "Implementer")
    made = fill_board(
        server,
        workspace,
        todo=["Plain todo", LONG_WORD],
        priority=["A priority todo"],
        working=[LONG_SUMMARY],
        in_review=["Reviewed with comments"],
        priority_review=["Priority and reviewed"],
        done=["Done with comments", LONG_WORD + " done"],
    )
    page = new_page(browser, viewport=PHONE_390)
    base = f"{server.url}/workspaces/{workspace['id']}/"
    page.goto(f"{base}?tab=tasks")
    expect(page.locator("#col-in_review .badge--count")).to_have_count(2)
    expect(page.locator("#col-done .badge--count")).to_have_count(2)
    expect(page.locator("#col-in_progress .task-card.is-working")).to_have_count(1)
    expect(page.locator("#col-todo .badge--priority")).to_have_count(1)
    no_sideways_scroll(page, "board")

    # Swiping the board to its last column does not move the page either.
    page.locator("#col-done").scroll_into_view_if_needed()
    no_sideways_scroll(page, "board swiped to Done")
    page.locator("#new-task").click()
    expect(page.locator("#task-create-dialog")).to_be_visible()
    no_sideways_scroll(page, "create dialog")

    working = made["working"][0]["id"]
    for query, ready, where in [
        (f"?tab=tasks&task={working}", "#task-dialog #task-status", "popup of a working task"),
        (f"?tab=tasks&task={made['done'][1]['id']}", "#task-dialog #task-status", "done popup"),
        ("?tab=agents", "#agents-panel", "agents tab"),
        ("?tab=chat", "#tab-chat[aria-current=page]", "chat tab"),
        ("settings/", "#settings-form", "workspace settings"),
    ]:
        page.goto(base + query)
        expect(page.locator(ready).first).to_be_attached()
        no_sideways_scroll(page, where)
    for path, ready, where in [
        ("/", ".workspace-card", "workspaces"),
        ("/settings/", "h1", "settings"),
    ]:
        page.goto(server.url + path)
        expect(page.locator(ready).first).to_be_visible()
        no_sideways_scroll(page, where)
    page.console_errors.check()
    page.close()


def test_a_live_refresh_never_replaces_an_open_editor(browser, server):
    """A refresh due while the description's editor is open waits for it; one already on its
    way when the editor opened lands and is not swapped in; either way it runs once the person
    leaves the editor (live.js)."""
    workspace = server.workspace("Racy")
    task = server.api(
        "POST",
        f"/workspaces/{workspace['id']}/tasks",
        {"summary": "Race me", "description": "Old words"},
    )
    page = new_page(browser)
    page.goto(f"{server.url}/workspaces/{workspace['id']}/?tab=tasks&task={task['id']}")
    expect(page.locator("body")).to_have_attribute("data-live-state", "open")
    dialog = page.locator("#task-dialog")
    section = dialog.locator("#task-description")
    expect(section.locator(".task-description__body")).to_have_text("Old words")
    dialog.locator("#task-description-edit").click()
    editor = dialog.locator("#task_description_description")
    editor.fill("New words typed meanwhile")

    # Changed elsewhere: the head shows it at once, the description's refresh waits.
    server.api("PUT", f"/tasks/{task['id']}", {"summary": "Renamed", "description": "Theirs"})
    expect(dialog.locator("#task-dialog-title")).to_have_text("Renamed")
    expect(section).to_have_attribute("data-live-due", "")
    expect(editor).to_have_value("New words typed meanwhile")

    # A refresh sent before the editor opened: its answer lands after, and is dropped.
    page.evaluate(
        """() => document.addEventListener('htmx:afterRequest', (event) => {
            if (event.detail.elt.id !== 'task-description') return;
            const answers = Number(document.body.dataset.refreshAnswers || 0);
            document.body.dataset.refreshAnswers = answers + 1;
        })"""
    )
    page.evaluate("window.htmx.trigger('#task-description', 'live')")
    expect(page.locator("body")).to_have_attribute("data-refresh-answers", "1")
    expect(editor).to_be_attached()
    expect(editor).to_have_value("New words typed meanwhile")

    # Leaving the editor runs the refresh that waited; saving keeps the person's words.
    editor.press("Escape")
    expect(section.locator(".task-description__body")).to_have_text("Theirs")
    expect(section).not_to_have_attribute("data-live-due", "")
    dialog.locator("#task-description-edit").click()
    editor.fill("Mine after all")
    dialog.get_by_role("button", name="Save").click()
    expect(section.locator(".task-description__body")).to_have_text("Mine after all")
    page.console_errors.check()
    page.close()


def test_the_popup_refreshes_on_its_own_tasks_events_only(browser, server):
    """data-live-task: the open popup's parts refresh on their task's events, not on another
    task's (which refresh the board, in the same batch as any popup part would be)."""
    workspace = server.workspace("Ids")
    mine = server.api("POST", f"/workspaces/{workspace['id']}/tasks", {"summary": "Mine"})
    other = server.api("POST", f"/workspaces/{workspace['id']}/tasks", {"summary": "Other"})
    page = new_page(browser)
    page.goto(f"{server.url}/workspaces/{workspace['id']}/?tab=tasks&task={mine['id']}")
    expect(page.locator("body")).to_have_attribute("data-live-state", "open")
    dialog = page.locator("#task-dialog")
    expect(dialog.locator("#task-dialog-title")).to_have_text("Mine")
    page.evaluate(
        """() => document.addEventListener('htmx:beforeRequest', (event) => {
            const id = event.detail.elt.id;
            if (!id.startsWith('task-')) return;
            document.body.dataset.refreshed = `${document.body.dataset.refreshed || ''} ${id}`;
        })"""
    )
    server.api("PUT", f"/tasks/{other['id']}", {"summary": "Other, renamed"})
    expect(page.locator(f"#task-card-{other['id']}")).to_contain_text("Other, renamed")
    assert page.evaluate("document.body.dataset.refreshed").split() == ["task-board"]
    server.api("PUT", f"/tasks/{mine['id']}", {"summary": "Mine, renamed"})
    expect(dialog.locator("#task-dialog-title")).to_have_text("Mine, renamed")
    expect(page.locator(f"#task-card-{mine['id']}")).to_contain_text("Mine, renamed")
    page.console_errors.check()
    page.close()


def test_a_popup_whose_item_is_deleted_elsewhere_closes_saying_so(browser, server):
    """Its parts refresh on the delete event, the popup view finds the item gone
    (core.htmx.gone) and the popup closes with a toast; the board and the list follow."""
    workspace = server.workspace("Gone")
    task = server.api("POST", f"/workspaces/{workspace['id']}/tasks", {"summary": "Doomed"})
    chat = server.api("POST", f"/workspaces/{workspace['id']}/chats", {})
    page = new_page(browser)
    base = f"{server.url}/workspaces/{workspace['id']}/"
    for url, dialog, delete, message in [
        (f"{base}?tab=tasks&task={task['id']}", "#task-dialog", f"/tasks/{task['id']}", "task"),
        (f"{base}?tab=chat&chat={chat['id']}", "#chat-dialog", f"/chats/{chat['id']}", "chat"),
    ]:
        page.goto(url)
        expect(page.locator("body")).to_have_attribute("data-live-state", "open")
        expect(page.locator(dialog)).to_be_visible()
        server.api("DELETE", delete)
        expect(page.locator(dialog)).to_be_hidden()
        expect(page.locator(".toast", has_text=f"This {message} was deleted")).to_be_visible()
    expect(page.locator(".chat-row")).to_have_count(0)
    page.console_errors.check()
    page.close()


def resize_by_hand(page, textarea) -> None:
    """Drag the textarea's resize handle, as a person does (the browser then gives it an
    inline style, which later swaps must not try to copy: CSP forbids style attributes)."""
    textarea.scroll_into_view_if_needed()
    box = textarea.bounding_box()
    page.mouse.move(box["x"] + box["width"] - 3, box["y"] + box["height"] - 3)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] - 3, box["y"] + box["height"] + 40, steps=4)
    page.mouse.up()
    expect(textarea).to_have_attribute("style", re.compile(r"height"))


def test_the_main_pages_and_actions_run_without_a_csp_violation(browser, server):
    workspace = server.workspace("Strict")
    server.agent(workspace["id"], "Planner")
    task = server.api(
        "POST", f"/workspaces/{workspace['id']}/tasks", {"summary": "Watch the policy"}
    )
    page = new_page(browser)
    base = f"{server.url}/workspaces/{workspace['id']}/"
    page.goto(f"{base}?tab=tasks")
    expect(page.locator("body")).to_have_attribute("data-live-state", "open")

    # Create a task, once refused (the form comes back with its error).
    page.locator("#new-task").click()
    create = page.locator("#task-create-dialog")
    resize_by_hand(page, create.get_by_label("Description"))
    create.get_by_role("button", name="Create task").click()
    expect(create.locator("#task_new_summary_error")).to_contain_text("Summary is required")
    create.get_by_label("Summary").fill("A second task")
    create.get_by_role("button", name="Create task").click()
    expect(create).to_be_hidden()
    expect(page.locator("#col-todo .task-card", has_text="A second task")).to_be_visible()

    # The popup: edit the summary and the description, comment.
    page.locator(f"#task-card-{task['id']} a").click()
    dialog = page.locator("#task-dialog")
    expect(dialog.locator("#task-dialog-title")).to_have_text("Watch the policy")
    dialog.locator("#task-summary-edit").click()
    expect(dialog.locator("#task_summary_summary")).to_be_focused()
    dialog.locator("#task_summary_summary").fill("Watch the policy closely")
    dialog.get_by_role("button", name="Save").click()
    expect(dialog.locator("#task-dialog-title")).to_have_text("Watch the policy closely")
    dialog.locator("#task-description-edit").click()
    description = dialog.locator("#task_description_description")
    resize_by_hand(page, description)
    description.fill("No **inline** styles")
    dialog.get_by_role("button", name="Save").click()
    expect(dialog.locator(".task-description__body strong")).to_have_text("inline")
    box = dialog.get_by_label("Add a comment")
    box.fill("Looks right")
    dialog.get_by_role("button", name="Send comment").click()
    mine = dialog.locator("#task-comments .comment--user[data-comment-id]")
    expect(mine).to_have_count(1)
    expect(dialog.locator("#task-comments [data-pending]")).to_have_count(0)
    expect(mine.locator(".comment__body")).to_have_text("Looks right")
    dialog.get_by_role("tab", name="Activity").click()
    expect(dialog.locator("#task-log")).to_contain_text("User commented")
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()

    # Agents and chat tabs.
    page.locator("#tab-agents").click()
    expect(page.get_by_role("button", name="Edit Planner")).to_be_visible()
    page.get_by_role("button", name="Edit Planner").click()
    agent = page.locator("#agent-dialog")
    resize_by_hand(page, agent.get_by_label("Instruction"))
    agent.get_by_label("Name").fill("")
    agent.get_by_role("button", name="Save changes").click()
    expect(agent.get_by_label("Name")).to_have_attribute("aria-invalid", "true")
    agent.get_by_label("Name").fill("Planner")
    agent.get_by_role("button", name="Save changes").click()
    expect(agent).to_be_hidden()
    page.locator("#tab-chat").click()
    expect(page.locator("#tab-chat")).to_have_attribute("aria-current", "page")

    # Workspace settings: a save, and a refused save (the form is swapped back in).
    page.goto(f"{base}settings/")
    resize_by_hand(page, page.get_by_label("Instruction"))
    page.get_by_role("button", name="Save settings").click()
    expect(page.locator(".toast")).to_contain_text("Settings saved")
    page.get_by_label("Title").fill("")
    page.get_by_role("button", name="Save settings").click()
    expect(page.locator("#id_title_error")).to_have_text("Title is required")

    page.goto(f"{server.url}/settings/")
    expect(page.get_by_role("heading", level=1)).to_be_visible()
    page.csp_violations.check()
    page.console_errors.check()
    page.close()


@pytest.mark.parametrize("viewport", [PHONE_390, {"width": 1280, "height": 800}])
def test_a_very_long_summary_keeps_the_popup_actions_and_comment_box_in_reach(
    browser, server, viewport
):
    workspace = server.workspace("Wordy")
    task = server.api("POST", f"/workspaces/{workspace['id']}/tasks", {"summary": LONG_SUMMARY})
    django_script(
        server.data_dir,
        BOARD_STATES.format(
            ids={"in_review": [task["id"]], "done": [], "priority": [], "working": []}
        ),
    )
    page = new_page(browser, viewport=viewport)
    page.goto(f"{server.url}/workspaces/{workspace['id']}/?tab=tasks&task={task['id']}")
    dialog = page.locator("#task-dialog")
    expect(dialog.locator("#task-status")).to_have_text("In Review")
    expect(dialog.get_by_role("button", name="Move to Done", exact=True)).to_be_in_viewport()
    if viewport == PHONE_390:  # the rest of the actions sit in the head's menu
        dialog.get_by_role("button", name="More actions").click()
    for name in ("Move to Todo", "Delete"):
        expect(dialog.get_by_role("button", name=name, exact=True)).to_be_in_viewport()
    if viewport == PHONE_390:
        page.keyboard.press("Escape")
    expect(dialog.get_by_label("Add a comment")).to_be_in_viewport()
    expect(dialog.get_by_role("button", name="Approve")).to_be_in_viewport()
    # The whole summary can still be read: its own box scrolls (asked until the popup has
    # settled: a live refresh of the popup may swap the title in while we measure).
    title = dialog.locator("#task-dialog-title")
    expect(title).to_have_css("overflow-y", "auto")
    wait_until(
        lambda: title.evaluate("(el) => el.scrollHeight > el.clientHeight"),
        timeout=30,
        what="the summary box to scroll",
    )
    page.console_errors.check()
    page.close()


def test_phone_chips_jump_to_a_column_and_follow_its_count(browser, server):
    workspace = server.workspace("Jumpy")
    made = fill_board(
        server, workspace, todo=["One"], in_review=["Two", "Three"], done=["Four", "Six"]
    )
    page = new_page(browser, viewport=PHONE_390)
    page.goto(f"{server.url}/workspaces/{workspace['id']}/?tab=tasks")
    expect(page.locator("body")).to_have_attribute("data-live-state", "open")
    jump = page.get_by_role("navigation", name="Jump to a column")
    chips = jump.get_by_role("link")
    expect(chips).to_have_text(
        [
            re.compile(rf"^\s*{label}\s+{n}\s*$")
            for label, n in [("Todo", 1), ("In Progress", 0), ("In Review", 2), ("Done", 2)]
        ]
    )
    expect(page.locator("#col-done")).not_to_be_in_viewport()

    jump.get_by_role("link", name=re.compile("^Done")).click()
    expect(page.locator("#col-done")).to_be_in_viewport(ratio=0.95)
    expect(page.locator("#col-done-title")).to_be_focused()
    expect(jump.get_by_role("link", name=re.compile("^Done"))).to_have_attribute(
        "aria-current", "true"
    )
    expect(jump.locator("[aria-current]")).to_have_count(1)
    no_sideways_scroll(page, "board after a jump")

    # A task deleted elsewhere refreshes the whole board: it stays on the column in view.
    server.api("DELETE", f"/tasks/{made['done'][0]['id']}")
    expect(page.locator("#col-done .task-card")).to_have_count(1)
    expect(jump.get_by_role("link", name=re.compile("^Done"))).to_contain_text("1")
    expect(page.locator("#col-done")).to_be_in_viewport(ratio=0.95)

    # A task created elsewhere: the Todo column refreshes live, and its chip follows.
    server.api("POST", f"/workspaces/{workspace['id']}/tasks", {"summary": "Five"})
    expect(page.locator("#col-todo .task-card")).to_have_count(2)
    expect(jump.get_by_role("link", name="Todo, 2 tasks")).to_contain_text("2")

    jump.get_by_role("link", name=re.compile("^Todo")).click()
    expect(page.locator("#col-todo")).to_be_in_viewport(ratio=0.95)
    expect(page.locator("#col-done")).not_to_be_in_viewport()
    page.console_errors.check()
    page.close()

    # Desktop: the four columns are side by side, no chips.
    desktop = new_page(browser)
    desktop.goto(f"{server.url}/workspaces/{workspace['id']}/?tab=tasks")
    expect(desktop.locator("#col-done")).to_be_in_viewport()
    expect(desktop.get_by_role("navigation", name="Jump to a column")).to_be_hidden()
    desktop.console_errors.check()
    desktop.close()


def test_cancel_asks_with_keep_running_and_says_what_is_kept(browser, server):
    workspace = server.workspace("Careful")
    made = fill_board(server, workspace, working=["Long job"])
    task = made["working"][0]
    page = new_page(browser)
    page.goto(f"{server.url}/workspaces/{workspace['id']}/?tab=tasks&task={task['id']}")
    dialog = page.locator("#task-dialog")
    expect(dialog.locator("#task-status")).to_have_text("In Progress")
    confirm = page.locator("#confirm-dialog")

    dialog.get_by_role("button", name="Cancel", exact=True).click()
    expect(confirm).to_contain_text("Cancel this task?")
    expect(confirm).to_contain_text("stays in the task's temporary folder")
    expect(confirm.get_by_role("button")).to_have_text(["Keep running", "Cancel task"])
    confirm.get_by_role("button", name="Keep running").click()
    expect(confirm).to_be_hidden()
    expect(dialog.locator("#task-status")).to_have_text("In Progress")

    # Other confirmations keep their plain "Cancel".
    dialog.get_by_role("button", name="Delete", exact=True).click()
    expect(confirm.get_by_role("button")).to_have_text(["Cancel", "Delete"])
    confirm.get_by_role("button", name="Cancel").click()
    expect(confirm).to_be_hidden()
    expect(dialog.locator("#task-dialog-title")).to_have_text("Long job")
    page.console_errors.check()
    page.close()


def test_keyboard_hints_show_with_a_keyboard_and_hide_on_touch_screens(browser, server):
    workspace = server.workspace("Hints")
    task = server.api("POST", f"/workspaces/{workspace['id']}/tasks", {"summary": "Hint me"})
    url = f"{server.url}/workspaces/{workspace['id']}/?tab=tasks&task={task['id']}"
    desktop = new_page(browser)
    phone = new_page(browser, viewport=PHONE_390, has_touch=True, is_mobile=True)
    for page, shown in ((desktop, True), (phone, False)):
        page.goto(url)
        dialog = page.locator("#task-dialog")
        expect(dialog.get_by_label("Add a comment")).to_be_visible()
        dialog.locator("#task-description-edit").click()
        expect(dialog.locator("#task_description_description")).to_be_visible()
        hints = dialog.locator(".kbd-hint")
        expect(hints).to_have_count(2)
        expect(hints).to_have_text(["Ctrl+Enter to save, Esc to cancel", "Ctrl+Enter to send"])
        for hint in hints.all():
            if shown:
                expect(hint).to_be_visible()
            else:
                expect(hint).to_be_hidden()
        page.console_errors.check()
        page.close()


def test_an_event_committed_before_the_stream_connects_still_reaches_the_page(browser, server):
    """The page's stream resumes from where it stood at render time: a change committed
    between the render and the connection is replayed, not missed."""
    workspace = server.workspace("Late stream")
    task = server.api(
        "POST", f"/workspaces/{workspace['id']}/tasks", {"summary": "Watch", "description": "x"}
    )
    page = new_page(browser)
    held = []
    page.route("**/api/events**", lambda route: held.append(route))
    page.goto(f"{server.url}/workspaces/{workspace['id']}/?tab=tasks&task={task['id']}")
    dialog = page.locator("#task-dialog")
    expect(dialog.locator(".task-description__body")).to_have_text("x")
    expect(page.locator("body")).not_to_have_attribute("data-live-state", "open")
    # The stream waits (its request may come after the popup shows; Playwright hands it to
    # the route during one of its own calls, hence the evaluate).
    wait_until(lambda: page.evaluate("true") and held, timeout=30, what="the stream's request")
    page.evaluate(
        """() => document.body.addEventListener("malamar:task.comment_added",
             () => { document.body.dataset.commentEvent = "seen"; })"""
    )
    server.api("POST", f"/tasks/{task['id']}/comments", {"content": "While you connected"})
    page.unroute("**/api/events**")
    for route in held:
        route.fallback()
    expect(page.locator("body")).to_have_attribute("data-live-state", "open")
    expect(page.locator("body")).to_have_attribute("data-comment-event", "seen")
    expect(dialog.locator("#task-comments .comment")).to_contain_text("While you connected")
    page.close()


def test_a_long_comment_shown_whole_stays_so_over_a_live_refresh(browser, server):
    workspace = server.workspace("Logs")
    task = server.api(
        "POST", f"/workspaces/{workspace['id']}/tasks", {"summary": "Read", "description": "x"}
    )
    log = "\n\n".join(f"Line {n}: " + "output " * 20 for n in range(40))  # over 3,000 characters
    server.api("POST", f"/tasks/{task['id']}/comments", {"content": log})
    page = new_page(browser)
    page.goto(f"{server.url}/workspaces/{workspace['id']}/?tab=tasks&task={task['id']}")
    expect(page.locator("body")).to_have_attribute("data-live-state", "open")
    more = page.locator("#task-comments .comment__more")
    more.get_by_text("Show all").click()
    expect(more).to_have_attribute("open", "")
    server.api("POST", f"/tasks/{task['id']}/comments", {"content": "A short one"})
    expect(page.locator("#task-comments .comment", has_text="A short one")).to_have_count(1)
    expect(more).to_have_attribute("open", "")  # (hx-preserve: the refresh kept it)
    expect(more.get_by_text("Show less")).to_be_visible()
    page.console_errors.check()
    page.close()


def test_an_error_left_in_a_popup_does_not_take_the_focus_of_every_refresh(browser, server):
    """The field an answer marks invalid takes the focus once, when that answer lands; a later
    refresh of another part of the popup leaves the focus where the person put it."""
    workspace = server.workspace("Refusals")
    task = server.api(
        "POST", f"/workspaces/{workspace['id']}/tasks", {"summary": "Refuse", "description": "x"}
    )
    page = new_page(browser)
    page.goto(f"{server.url}/workspaces/{workspace['id']}/?tab=tasks&task={task['id']}")
    expect(page.locator("body")).to_have_attribute("data-live-state", "open")
    dialog = page.locator("#task-dialog")
    dialog.get_by_role("button", name="Send comment").click()  # empty: refused
    field = dialog.get_by_label("Add a comment")
    expect(field).to_have_attribute("aria-invalid", "true")
    expect(field).to_be_focused()
    tab = dialog.get_by_role("tab", name="Activity")
    tab.focus()
    page.evaluate(
        """() => new Promise((settled) => {
            document.addEventListener("htmx:afterSettle",
                (event) => event.detail.target.id === "task-head" && settled());
            window.htmx.trigger("#task-head", "live");
        })"""
    )
    expect(tab).to_be_focused()
    page.console_errors.check()
    page.close()


def test_a_column_shown_whole_stays_so_over_a_live_refresh_of_the_board(browser, server):
    workspace = server.workspace("Whole")
    server.api("POST", f"/workspaces/{workspace['id']}/tasks", {"summary": "One"})
    page = new_page(browser)
    page.goto(f"{server.url}/workspaces/{workspace['id']}/?tab=tasks&all=todo")
    expect(page.locator("body")).to_have_attribute("data-live-state", "open")
    expect(page.locator("#col-todo[data-show-all]")).to_have_count(1)
    page.evaluate(
        """() => new Promise((settled) => {
            document.addEventListener("htmx:afterSettle",
                (event) => event.detail.target.id === "task-board" && settled());
            window.htmx.trigger("#task-board", "live");
        })"""
    )
    expect(page.locator("#col-todo[data-show-all]")).to_have_count(1)  # (its [name=all] sent)
    page.console_errors.check()
    page.close()


def test_a_click_on_a_card_is_not_lost_to_a_live_refresh(browser, server):
    """A refresh of the board between the press on a card and its release took the card away
    under the pointer, and the click with it (seen in CI: the popup never opened). The refresh
    waits for the release, then runs (live.js)."""
    workspace = server.workspace("Pressed")
    task = server.api("POST", f"/workspaces/{workspace['id']}/tasks", {"summary": "Press me"})
    page = new_page(browser)
    page.goto(f"{server.url}/workspaces/{workspace['id']}/?tab=tasks")
    expect(page.locator("body")).to_have_attribute("data-live-state", "open")
    board = page.locator("#task-board")
    link = board.locator(f"#task-link-{task['id']}")
    box = link.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.down()
    server.api("PUT", f"/tasks/{task['id']}", {"summary": "Pressed and renamed"})
    expect(board).to_have_attribute("data-live-due", "")
    page.mouse.up()
    expect(page.locator("#task-dialog")).to_be_visible()
    expect(page.locator("#task-dialog-title")).to_have_text("Pressed and renamed")
    expect(board).not_to_have_attribute("data-live-due", "")
    expect(link).to_contain_text("Pressed and renamed")
    page.console_errors.check()
    page.close()
