"""The Chat tab in a real browser, against a real server and worker with the fake CLIs.

Chats with Malamar (an action that creates an agent), renaming, agent and CLI switches,
uploads, stopping an answer, a created task's toast, a group chat, and a phone-width pass.
"""

import re

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import PHONE, new_page

pytestmark = pytest.mark.browser

REPLY_TIMEOUT = 30_000  # a fake CLI run: server → worker → CLI → worker → event → page


def chat_tab(page, stack, workspace, query: str = ""):
    page.goto(f"{stack.server.url}/workspaces/{workspace['id']}/?tab=chat{query}")
    expect(page.locator("body")).to_have_attribute("data-live-state", "open")


def start_chat(page, name: str):
    page.locator("#new-chat").click()
    page.get_by_role("menuitem", name=re.compile(rf"^{name}")).click()
    expect(page.locator("#chat-dialog")).to_be_visible()
    expect(page).to_have_url(re.compile(r"[?&]chat=[\w-]+"))


def send(page, text: str):
    box = page.locator("#chat-message")
    box.fill(text)
    box.press("Enter")


def agent_messages(page):
    return page.locator("#chat-dialog .chat-msg--agent")


def api_chat(stack, workspace, agent_id=None) -> dict:
    body = {"agent_id": agent_id} if agent_id else {}
    return stack.api("POST", f"/workspaces/{workspace['id']}/chats", body, expect=201)


def test_chat_with_malamar_creates_an_agent(browser, stack):
    page = new_page(browser)
    workspace = stack.workspace("Team")
    chat_tab(page, stack, workspace)
    expect(page.get_by_text("No conversations yet")).to_be_visible()

    # A chat started elsewhere appears live.
    api_chat(stack, workspace)
    expect(page.locator(".chat-row")).to_have_count(1)
    expect(page.locator(".chat-row").first).to_contain_text("Untitled chat")

    start_chat(page, "Malamar")
    dialog = page.locator("#chat-dialog")
    expect(dialog.locator("#chat-message")).to_be_focused()
    send(
        page,
        "Please add a reviewer\n"
        "@fake reply I added **Reviewer** to the team.\n"
        '@fake action {"type": "create_agent", "name": "Reviewer", '
        '"instruction": "Review the work.", "cli_type": "claude"}',
    )
    # The message shows at once, the agent's answer arrives live, rendered as markdown.
    expect(dialog.locator(".chat-msg--user")).to_contain_text("Please add a reviewer")
    reply = agent_messages(page)
    expect(reply).to_have_count(1, timeout=REPLY_TIMEOUT)
    expect(reply.locator("strong")).to_have_text("Reviewer")
    expect(reply.locator(".chat-msg__author")).to_contain_text("Malamar")
    card = reply.locator(".chat-action[data-action-type=create_agent]")
    expect(card).to_contain_text("Created agent “Reviewer”")
    expect(page.locator("#chat-send")).to_be_visible()
    expect(page.locator("#chat-stop")).to_be_hidden()
    expect(dialog.locator(".chat-msg--user.is-pending")).to_have_count(0)  # confirmed

    # Reload keeps the open chat; closing it drops it from the URL.
    page.reload()
    expect(dialog).to_be_visible()
    expect(agent_messages(page)).to_have_count(1)
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    expect(page).not_to_have_url(re.compile(r"[?&]chat="))  # the URL follows the close
    # The list moved the active chat to the top with its latest message.
    expect(page.locator(".chat-row").first).to_contain_text("I added Reviewer to the team.")

    page.locator("#tab-agents").click()
    expect(page.locator(".agent-row__name")).to_have_text(["Reviewer"])
    page.console_errors.check()


def test_rename_switch_agent_and_cli_upload_and_delete(browser, stack):
    page = new_page(browser)
    workspace = stack.workspace("Crew", agents=[("Planner", "claude"), ("Coder", "codex")])
    agents = stack.api("GET", f"/workspaces/{workspace['id']}/agents")["agents"]
    coder = next(a for a in agents if a["name"] == "Coder")

    # A link elsewhere starts a chat with Malamar: nothing exists until the first message.
    chat_tab(page, stack, workspace, "&start=malamar")
    dialog = page.locator("#chat-dialog")
    expect(dialog).to_contain_text("New chat")
    assert stack.api("GET", f"/workspaces/{workspace['id']}/chats")["chats"] == []
    dialog.get_by_label("Chat with").select_option(label="Planner")
    send(page, "Hello planner\n@fake reply Hi from the planner")
    expect(page).to_have_url(re.compile(r"[?&]chat=[\w-]+"))
    expect(agent_messages(page)).to_contain_text("Hi from the planner", timeout=REPLY_TIMEOUT)
    expect(agent_messages(page).locator(".chat-msg__author")).to_contain_text("Planner")

    # Rename inline.
    page.locator("#chat-title-edit").click()
    title = page.locator("#chat-title-input")
    expect(title).to_be_focused()
    title.fill("")
    page.get_by_role("button", name="Save title").click()
    expect(page.locator("#chat-title-input_error")).to_contain_text("Title is required")
    title.fill("Kickoff")
    page.get_by_role("button", name="Save title").click()
    expect(page.locator("#chat-dialog-title")).to_have_text("Kickoff")
    expect(page.locator(".chat-row").first).to_contain_text("Kickoff")

    # Switch agent (the CLI follows it), then override the CLI; both survive a reload.
    page.locator("#chat-agent").select_option(label="Coder")
    expect(dialog.locator(".chat-msg--info")).to_contain_text("Switched from Planner to Coder")
    expect(page.locator("#chat-cli option:checked")).to_have_text("Default · Codex CLI")
    # The select changes at once; wait for the save's answer before reloading.
    with page.expect_response(lambda r: r.url.endswith("/cli/")) as saved:
        page.locator("#chat-cli").select_option("gemini")
    assert saved.value.ok
    expect(page.locator("#chat-cli option:checked")).to_have_text(re.compile("^Gemini CLI"))
    page.reload()
    expect(page.locator("#chat-agent")).to_have_value(coder["id"])
    expect(page.locator("#chat-cli")).to_have_value("gemini")

    # Upload two files: one system message each.
    page.locator("#chat-files").set_input_files(
        [
            {"name": "notes.txt", "mimeType": "text/plain", "buffer": b"some notes"},
            {"name": "data.csv", "mimeType": "text/csv", "buffer": b"a,b\n1,2\n"},
        ]
    )
    uploads = dialog.locator(".chat-msg--upload")
    expect(uploads).to_have_count(2)
    expect(uploads.first).to_contain_text("notes.txt")
    expect(uploads.last).to_contain_text("data.csv")
    expect(page.locator(".toast", has_text="Uploaded 2 files")).to_be_visible()

    # Search the list by title.
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    api_chat(stack, workspace)
    expect(page.locator(".chat-row")).to_have_count(2)
    page.locator("#chat-search").fill("kick")
    expect(page.locator(".chat-row")).to_have_count(1)
    page.locator("#chat-search").fill("nothing like it")
    expect(page.get_by_text("No chats match")).to_be_visible()
    page.locator("#chat-search").fill("")
    expect(page.locator(".chat-row")).to_have_count(2)

    # Delete with a simple confirmation.
    page.locator(".chat-row", has_text="Kickoff").locator("a").click()
    expect(dialog).to_be_visible()
    page.locator("#chat-delete").click()
    confirm = page.locator("#confirm-dialog")
    expect(confirm).to_contain_text("Delete “Kickoff”?")
    confirm.get_by_role("button", name="Delete").click()
    expect(dialog).to_be_hidden()
    expect(page.locator(".chat-row")).to_have_count(1)
    expect(page.locator(".toast", has_text="Deleted “Kickoff”")).to_be_visible()
    expect(page.locator(".toast", has_text="This chat was deleted")).to_have_count(0)
    page.console_errors.check()


def test_stop_a_reply(browser, stack):
    page = new_page(browser)
    workspace = stack.workspace("Stop")
    chat = api_chat(stack, workspace)
    chat_tab(page, stack, workspace, f"&chat={chat['id']}")
    send(page, "Think hard\n@fake sleep 30\n@fake reply Too late")
    stop = page.locator("#chat-stop")
    expect(stop).to_be_visible()
    expect(page.locator("#chat-send")).to_be_hidden()
    expect(page.locator("[data-typing=Malamar]")).to_be_visible()
    stop.click()
    expect(page.locator(".chat-msg--info")).to_contain_text("Stopped by user")
    expect(page.locator("#chat-send")).to_be_visible(timeout=REPLY_TIMEOUT)
    expect(stop).to_be_hidden()
    expect(page.locator("[data-typing]")).to_have_count(0)
    assert agent_messages(page).count() == 0
    # Sending works again.
    send(page, "Again\n@fake reply Here now")
    expect(agent_messages(page)).to_contain_text("Here now", timeout=REPLY_TIMEOUT)
    page.console_errors.check()


def api_send(stack, chat, text: str):
    stack.api("POST", f"/chats/{chat['id']}/messages", {"message": text}, expect=201)


def record_toasts(page):
    """Keep the title of every toast the page shows (they leave after 5 s) in window.toastLog,
    and count chat.processing_finished events in window.finishedLog."""
    page.evaluate(
        """() => {
          window.toastLog = [];
          window.finishedLog = 0;
          new MutationObserver((records) => records.forEach((r) => r.addedNodes.forEach((n) => {
            if (n.classList && n.classList.contains("toast")) {
              window.toastLog.push(n.querySelector(".toast__title").textContent + " · " +
                (n.querySelector(".toast__detail") || {}).textContent);
            }
          }))).observe(document.getElementById("toasts"), { childList: true });
          document.body.addEventListener("malamar:chat.processing_finished", () => {
            window.finishedLog += 1;
          });
        }"""
    )


def test_create_task_action_toasts_a_link_to_the_task(browser, stack):
    page = new_page(browser)
    workspace = stack.workspace("Tasks from chat")
    chat = api_chat(stack, workspace)
    chat_tab(page, stack, workspace)  # the chat is not open: its news comes as toasts
    api_send(
        stack,
        chat,
        "File it\n@fake reply Filed.\n"
        '@fake action {"type": "create_task", "summary": "Write the docs", '
        '"description": "All of them"}',
    )
    toast = page.locator(".toast", has_text="Task created: Write the docs")
    expect(toast).to_be_visible(timeout=REPLY_TIMEOUT)
    tasks = stack.api("GET", f"/workspaces/{workspace['id']}/tasks")["tasks"]
    task_id = next(t["id"] for t in tasks if t["summary"] == "Write the docs")
    href = f"/workspaces/{workspace['id']}/?tab=tasks&task={task_id}"
    expect(toast.locator("a")).to_have_attribute("href", href)
    toast.locator("a").click()
    expect(page).to_have_url(re.compile(re.escape(href) + "$"))
    # The task popup (built with the Tasks tab) opens on that link.
    expect(page.locator("dialog[open]")).to_contain_text("Write the docs")
    # The reply's action card links to the same task.
    chat_tab(page, stack, workspace, f"&chat={chat['id']}")
    card = agent_messages(page).locator(".chat-action[data-action-type=create_task]")
    expect(card.get_by_role("link", name="Open task")).to_have_attribute("href", href)
    page.console_errors.check()


def test_toasts_only_for_chats_not_on_screen_and_never_replied_after_stop(browser, stack):
    workspace = stack.workspace("Quiet")
    watched = api_chat(stack, workspace)
    stack.api("PUT", f"/chats/{watched['id']}", {"title": "Watched"}, expect=200)
    other = api_chat(stack, workspace)
    stack.api("PUT", f"/chats/{other['id']}", {"title": "Elsewhere"}, expect=200)
    viewer = new_page(browser)  # looks at "Watched"
    chat_tab(viewer, stack, workspace, f"&chat={watched['id']}")
    lister = new_page(browser)  # looks at the list only
    chat_tab(lister, stack, workspace)
    for page in (viewer, lister):
        record_toasts(page)

    # A reply stopped by the user: no "replied" anywhere.
    send(viewer, "Think hard\n@fake sleep 30\n@fake reply Too late")
    expect(viewer.locator("[data-typing=Malamar]")).to_be_visible(timeout=REPLY_TIMEOUT)
    viewer.locator("#chat-stop").click()
    expect(viewer.locator("#chat-send")).to_be_visible(timeout=REPLY_TIMEOUT)
    # A real reply in the chat on screen: the viewer sees it there, not as a toast.
    send(viewer, "Again\n@fake reply Here now")
    expect(agent_messages(viewer)).to_contain_text("Here now", timeout=REPLY_TIMEOUT)
    # A reply in a chat nobody looks at: both pages toast it.
    api_send(stack, other, "Hello\n@fake reply Over here")
    for page in (viewer, lister):
        page.wait_for_function("() => window.finishedLog >= 3", timeout=REPLY_TIMEOUT)
    assert viewer.evaluate("window.toastLog") == ["Malamar replied · Elsewhere"]
    assert sorted(lister.evaluate("window.toastLog")) == [
        "Malamar replied · Elsewhere",
        "Malamar replied · Watched",  # once: for "Here now", not for the stopped run
    ]
    for page in (viewer, lister):
        page.console_errors.check()
        page.close()


def test_a_rename_in_progress_survives_a_live_refresh_of_the_head(browser, stack):
    workspace = stack.workspace("Rename")
    chat = api_chat(stack, workspace)
    page = new_page(browser)
    chat_tab(page, stack, workspace, f"&chat={chat['id']}")
    page.locator("#chat-title-edit").click()
    title = page.locator("#chat-title-input")
    title.fill("Half typed")
    # Renamed elsewhere: the head's live refresh waits for the editor (live.js).
    stack.api("PUT", f"/chats/{chat['id']}", {"title": "Renamed elsewhere"}, expect=200)
    expect(page.locator("#chat-head")).to_have_attribute("data-live-due", "")
    expect(title).to_be_visible()
    expect(title).to_have_value("Half typed")
    title.press("Escape")  # leaving the editor shows what changed meanwhile
    expect(page.locator("#chat-dialog-title")).to_have_text("Renamed elsewhere")
    expect(page.locator("#chat-head")).not_to_have_attribute("data-live-due", "")
    page.console_errors.check()


def test_a_failed_reply_toasts_an_error_with_a_link_to_the_chat(browser, stack):
    workspace = stack.workspace("Broken")
    chat = api_chat(stack, workspace)
    stack.api("PUT", f"/chats/{chat['id']}", {"title": "Needs a login"}, expect=200)
    page = new_page(browser)
    chat_tab(page, stack, workspace)  # the list only: the chat's news comes as a toast
    api_send(stack, chat, "Hello\n@fake exit 2 Invalid API key")
    toast = page.locator(".toast", has_text="Malamar could not reply")
    expect(toast).to_be_visible(timeout=REPLY_TIMEOUT)
    expect(toast).to_contain_text("Needs a login")
    expect(toast).to_have_class(re.compile(r"\btoast--error\b"))
    href = f"/workspaces/{workspace['id']}/?tab=chat&chat={chat['id']}"
    expect(toast.locator("a")).to_have_attribute("href", href)
    page.console_errors.check()


def test_a_search_typed_while_the_list_refreshes_waits_for_it(browser, stack):
    """The search used to abort a live refresh of the list in flight (htmx logs every aborted
    request as a console error); it now waits for it, and the search still has the last word."""
    workspace = stack.workspace("Search")
    kickoff = api_chat(stack, workspace)
    stack.api("PUT", f"/chats/{kickoff['id']}", {"title": "Kickoff"}, expect=200)
    api_chat(stack, workspace)
    page = new_page(browser)
    chat_tab(page, stack, workspace)
    expect(page.locator(".chat-row")).to_have_count(2)
    # In one turn of the page: a live refresh of the list is sent, then a search (its "search"
    # event, without the typing delay) while that refresh is still on its way.
    page.evaluate(
        """() => {
            window.htmx.trigger("#chat-list", "live");
            const search = document.getElementById("chat-search");
            search.value = "kick";
            search.dispatchEvent(new Event("search"));
        }"""
    )
    expect(page.locator(".chat-row")).to_have_count(1)
    expect(page.locator(".chat-row")).to_contain_text("Kickoff")
    page.console_errors.check()


def test_a_toast_about_a_chat_not_in_the_list_opens_its_popup_in_place(browser, stack):
    workspace = stack.workspace("Narrowed")
    shown, hidden = api_chat(stack, workspace), api_chat(stack, workspace)
    stack.api("PUT", f"/chats/{shown['id']}", {"title": "Shown chat"}, expect=200)
    stack.api("PUT", f"/chats/{hidden['id']}", {"title": "Hidden chat"}, expect=200)
    page = new_page(browser)
    chat_tab(page, stack, workspace)
    page.locator("#chat-search").fill("Shown")
    expect(page.locator(".chat-row")).to_have_count(1)
    page.evaluate("window.notReloaded = true")
    link = f"/workspaces/{workspace['id']}/?tab=chat&chat={hidden['id']}"
    page.evaluate("href => window.malamarToast({level: 'info', message: 'About it', href})", link)
    page.locator(".toast", has_text="About it").get_by_role("link").click()
    expect(page.locator("#chat-dialog")).to_be_visible()
    expect(page.locator("#chat-dialog-title")).to_contain_text("Hidden chat")
    expect(page).to_have_url(re.compile(rf"chat={hidden['id']}"))
    assert page.evaluate("window.notReloaded") is True
    page.console_errors.check()


def overlap(a: dict, b: dict) -> bool:
    return (
        a["x"] < b["x"] + b["width"]
        and b["x"] < a["x"] + a["width"]
        and a["y"] < b["y"] + b["height"]
        and b["y"] < a["y"] + a["height"]
    )


@pytest.mark.parametrize("viewport", [None, PHONE], ids=["desktop", "phone"])
def test_toasts_never_cover_the_send_button(browser, stack, viewport):
    page = new_page(browser, viewport=viewport)
    page.clock.install()  # paused below: on a loaded machine three uploads outlast a toast's 5 s
    workspace = stack.workspace("Toasts")
    chat = api_chat(stack, workspace)
    chat_tab(page, stack, workspace, f"&chat={chat['id']}")
    page.clock.pause_at(page.evaluate("Date.now()") + 1000)
    files = [{"name": f"n{i}.txt", "mimeType": "text/plain", "buffer": b"x"} for i in range(1, 4)]
    for count in range(1, 4):  # three toasts: the most the stack shows
        page.locator("#chat-files").set_input_files(files[:count])
        expect(page.locator(".toast")).to_have_count(count)
    send_box = page.locator("#chat-send").bounding_box()
    composer = page.locator("#chat-composer").bounding_box()
    for toast in page.locator(".toast").all():
        expect(toast).to_be_in_viewport()
        box = toast.bounding_box()
        assert not overlap(box, send_box), (box, send_box)
        assert not overlap(box, composer), (box, composer)
    page.clock.resume()
    # Closing the chat puts them back in the corner.
    page.keyboard.press("Escape")
    expect(page.locator("#chat-dialog")).to_be_hidden()
    region = page.locator("#toast-region").bounding_box()
    height = (viewport or {"height": 800})["height"]
    assert height - (region["y"] + region["height"]) <= 24
    page.console_errors.check()


def test_group_chat_pills_include_and_two_answers(browser, stack):
    page = new_page(browser)
    # The fake CLI knows which agent it plays from this sentence in the instruction.
    workspace = stack.workspace(
        "Group",
        agents=[
            ("Alpha", "claude", 'You are the agent "Alpha" in this workflow.'),
            ("Beta", "claude", 'You are the agent "Beta" in this workflow.'),
        ],
    )
    chat_tab(page, stack, workspace)
    start_chat(page, "Alpha")
    pills = page.locator("#chat-live .chat-pill[data-participant]")
    expect(pills).to_have_count(1)

    # Add Beta and Malamar, then mute Malamar.
    page.locator("#chat-add-agent").click()
    page.get_by_role("menuitem", name=re.compile("^Beta")).click()
    expect(pills).to_have_count(2)
    page.locator("#chat-add-agent").click()
    page.get_by_role("menuitem", name=re.compile("^Malamar")).click()
    expect(pills).to_have_count(3)
    malamar = page.locator(".chat-pill[data-participant=Malamar] .chat-pill__toggle")
    malamar.click()
    expect(malamar).to_have_attribute("aria-pressed", "false")
    expect(malamar).to_be_focused()

    send(page, "Hello both\n@fake Alpha: reply Alpha here\n@fake Beta: reply Beta here")
    answers = agent_messages(page)
    expect(answers).to_have_count(2, timeout=REPLY_TIMEOUT)
    expect(page.locator(".chat-msg--agent", has_text="Alpha here")).to_contain_text("Alpha")
    expect(page.locator(".chat-msg--agent", has_text="Beta here")).to_contain_text("Beta")
    expect(page.locator("#chat-send")).to_be_visible()
    assert "Malamar" not in answers.locator(".chat-msg__author").all_inner_texts()

    # Leave Alpha's answer out of the context: saved at once, dimmed, kept after a reload.
    alpha = page.locator(".chat-msg--agent", has_text="Alpha here")
    alpha.get_by_label("Include in context").uncheck()
    expect(alpha.get_by_label("Include in context")).not_to_be_checked()
    expect(alpha).to_have_class(re.compile(r"\bis-excluded\b"))  # dimmed
    chat_id = re.search(r"chat=([\w-]+)", page.url).group(1)
    page.wait_for_function(
        "async ([url]) => { const r = await fetch(url); const c = await r.json();"
        " return c.messages.some(m => m.message === 'Alpha here' && !m.included); }",
        arg=[f"/api/chats/{chat_id}"],
    )
    page.reload()
    alpha = page.locator(".chat-msg--agent", has_text="Alpha here")
    expect(alpha.get_by_label("Include in context")).not_to_be_checked()

    # Everyone muted: solo mode, the message is only stored.
    for name in ("Alpha", "Beta"):
        page.locator(f".chat-pill[data-participant={name}] .chat-pill__toggle").click()
        expect(
            page.locator(f".chat-pill[data-participant={name}] .chat-pill__toggle")
        ).to_have_attribute("aria-pressed", "false")
    expect(page.get_by_text("All agents are muted")).to_be_visible()
    send(page, "Note to self")
    expect(page.locator(".chat-msg--user", has_text="Note to self")).to_be_visible()
    expect(page.locator(".chat-msg--user.is-pending")).to_have_count(0)
    expect(page.locator("#chat-send")).to_be_visible()
    page.console_errors.check()


def test_chat_popup_at_phone_width(browser, stack):
    page = new_page(browser, viewport=PHONE)
    workspace = stack.workspace("Phone", agents=[("Planner", "claude")])
    chat = api_chat(stack, workspace)
    chat_tab(page, stack, workspace)
    expect(page.locator(".chat-row")).to_have_count(1)
    page.locator(".chat-row a").click()
    dialog = page.locator("#chat-dialog")
    expect(dialog).to_be_visible()
    expect(page).to_have_url(re.compile(f"chat={chat['id']}"))
    expect(dialog).to_have_css("width", f"{PHONE['width']}px")  # full screen
    expect(dialog).to_have_css("height", f"{PHONE['height']}px")
    for control in ("#chat-agent", "#chat-cli", "#chat-message", "#chat-send", "#chat-title-edit"):
        expect(page.locator(control)).to_be_in_viewport()
    page.locator("#chat-message").fill("Small screen\n@fake reply Fits fine")
    page.locator("#chat-send").click()
    expect(agent_messages(page)).to_contain_text("Fits fine", timeout=REPLY_TIMEOUT)
    overflow = page.evaluate(
        "() => [document.documentElement.scrollWidth, "
        "document.querySelector('#chat-dialog').scrollWidth]"
    )
    assert max(overflow) <= PHONE["width"], overflow
    page.locator("#chat-dialog [data-dialog-close]").click()
    expect(dialog).to_be_hidden()
    page.console_errors.check()


def test_keyboard_hint_only_where_there_is_a_keyboard(browser, server):
    workspace = server.workspace("Hints")
    chat = server.api("POST", f"/workspaces/{workspace['id']}/chats", {})
    url = f"{server.url}/workspaces/{workspace['id']}/?tab=chat&chat={chat['id']}"
    desktop = new_page(browser)
    phone = new_page(browser, viewport=PHONE, is_mobile=True, has_touch=True)
    for page in (desktop, phone):
        page.goto(url)
        expect(page.locator("#chat-message")).to_be_visible()
        expect(page.locator("#chat-message")).to_have_attribute("placeholder", "Message…")
    expect(desktop.locator("#chat-composer .kbd-hint")).to_have_text(
        "Enter to send, Shift+Enter for a new line"
    )
    expect(phone.locator("#chat-composer .kbd-hint")).to_be_hidden()
    assert phone.evaluate("matchMedia('(hover: none) and (pointer: coarse)').matches")
    for page in (desktop, phone):
        page.console_errors.check()
        page.close()
