"""The shell in a real browser: theme, phone layout, live toasts, keyboard, console errors."""

import re

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import PHONE, new_page, pages_report
from tests.live import django_script

pytestmark = pytest.mark.browser

# Records the theme when <body> first appears: what the first paint would use.
THEME_AT_FIRST_PAINT = """
new MutationObserver((_, observer) => {
  if (document.body) {
    window.__themeAtBody = document.documentElement.getAttribute("data-theme") || "none";
    observer.disconnect();
  }
}).observe(document, {childList: true, subtree: true});
"""


def test_theme_follows_the_system_and_the_toggle_survives_reload(browser, server):
    page = new_page(browser, color_scheme="dark")
    page.add_init_script(THEME_AT_FIRST_PAINT)
    html = page.locator("html")
    page.goto(server.url)
    expect(html).to_have_attribute("data-theme", "dark")  # follows the system by default

    toggle = page.get_by_role("button", name="Switch to light theme", exact=True)
    toggle.click()
    expect(html).to_have_attribute("data-theme", "light")
    expect(page.get_by_role("button", name="Switch to dark theme", exact=True)).to_be_visible()
    page.reload()
    expect(html).to_have_attribute("data-theme", "light")
    assert page.evaluate("window.__themeAtBody") == "light"  # no flash of the wrong theme
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(255, 255, 255)"

    # The settings page offers System / Light / Dark; "System" forgets the choice.
    page.goto(f"{server.url}/settings/")
    expect(page.get_by_label("Light", exact=True)).to_be_checked()
    page.get_by_label("Dark", exact=True).check()
    expect(html).to_have_attribute("data-theme", "dark")
    page.get_by_label("System", exact=True).check()
    expect(html).to_have_attribute("data-theme", "dark")  # the emulated system is dark
    assert page.evaluate("localStorage.getItem('malamar-theme')") is None
    page.emulate_media(color_scheme="light")
    expect(html).to_have_attribute("data-theme", "light")
    page.console_errors.check()
    page.close()


def seed(server):
    workspace = server.workspace(
        "A workspace with a rather long title to test wrapping on phones",
        description="Instruction " * 40,
    )
    for name in ("Planner", "Implementer", "Reviewer"):
        server.agent(workspace["id"], name)
    return workspace


def test_phone_layout_has_no_horizontal_scroll(browser, server):
    workspace = seed(server)
    page = new_page(browser, viewport=PHONE, is_mobile=True, has_touch=True)
    base = f"{server.url}/workspaces/{workspace['id']}"
    pages = ["/", f"{base}/", f"{base}/?tab=chat", f"{base}/?tab=agents", f"{base}/settings/"]
    for url in [*pages, "/settings/"]:
        page.goto(server.url + url if url.startswith("/") else url)
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= PHONE["width"], f"{url} scrolls sideways ({width}px)"
        assert page.evaluate("getComputedStyle(document.body).fontSize") == "16px"

    page.goto(f"{base}/?tab=agents")
    # Phones reorder with arrows; the drag handle is a desktop affordance.
    expect(page.get_by_role("button", name="Move Reviewer up")).to_be_visible()
    expect(page.locator(".agent-row__grip").first).to_be_hidden()
    page.get_by_role("button", name="Move Reviewer up").tap()
    expect(page.locator(".agent-row__name")).to_have_text(["Planner", "Reviewer", "Implementer"])

    # Dialogs take the whole screen.
    page.locator("#add-agent").tap()
    dialog = page.locator("#agent-dialog")
    expect(dialog).to_be_visible()
    # Measured once its opening animation is over.
    dialog.evaluate("(el) => Promise.all(el.getAnimations().map((a) => a.finished))")
    box = dialog.bounding_box()
    assert [round(box[k]) for k in ("x", "y", "width", "height")] == [0, 0, 375, 812], box
    page.console_errors.check()
    page.close()


def test_live_events_become_toasts_that_link_to_the_item(page, server):
    workspace = server.workspace("Toasts")
    other = server.workspace("Elsewhere")
    task = server.api("POST", f"/workspaces/{workspace['id']}/tasks", {"summary": "Fix the bug"})
    page.goto(f"{server.url}/workspaces/{workspace['id']}/?tab=agents")
    expect(page.locator("body")).to_have_attribute("data-live-state", "open")

    def publish(*events):
        calls = "".join(f"publish({t!r}, {p!r})\n" for t, p in events)
        django_script(server.data_dir, "from core.events import publish\n" + calls)

    base = {"task_id": task["id"], "task_summary": "Fix the bug"}
    publish(
        ("task.error_occurred", {**base, "workspace_id": other["id"], "error_message": "x"}),
        (
            "task.error_occurred",
            {**base, "workspace_id": workspace["id"], "error_message": "CLI exited with code 1"},
        ),
    )
    toast = page.locator(".toast")
    expect(toast).to_have_count(1)  # the other workspace's event was filtered out
    expect(toast).to_have_class("toast toast--error")
    expect(toast).to_contain_text("Error in “Fix the bug”")
    expect(toast).to_contain_text("CLI exited with code 1")
    link = toast.get_by_role("link")
    expect(link).to_have_attribute(
        "href", f"/workspaces/{workspace['id']}/?tab=tasks&task={task['id']}"
    )
    toast.get_by_role("button", name="Dismiss notification").click()
    expect(toast).to_have_count(0)

    review = {"old_status": "in_progress", "new_status": "in_review", "actor_type": "agent"}
    publish(
        *[
            (
                "task.status_changed",
                {**base, **review, "task_summary": f"Task {n}", "workspace_id": workspace["id"]},
            )
            for n in range(4)
        ]
    )
    expect(page.locator(".toast")).to_have_count(3)  # at most three at a time
    expect(page.locator(".toast").last).to_contain_text("Task 3")
    expect(page.locator(".toast").first).to_have_class("toast toast--success")
    page.locator(".toast").first.click()
    expect(page).to_have_url(
        f"{server.url}/workspaces/{workspace['id']}/?tab=tasks&task={task['id']}"
    )


def test_no_error_toast_for_the_task_open_in_its_popup(page, server):
    """The popup shows that task's error itself (banner, system comment): a toast would say it
    twice. Another task's error still toasts."""
    workspace = server.workspace("Errors")
    shown = server.api("POST", f"/workspaces/{workspace['id']}/tasks", {"summary": "Open one"})
    other = server.api("POST", f"/workspaces/{workspace['id']}/tasks", {"summary": "Other one"})
    page.goto(f"{server.url}/workspaces/{workspace['id']}/?tab=tasks&task={shown['id']}")
    expect(page.locator("#task-dialog")).to_be_visible()
    expect(page.locator("body")).to_have_attribute("data-live-state", "open")
    calls = ""
    for task in (shown, other):  # in this order: the second toast proves the first was handled
        payload = {
            "task_id": task["id"],
            "task_summary": task["summary"],
            "workspace_id": workspace["id"],
            "error_message": "CLI exited with code 1",
        }
        calls += f"publish('task.error_occurred', {payload!r})\n"
    django_script(server.data_dir, "from core.events import publish\n" + calls)
    expect(page.locator(".toast", has_text="Error in “Other one”")).to_have_count(1)
    expect(page.locator(".toast", has_text="Open one")).to_have_count(0)
    expect(page.locator(".toast")).to_have_count(1)
    page.console_errors.check()


def test_toasts_disappear_after_five_seconds(page, server):
    page.clock.install()
    page.goto(server.url)
    page.evaluate("window.malamarToast({level: 'info', message: 'Hello'})")
    expect(page.locator(".toast")).to_have_count(1)
    # Without a detail, its line takes no room (not even its margin).
    no_detail = page.locator(".toast .toast__detail")
    assert (
        no_detail.count() == 0 or no_detail.evaluate("p => getComputedStyle(p).display") == "none"
    )
    page.evaluate("window.malamarToast({level: 'info', message: 'Hi', detail: 'there'})")
    expect(page.locator(".toast", has_text="Hi").locator(".toast__detail")).to_have_text("there")
    expect(page.locator(".toast")).to_have_count(2)
    page.clock.run_for(4500)
    expect(page.locator(".toast")).to_have_count(2)
    page.clock.run_for(1000)
    expect(page.locator(".toast")).to_have_count(0)


def test_keyboard_reaches_the_page(page, server):
    workspace = seed(server)
    page.goto(f"{server.url}/workspaces/{workspace['id']}/?tab=agents")
    page.keyboard.press("Tab")
    skip = page.get_by_role("link", name="Skip to content")
    expect(skip).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator("#main")).to_be_focused()
    # Tab order reaches the tabs and every agent action.
    reached = []
    for _ in range(40):
        page.keyboard.press("Tab")
        reached.append(page.evaluate("document.activeElement.getAttribute('aria-label') || ''"))
    assert "Edit Planner" in reached and "Delete Planner" in reached
    assert "Move Implementer up" in reached


def _replaced(page, selector: str):
    """Mark the element `selector` finds now; returns a locator of it that is empty once a
    swap has replaced it."""
    page.locator(selector).evaluate("el => el.setAttribute('data-before-refresh', '')")
    return page.locator(f"{selector}[data-before-refresh]")


def test_a_live_refresh_keeps_the_focus_on_the_control_it_re_renders(page, server):
    """A refresh that replaces the element holding the focus gives it to that element's twin
    in the new content, one without an id too (app.js), not to the fragment's heading: the
    empty Chat tab's "Start a chat" menu, then a chat's row."""
    workspace = server.workspace("Focus")
    server.agent(workspace["id"], "Alpha")
    page.goto(f"{server.url}/workspaces/{workspace['id']}/?tab=chat")
    start = page.locator("#chat-list details[data-chat-menu] summary")
    start.click()
    page.keyboard.press("Escape")
    expect(start).to_be_focused()
    old = _replaced(page, "#chat-list details[data-chat-menu] summary")
    server.agent(workspace["id"], "Beta")  # agents.changed: the list (and its menu) again
    expect(old).to_have_count(0)
    expect(page.locator("#chat-list [role=menuitem]", has_text="Beta")).to_have_count(1)
    expect(start).to_be_focused()

    chat = server.api("POST", f"/workspaces/{workspace['id']}/chats", {"title": "Plans"})
    row = page.locator("#chat-list .chat-row__link")
    expect(row).to_have_count(1)
    row.focus()
    old = _replaced(page, "#chat-list .chat-row__link")
    server.api("PUT", f"/chats/{chat['id']}", {"title": "Better plans"})  # chat.updated
    expect(old).to_have_count(0)
    expect(row).to_contain_text("Better plans")
    expect(row).to_be_focused()
    page.console_errors.check()


def test_a_live_refresh_gives_the_focus_back_without_scrolling_to_it(page, server):
    """The twin gets the focus where the page is: a person who scrolled away from the focused
    row is not taken back to it by the refresh."""
    workspace = server.workspace("Scrolled")
    create = f"/workspaces/{workspace['id']}/chats"
    chats = [server.api("POST", create, {"title": f"Chat {n:02}"}) for n in range(30)]
    page.goto(f"{server.url}/workspaces/{workspace['id']}/?tab=chat")
    rows = page.locator("#chat-list .chat-row__link")
    expect(rows).to_have_count(30)
    rows.first.focus()
    page.evaluate("window.scrollTo(0, document.documentElement.scrollHeight)")
    scrolled = page.evaluate("window.scrollY")
    assert scrolled > 0  # (the list is longer than the window)
    old = _replaced(page, "#chat-list .chat-row:first-child .chat-row__link")
    server.api("PUT", f"/chats/{chats[0]['id']}", {"title": "Renamed"})  # chat.updated
    expect(old).to_have_count(0)
    expect(rows.first).to_be_focused()
    assert page.evaluate("window.scrollY") == scrolled
    page.console_errors.check()


def test_menus_open_one_at_a_time_on_their_first_item_and_close_by_escape_or_outside(page, server):
    """The empty Chat tab's two "new chat" menus (<details data-chat-menu>, app.js)."""
    workspace = server.workspace("Menus")
    server.agent(workspace["id"], "Alpha")
    page.goto(f"{server.url}/workspaces/{workspace['id']}/?tab=chat")
    menus = page.locator("details[data-chat-menu]")
    top, empty, opened = menus.first, menus.last, page.locator("details[data-chat-menu][open]")
    top.locator("summary").click()
    expect(top.get_by_role("menuitem").first).to_be_focused()
    page.keyboard.press("ArrowDown")
    expect(top.get_by_role("menuitem").nth(1)).to_be_focused()

    empty.locator("summary").click()  # the other one closes
    expect(opened).to_have_count(1)
    expect(empty.get_by_role("menuitem").first).to_be_focused()
    page.keyboard.press("Escape")
    expect(opened).to_have_count(0)
    expect(empty.locator("summary")).to_be_focused()

    top.locator("summary").click()
    expect(opened).to_have_count(1)
    page.get_by_role("heading", name="No conversations yet").click()
    expect(opened).to_have_count(0)
    page.console_errors.check()


def test_no_console_errors_on_any_page(browser, server):
    workspace = seed(server)
    base = f"{server.url}/workspaces/{workspace['id']}"
    for theme in ("light", "dark"):
        page = new_page(browser, color_scheme=theme)
        for url in (server.url, f"{base}/", f"{base}/?tab=chat", f"{base}/?tab=agents"):
            page.goto(url)
            expect(page.locator("body")).to_have_attribute("data-live-state", "open")
        page.goto(f"{base}/settings/")
        page.goto(f"{server.url}/settings/")
        page.console_errors.check()
        page.close()


# Resolves once the page's securitypolicyviolation listeners have run (and so reported).
BLOCKED_IMAGE = """() => new Promise((done) => {
  document.addEventListener("securitypolicyviolation", () => setTimeout(done), {once: true});
  document.body.append(Object.assign(new Image(), {src: "https://x.invalid/"}));
})"""


def test_a_failed_tests_report_tells_each_pages_dialogs_and_last_events(browser, page, server):
    """What a failed browser test reports (conftest.pages_report): the page, its focus, each
    dialog's state and what it holds, and the htmx events and dialog calls that led there."""
    workspace = server.workspace("Report")
    page.goto(f"{server.url}/workspaces/{workspace['id']}/?tab=agents")
    page.locator("#add-agent").click()
    expect(page.locator("#agent-dialog").get_by_label("Name")).to_be_focused()
    report = pages_report(browser)
    assert f"/workspaces/{workspace['id']}/?tab=agents (focus: id_name)" in report
    assert 'agent-dialog: open, modal; holds "Add agent' in report
    assert "confirm-dialog: closed" in report
    new_form = f"get /workspaces/{workspace['id']}/agents/new/"
    assert re.search(rf"\n  \d+ htmx:beforeRequest #add-agent {new_form}\n", report)
    assert re.search(rf"\n  \d+ htmx:afterSwap #agent-dialog-body {new_form}\n", report)
    assert re.search(r"\n  \d+ dialog\.showModal #agent-dialog \(closed\)\n", report)
    page.console_errors.check()


def test_a_reused_browser_context_is_as_new_and_still_reports_csp_violations(browser, server):
    """The tests' pages reuse the module's browser contexts (conftest.ContextPool): what one
    test leaves in its context (local storage, cookies, permissions) is gone for the next page,
    two pages open at once never share one, and the next page's CSP violations are its own."""
    first = new_page(browser)
    first.goto(server.url)
    first.evaluate("localStorage.setItem('left', 'behind')")
    first.context.add_cookies([{"name": "left", "value": "behind", "url": server.url}])
    first.context.grant_permissions(["clipboard-read"], origin=server.url)
    beside = new_page(browser)
    assert beside.context is not first.context
    beside.close()
    reused = first.context
    first.close()

    page = new_page(browser)
    assert page.context is reused
    page.goto(server.url)
    assert page.evaluate("localStorage.getItem('left')") is None
    assert "left" not in {cookie["name"] for cookie in page.context.cookies()}
    clipboard = "navigator.permissions.query({name: 'clipboard-read'}).then((s) => s.state)"
    assert page.evaluate(clipboard) != "granted"
    assert page.csp_violations == []
    # An image from elsewhere: blocked, reported by the console and by the page's event.
    page.evaluate(BLOCKED_IMAGE)
    reported = [text for text in page.csp_violations if "x.invalid" in text]
    assert len(reported) == 2, page.csp_violations
    assert any("img-src blocked https://x.invalid/" in text for text in reported)
    assert first.csp_violations == []
    page.close()
