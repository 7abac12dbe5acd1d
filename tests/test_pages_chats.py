"""The Chat tab: list, search, new chat, popup, rename, agent/CLI, send, stop, upload, delete,
group chat (participants, include toggle), and bad input answered with a clear message."""

import dataclasses
import json
import re
from html import unescape
from urllib.parse import parse_qs, urlsplit

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test.utils import CaptureQueriesContext

from chats.models import Chat, ChatMessage, ChatParticipant, ChatQueueItem
from chats.services import (
    chat_create,
    chat_message_add_agent,
    chat_message_add_system,
    chat_message_send,
    chat_participant_add,
    chat_update,
)
from core.models import OutboxEvent
from runner.models import CliHealth, QueueStatus
from tests.htmltree import parse
from tests.pages import element_text, html, hx, triggers

pytestmark = pytest.mark.django_db


@pytest.fixture
def chat(workspace):
    return chat_create(workspace=workspace, title="Plan the launch")


@pytest.fixture(autouse=True)
def temp_dir(tmp_path, settings):
    settings.CONFIG = dataclasses.replace(settings.CONFIG, temp_dir=tmp_path)
    return tmp_path


def tab(client, workspace, query: str = "") -> str:
    return html(client.get(f"/workspaces/{workspace.id}/?tab=chat{query}"))


def list_titles(page: str) -> list[str]:
    return [title.text for title in parse(page).find_all("chat-row__title")]


def selected(element) -> list[tuple[str, str]]:
    """(value, text) of the selected options in a parsed element."""
    options = element.find_all(tag="option")
    return [
        (option.attrs["value"], option.text) for option in options if "selected" in option.attrs
    ]


def pills(page) -> list[str]:
    """The names on a parsed popup's participant pills."""
    return [pill.find("chat-pill__name").text for pill in page.find_all("chat-pill__toggle")]


def flash_messages(page: str) -> list[str]:
    return [item.text for item in parse(page).by_id("flash-messages").find_all(tag="li")]


def popup(client, chat) -> str:
    response = hx(client, "get", f"/chats/{chat.id}/")
    assert response.status_code == 200
    return html(response)


def messages_of(chat) -> list[tuple[str, str]]:
    return list(chat.messages.order_by("created_at", "id").values_list("role", "message"))


# --- list -------------------------------------------------------------------------------


def test_empty_tab_says_no_conversations_and_offers_every_agent(client, workspace, agents):
    panel = parse(tab(client, workspace)).by_id("chat-panel")
    assert (panel.tag, panel.attrs["aria-labelledby"]) == ("section", "tab-chat")
    empty = panel.find("empty-state")
    assert empty.find("empty-state__title").text == "No conversations yet"
    assert empty.find("chat-menu", tag="details").find(tag="summary").text == "Start a chat"
    menu = panel.find("chat-menu__panel")
    names = [text.children[0] for text in menu.find_all("chat-menu__text")]
    assert names == ["Malamar", "Planner", "Implementer", "Reviewer"]


def test_list_shows_title_agents_preview_time_latest_first(client, workspace, agents):
    old = chat_create(workspace=workspace, agent=agents[0], title="Older chat")
    chat_message_add_agent(chat=old, message="Here is **the plan**", actions=None)
    new = chat_create(workspace=workspace, title="Newer chat")
    chat_participant_add(chat=new, agent_id=agents[1].id)
    page = tab(client, workspace)
    assert list_titles(page) == ["Newer chat", "Older chat"]
    rows = parse(page).find_all("chat-row", tag="li")
    assert [row.find("chat-row__agents").text for row in rows] == [
        "Malamar, Implementer",
        "Planner",
    ]
    assert rows[1].find("chat-row__preview").text == "Here is the plan"
    assert parse(page).find(tag="strong") is None  # a plain text preview
    assert all(row.find("chat-row__time").find(tag="time").attrs["datetime"] for row in rows)
    # A new message moves a chat to the top.
    chat_message_add_system(chat=old, message="Switched from A to B")
    assert list_titles(html(hx(client, "get", f"/workspaces/{workspace.id}/chats/"))) == [
        "Older chat",
        "Newer chat",
    ]


def test_action_only_reply_previews_its_actions(client, workspace):
    chat = chat_create(workspace=workspace, title="Setup")
    chat_message_add_agent(
        chat=chat, message="", actions=[{"type": "create_agent", "name": "Reviewer"}]
    )
    preview = parse(tab(client, workspace)).find("chat-row__preview")
    assert preview.text == 'Created agent "Reviewer"'


@pytest.mark.pg
def test_search_filters_by_title(client, workspace):
    chat_create(workspace=workspace, title="Login page")
    chat_create(workspace=workspace, title="Billing")
    page = html(hx(client, "get", f"/workspaces/{workspace.id}/chats/?q=log"))
    assert parse(page).find(tag="html") is None and list_titles(page) == ["Login page"]
    page = parse(html(hx(client, "get", f"/workspaces/{workspace.id}/chats/?q=zzz")))
    assert page.find("empty-state__title").text == "No chats match “zzz”"
    # Reload with the query keeps it.
    assert list_titles(tab(client, workspace, "&q=bill")) == ["Billing"]


def test_list_refreshes_itself_on_chat_events(client, workspace):
    region = parse(tab(client, workspace)).by_id("chat-list").attrs
    assert region["hx-trigger"] == "live"
    for event in ("message_added", "updated", "deleted", "processing_started"):
        assert f"chat.{event}" in region["data-live"].split()
    assert region["hx-include"] == "#chat-search"


def test_list_without_htmx_goes_to_the_tab(client, workspace):
    response = client.get(f"/workspaces/{workspace.id}/chats/?q=x")
    assert response.status_code == 302 and response.url.endswith("?tab=chat&q=x")


def test_list_without_htmx_keeps_a_query_with_special_characters(client, workspace):
    chat_create(workspace=workspace, title="a&b#c d notes")
    chat_create(workspace=workspace, title="a")
    response = client.get(f"/workspaces/{workspace.id}/chats/", {"q": "a&b#c d"})
    assert response.status_code == 302
    url = urlsplit(response.url)
    assert url.fragment == "" and parse_qs(url.query) == {"tab": ["chat"], "q": ["a&b#c d"]}
    page = html(client.get(response.url))
    assert [unescape(title) for title in list_titles(page)] == ["a&b#c d notes"]
    search = re.search(r'<input id="chat-search"[^>]*>', page).group(0)
    assert 'value="a&amp;b#c d"' in search


def test_refused_new_chat_without_htmx_encodes_the_start_link(client, workspace):
    data = {"draft": "1", "agent_id": "x&tab=agents#y", "message": "hi"}
    response = client.post(f"/workspaces/{workspace.id}/chats/new/", data)
    assert response.status_code == 302
    query = parse_qs(urlsplit(response.url).query)
    assert query == {"tab": ["chat"], "start": ["x&tab=agents#y"]}


def test_menu_fragment_lists_agents(client, workspace, agents):
    page = html(hx(client, "get", f"/workspaces/{workspace.id}/chats/menu/"))
    assert page.count('role="menuitem"') == 4


# --- create -----------------------------------------------------------------------------


def test_new_chat_from_the_dropdown_opens_its_popup(client, workspace, agents):
    response = hx(
        client, "post", f"/workspaces/{workspace.id}/chats/new/", {"agent_id": agents[1].id}
    )
    assert response.status_code == 200
    chat = Chat.objects.get()
    assert chat.participants.lead().agent == agents[1]
    assert response.headers["HX-Push-Url"] == f"/workspaces/{workspace.id}/?tab=chat&chat={chat.id}"
    assert triggers(response) == {}  # its chat.updated event refreshes the list
    page = parse(html(response))
    assert page.by_id("chat-head") is not None and page.by_id("chat-composer") is not None
    assert selected(page)[0] == (agents[1].id, "Implementer")


def test_new_chat_with_malamar(client, workspace):
    hx(client, "post", f"/workspaces/{workspace.id}/chats/new/", {"agent_id": ""})
    assert Chat.objects.get().participants.lead().agent is None


def test_new_chat_with_a_foreign_agent_is_refused_with_a_toast(client, workspace):
    response = hx(client, "post", f"/workspaces/{workspace.id}/chats/new/", {"agent_id": "nope"})
    assert response.status_code == 200 and response.headers["HX-Reswap"] == "none"
    assert triggers(response)["malamar:toast"]["level"] == "error"
    assert not Chat.objects.exists()


def test_start_malamar_opens_a_new_chat_form_without_creating_anything(client, workspace):
    page = parse(tab(client, workspace, "&start=malamar"))
    assert not Chat.objects.exists()
    dialog = page.by_id("chat-dialog")
    assert "data-open-on-load" in dialog.attrs
    draft = dialog.find(data_chat_draft="")
    assert selected(draft.by_id("chat-draft-agent")) == [("", "Malamar")]


def test_first_message_from_the_new_chat_form_creates_and_sends(client, workspace):
    url = f"/workspaces/{workspace.id}/chats/new/"
    response = hx(client, "post", url, {"draft": "1", "agent_id": "", "message": "Hi there"})
    chat = Chat.objects.get()
    assert messages_of(chat) == [("user", "Hi there")]
    assert ChatQueueItem.objects.filter(chat=chat).count() == 1
    assert response.headers["HX-Push-Url"].endswith(f"chat={chat.id}")
    [mine] = parse(html(response)).find_all("chat-msg--user", tag="li")
    assert mine.find("chat-msg__bubble").text == "Hi there"


def test_empty_first_message_keeps_the_form_with_the_error(client, workspace):
    url = f"/workspaces/{workspace.id}/chats/new/"
    response = hx(client, "post", url, {"draft": "1", "agent_id": "", "message": "  "})
    page = parse(html(response))
    assert response.status_code == 200 and not Chat.objects.exists()
    assert page.by_id("chat-message_error").text == "Message is required"
    assert page.by_id("chat-message").attrs["aria-invalid"] == "true"
    assert page.find(data_chat_draft="") is not None


def test_first_message_without_any_cli_leaves_no_empty_chat(client, workspace):
    for cli in ("claude", "codex", "gemini", "opencode"):
        CliHealth.objects.create(cli_type=cli, status="unhealthy", error="gone")
    url = f"/workspaces/{workspace.id}/chats/new/"
    response = hx(client, "post", url, {"draft": "1", "agent_id": "", "message": "Hello"})
    page = parse(html(response))
    assert "No CLI available" in page.by_id("chat-message_error").text
    assert not Chat.objects.exists()
    assert page.by_id("chat-message").text == "Hello"


# --- popup ------------------------------------------------------------------------------


def test_reload_with_chat_in_the_url_opens_the_popup(client, workspace, chat):
    chat_message_send(chat=chat, message="What do we ship **first**?")
    dialog = parse(tab(client, workspace, f"&chat={chat.id}")).by_id("chat-dialog")
    assert dialog.tag == "dialog" and "data-open-on-load" in dialog.attrs
    assert dialog.find("chat-title__text").text == "Plan the launch"
    assert dialog.find("chat-msg__bubble").find(tag="strong").text == "first"  # markdown


def test_unknown_chat_in_the_url_says_so(client, workspace, chat):
    from workspaces.services import workspace_create

    other = chat_create(workspace=workspace_create(title="Other"))
    for chat_id in ("missing", other.id):
        page = tab(client, workspace, f"&chat={chat_id}")
        assert flash_messages(page) == ["That chat no longer exists."]
        assert "data-open-on-load" not in parse(page).by_id("chat-dialog").attrs


def test_popup_renders_messages_oldest_first_with_authors(client, workspace, agents, chat):
    chat_message_send(chat=chat, message="First")
    ChatQueueItem.objects.update(status=QueueStatus.COMPLETED)
    chat_message_add_agent(chat=chat, message="Second <script>x</script>", actions=None)
    chat_message_add_system(chat=chat, message="CLI exited with code 1: boom")
    chat_message_add_system(chat=chat, message="Stopped by user")
    page = popup(client, chat)
    messages = parse(page).find_all("chat-msg", tag="li")

    def said(message) -> tuple[str, str]:
        if "chat-msg--system" in message.classes:
            return "system", message.find("chat-system__text").text
        return message.find("chat-msg__author").text, message.find("chat-msg__bubble").text

    assert [said(message) for message in messages] == [
        ("You", "First"),
        ("Malamar", "Second <script>x</script>"),  # the agent's markup shown as text
        ("system", "CLI exited with code 1: boom"),
        ("system", "Stopped by user"),
    ]
    assert [message.attrs["class"] for message in messages[2:]] == [
        "chat-msg chat-msg--system chat-msg--error",  # errors are tinted
        "chat-msg chat-msg--system chat-msg--info",
    ]
    assert "<script>x</script>" not in page


def test_system_messages_and_action_cards_show_markup_as_text(client, workspace, chat):
    """The messages are written in Python (chats/templatetags/chat_messages.py), not by the
    template engine that escaped everything."""
    hostile = "<script>alert(\"x\")</script> & 'quoted'"
    chat_message_add_system(chat=chat, message=f"CLI exited with code 1: {hostile}")
    chat_message_add_system(chat=chat, message=f"User has uploaded uploads/{hostile}")
    failed = {"type": "create_task", "summary": hostile, "result": "failed", "error": hostile}
    chat_message_add_agent(chat=chat, message="", actions=[failed])
    page = popup(client, chat)
    assert "<script>" not in page
    tree = parse(page)
    assert tree.find("chat-system__text").text == f"CLI exited with code 1: {hostile}"
    assert tree.find("chat-system__path").attrs["title"] == f"uploads/{hostile}"
    assert tree.find("chat-action__detail").text == f"“{hostile}”"
    assert tree.find("chat-action__status").text == f"Failed: {hostile}"


def test_the_popup_reads_the_clis_health_once(client, workspace, agents, chat):
    """The four CLIs' health is read once for the participants, the agent menus and the CLI
    menu (it was read three times)."""
    chat_message_send(chat=chat, message="First")
    with CaptureQueriesContext(connection) as queries:
        popup(client, chat)
    health_reads = [
        q for q in queries if 'FROM "cli_health" WHERE "cli_health"."cli_type" IN' in q["sql"]
    ]
    assert len(health_reads) == 1


def test_agent_actions_show_as_cards_and_a_task_link(client, workspace, chat):
    actions = [
        {"type": "create_task", "summary": "Write docs", "task_id": "T1", "result": "ok"},
        {"type": "delete_agent", "agent_id": "x", "result": "failed", "error": "not found"},
    ]
    chat_message_add_agent(chat=chat, message="", actions=actions)
    cards = parse(popup(client, chat)).find_all("chat-action", tag="li")
    assert [(c.attrs["data-action-type"], c.attrs.get("data-task-id")) for c in cards] == [
        ("create_task", "T1"),
        ("delete_agent", None),
    ]
    link = cards[0].find("chat-action__link", tag="a")
    assert link.attrs["href"] == f"/workspaces/{workspace.id}/?tab=tasks&task=T1"
    assert cards[1].find("chat-action__status").text == "Failed: not found"


def test_create_task_reply_event_carries_the_task_for_the_toast(workspace, chat):
    actions = [{"type": "create_task", "summary": "Docs", "task_id": "T9", "result": "ok"}]
    chat_message_add_agent(chat=chat, message="Done", actions=actions)
    event = OutboxEvent.objects.filter(type="chat.message_added").last()
    assert event.payload["created_tasks"] == [{"task_id": "T9", "summary": "Docs"}]


def test_popup_without_htmx_redirects_to_the_tab(client, workspace, chat):
    response = client.get(f"/chats/{chat.id}/")
    assert response.status_code == 302
    assert response.url == f"/workspaces/{workspace.id}/?tab=chat&chat={chat.id}"


def test_unknown_chat_is_404(client):
    assert client.get("/chats/nope/").status_code == 404
    assert hx(client, "get", "/chats/nope/").status_code == 404
    assert hx(client, "get", "/chats/nope/", target="chat-dialog-body").status_code == 404


@pytest.mark.parametrize("part", ["chat-head", "chat-live"])
def test_a_refresh_of_a_chat_deleted_meanwhile_swaps_nothing_and_closes_it(client, part):
    """The popup's refresh was on its way when the chat was deleted: no 404 (a console error
    in the browser), nothing swapped, and the popup closes saying so."""
    response = hx(client, "get", "/chats/nope/", target=part)
    assert response.status_code == 200
    assert response["HX-Reswap"] == "none"
    assert json.loads(response["HX-Trigger"]) == {
        "malamar:gone": {"message": "This chat was deleted"}
    }


@pytest.mark.parametrize(
    "path", ["rename/", "agent/", "cli/", "send/", "stop/", "attachments/", "delete/"]
)
def test_posts_to_an_unknown_chat_are_404(client, path):
    assert hx(client, "post", f"/chats/nope/{path}").status_code == 404


def test_the_popup_view_answers_the_part_its_target_names(client, chat):
    """One URL: the whole popup, or the head or the live part for their live refreshes."""
    popup = parse(html(hx(client, "get", f"/chats/{chat.id}/")))
    for part in ("chat-head", "chat-live"):
        region = popup.by_id(part).attrs
        assert region["hx-get"] == f"/chats/{chat.id}/" and region["hx-trigger"] == "live"
        assert region["hx-swap"] == "innerHTML" and region["data-live-chat"] == chat.id
        assert "chat.updated" in region["data-live"].split()
    live = parse(html(hx(client, "get", f"/chats/{chat.id}/", target="chat-live")))
    assert live.find("chat-pills") and live.by_id("chat-live") is None  # its content only
    head = parse(html(hx(client, "get", f"/chats/{chat.id}/", target="chat-head")))
    assert head.find("chat-title") and head.find("chat-pills") is None


# --- rename, agent, CLI -----------------------------------------------------------------


def test_rename(client, chat):
    response = hx(client, "post", f"/chats/{chat.id}/rename/", {"title": "  Launch plan "})
    chat.refresh_from_db()
    assert chat.title == "Launch plan"
    assert parse(html(response)).find("chat-title__text").text == "Launch plan"
    assert triggers(response) == {}  # its chat.updated event refreshes the rest


def test_rename_to_nothing_keeps_the_form_open_with_the_error(client, chat):
    response = hx(client, "post", f"/chats/{chat.id}/rename/", {"title": "   "})
    page = html(response)
    assert response.status_code == 200 and "data-editing" in page
    assert element_text(page, "chat-title-input_error") == "Title is required"
    described = parse(page).by_id("chat-title-input").attrs["aria-describedby"]
    assert described == "chat-title-input_error"
    chat.refresh_from_db()
    assert chat.title == "Plan the launch"


def test_rename_without_htmx_redirects_back(client, chat):
    response = client.post(f"/chats/{chat.id}/rename/", {"title": "New"})
    assert response.status_code == 302 and response.url.endswith(f"chat={chat.id}")


def test_the_rename_form_is_the_head_opened_for_it(client, chat):
    head = parse(html(hx(client, "get", f"/chats/{chat.id}/rename/")))
    form = head.find("chat-title-form").attrs
    assert "data-editing" in form and form["hx-post"] == f"/chats/{chat.id}/rename/"
    field = head.by_id("chat-title-input").attrs
    assert field["value"] == "Plan the launch" and "autofocus" in field
    [cancel] = head.find_all(tag="button", data_edit_cancel="")  # (Escape clicks it: app.js)
    assert cancel.attrs["hx-get"] == f"/chats/{chat.id}/"
    assert head.by_id("chat-title-edit") is None  # (the title shows again on cancel)
    plain = parse(html(hx(client, "get", f"/chats/{chat.id}/", target="chat-head")))
    assert plain.find("chat-title-form") is None and plain.by_id("chat-title-edit")
    response = client.get(f"/chats/{chat.id}/rename/")
    assert response.status_code == 302 and response.url.endswith(f"chat={chat.id}")


def test_switch_agent_keeps_history_and_resets_the_cli(client, agents, chat):
    chat_update(chat=chat, cli_type="gemini")
    response = hx(client, "post", f"/chats/{chat.id}/agent/", {"agent_id": agents[0].id})
    lead = chat.participants.lead()
    assert lead.agent == agents[0] and lead.cli_type is None
    assert messages_of(chat) == [("system", "Switched from Malamar to Planner")]
    page = parse(html(response))
    assert selected(page.by_id("chat-agent")) == [(agents[0].id, "Planner")]
    assert selected(page.by_id("chat-cli")) == [("", "Default · Claude Code")]
    hx(client, "post", f"/chats/{chat.id}/agent/", {"agent_id": ""})
    assert chat.participants.lead().agent is None


def test_switch_to_an_unknown_agent_is_a_toast(client, chat):
    response = hx(client, "post", f"/chats/{chat.id}/agent/", {"agent_id": "ghost"})
    assert response.status_code == 200
    assert triggers(response)["malamar:toast"]["level"] == "error"


def test_cli_override_and_clear(client, chat):
    CliHealth.objects.create(cli_type="codex", status="unhealthy", error="401")
    response = hx(client, "post", f"/chats/{chat.id}/cli/", {"cli_type": "gemini"})
    assert chat.participants.get().cli_type == "gemini"
    clis = parse(html(response)).by_id("chat-cli")
    assert selected(clis) == [("gemini", "Gemini CLI (not checked)")]
    assert clis.find(tag="option", value="codex").text == "Codex CLI (unavailable)"  # marked
    hx(client, "post", f"/chats/{chat.id}/cli/", {"cli_type": ""})
    assert chat.participants.get().cli_type is None


def test_bad_cli_is_a_toast(client, chat):
    response = hx(client, "post", f"/chats/{chat.id}/cli/", {"cli_type": "vim"})
    assert response.status_code == 200
    assert "Choose one of the listed CLIs" in triggers(response)["malamar:toast"]["message"]


# --- send, stop -------------------------------------------------------------------------


def test_send_stores_queues_and_shows_the_stop_button(client, chat):
    response = hx(client, "post", f"/chats/{chat.id}/send/", {"message": "Hello"})
    assert messages_of(chat) == [("user", "Hello")]
    page = html(response)
    assert page.lstrip().startswith('<form id="chat-composer"')
    assert parse(page).by_id("chat-message").text == ""  # cleared
    # The composer follows the state #chat-live shows (chats.css: Stop while busy).
    live = html(hx(client, "get", f"/chats/{chat.id}/", target="chat-live"))
    assert "data-busy" in live and "is answering…" in live
    assert f'data-chat-current="{chat.id}"' in live
    # The live trace: activity.js adds runs that start into this timeline.
    assert f'data-runs-chat="{chat.id}" data-runs-running-only' in live


def test_empty_message_keeps_the_text_box_with_the_error(client, chat):
    page = parse(html(hx(client, "post", f"/chats/{chat.id}/send/", {"message": "  "})))
    assert page.by_id("chat-message_error").text == "Write a message first"
    assert page.by_id("chat-message").attrs["aria-invalid"] == "true"
    assert not ChatMessage.objects.exists()


def test_second_message_while_answering_is_refused_with_the_text_kept(client, chat):
    hx(client, "post", f"/chats/{chat.id}/send/", {"message": "One"})
    page = parse(html(hx(client, "post", f"/chats/{chat.id}/send/", {"message": "Two"})))
    assert "still answering" in page.by_id("chat-message_error").text
    assert page.by_id("chat-message").text == "Two"
    assert messages_of(chat) == [("user", "One")]


def test_no_cli_available_blocks_sending(client, chat):
    for cli in ("claude", "codex", "gemini", "opencode"):
        CliHealth.objects.create(cli_type=cli, status="unhealthy", error="gone")
    live = html(hx(client, "get", f"/chats/{chat.id}/", target="chat-live"))
    assert "No CLI available" in live and "data-blocked" in live
    state = parse(popup(client, chat)).find(tag="span", data_chat_state="")
    assert "data-blocked" in state.attrs  # its Send follows this state (chats.css)
    page = html(hx(client, "post", f"/chats/{chat.id}/send/", {"message": "Hi"}))
    assert "No CLI available" in element_text(page, "chat-message_error")
    assert not ChatMessage.objects.filter(role="user").exists()


def test_idle_chat_has_no_pending_region(client, chat):
    live = html(hx(client, "get", f"/chats/{chat.id}/", target="chat-live"))
    assert "data-runs-chat" not in live and "chat-pending" not in live


def test_stop_cancels_every_pending_answer(client, chat):
    hx(client, "post", f"/chats/{chat.id}/send/", {"message": "Hello"})
    response = hx(client, "post", f"/chats/{chat.id}/stop/")
    assert not ChatQueueItem.objects.filter(status=QueueStatus.QUEUED).exists()
    page = html(response)
    notes = [note.text for note in parse(page).find_all("chat-system__text")]
    assert notes == ["Stopped by user"] and "data-busy" not in page.split(">", 1)[0]


def test_stop_when_nothing_runs_is_a_gentle_note(client, chat):
    response = hx(client, "post", f"/chats/{chat.id}/stop/")
    assert response.status_code == 200
    assert triggers(response)["malamar:toast"]["level"] == "info"


# --- upload, delete ---------------------------------------------------------------------


def test_upload_several_files_adds_a_system_message_each(client, chat, temp_dir):
    files = [
        SimpleUploadedFile("notes.txt", b"hello"),
        SimpleUploadedFile("../../evil.md", b"x"),
    ]
    response = client.post(
        f"/chats/{chat.id}/attachments/", {"files": files}, HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 200
    assert triggers(response)["malamar:toast"]["message"] == "Uploaded 2 files"
    uploads = parse(html(response)).find_all("chat-msg--upload", tag="li")
    assert [upload.find("chat-system__file").text for upload in uploads] == ["notes.txt", "evil.md"]
    stored = sorted(p.name for p in temp_dir.rglob("*") if p.is_file())
    assert stored == ["evil.md", "notes.txt"]


def test_upload_nothing_says_so(client, chat):
    response = hx(client, "post", f"/chats/{chat.id}/attachments/")
    assert response.status_code == 200
    assert "Choose at least one file" in triggers(response)["malamar:toast"]["message"]


def test_delete_closes_the_popup_and_refreshes_the_list(client, chat):
    response = hx(client, "post", f"/chats/{chat.id}/delete/")
    assert not Chat.objects.exists()
    events = triggers(response)
    assert "malamar:dialog-close" in events
    empty = parse(html(response)).find("empty-state__title")  # the refreshed list
    assert empty.text == "No conversations yet"
    assert events["malamar:toast"]["message"] == "Deleted “Plan the launch”"


def test_delete_without_htmx_goes_back_to_the_list(client, workspace, chat):
    response = client.post(f"/chats/{chat.id}/delete/")
    assert response.status_code == 302 and response.url.endswith("?tab=chat")


# --- group chat -------------------------------------------------------------------------


def test_pills_show_participants_and_add_removes(client, agents, chat):
    page = parse(popup(client, chat))
    assert pills(page) == ["Malamar"]
    addable = page.find("chat-menu__panel", aria_label="Add to this chat")
    assert [name.text for name in addable.find_all("chat-menu__text")] == [
        "Planner",
        "Implementer",
        "Reviewer",
    ]
    response = hx(client, "post", f"/chats/{chat.id}/participants/", {"agent_id": agents[0].id})
    page = parse(html(response))
    assert pills(page) == ["Malamar", "Planner"]
    assert page.find_all("chat-system__text")[-1].text == "Planner joined the chat"
    planner = ChatParticipant.objects.get(agent=agents[0])
    page = parse(html(hx(client, "post", f"/chats/{chat.id}/participants/{planner.id}/remove/")))
    assert pills(page) == ["Malamar"]
    assert page.find_all("chat-system__text")[-1].text == "Planner left the chat"


def test_adding_twice_and_removing_the_last_are_toasts(client, chat):
    response = hx(client, "post", f"/chats/{chat.id}/participants/", {"agent_id": ""})
    assert "already in this chat" in triggers(response)["malamar:toast"]["message"]
    only = chat.participants.get()
    response = hx(client, "post", f"/chats/{chat.id}/participants/{only.id}/remove/")
    assert "at least one agent" in triggers(response)["malamar:toast"]["message"]


def test_toggle_pills_down_to_solo_mode(client, agents, chat):
    malamar = chat.participants.get()
    url = f"/chats/{chat.id}/participants/{malamar.id}/toggle/"
    page = parse(html(hx(client, "post", url, {"enabled": "0"})))
    malamar.refresh_from_db()
    assert not malamar.enabled and page.by_id(f"pill-{malamar.id}").attrs["aria-pressed"] == "false"
    assert page.find("chat-hint").text.startswith("All agents are muted")
    # Solo mode: the message is stored, nothing runs.
    hx(client, "post", f"/chats/{chat.id}/send/", {"message": "note to self"})
    assert messages_of(chat) == [("user", "note to self")]
    assert not ChatQueueItem.objects.exists()
    page = parse(html(hx(client, "post", url, {"enabled": "1"})))
    assert page.by_id(f"pill-{malamar.id}").attrs["aria-pressed"] == "true"
    assert page.find("chat-hint", text="All agents are muted") is None
    assert hx(client, "post", url, {"enabled": "maybe"}).status_code == 200


def test_lead_agent_choices_leave_out_other_participants(client, agents, chat):
    chat_participant_add(chat=chat, agent_id=agents[0].id)
    head = parse(html(hx(client, "get", f"/chats/{chat.id}/", target="chat-head")))
    lead = [option.text for option in head.by_id("chat-agent").find_all(tag="option")]
    assert "Planner" not in lead and "Implementer" in lead
    assert head.find(tag="label", for_="chat-agent").text == "Lead agent"
    response = hx(client, "post", f"/chats/{chat.id}/agent/", {"agent_id": agents[0].id})
    assert "already in this chat" in triggers(response)["malamar:toast"]["message"]


def test_include_checkbox_saves_at_once(client, chat):
    message = chat_message_send(chat=chat, message="Ignore me")
    url = f"/chats/{chat.id}/messages/{message.id}/included/"
    assert "checked" in parse(popup(client, chat)).by_id(f"include-{message.id}").attrs
    response = hx(client, "post", url, {})  # unchecked: no value
    assert response.status_code == 204
    message.refresh_from_db()
    assert message.included is False
    assert "is-excluded" in parse(popup(client, chat)).by_id(f"msg-{message.id}").classes
    hx(client, "post", url, {"included": "1"})
    message.refresh_from_db()
    assert message.included is True


def test_system_messages_cannot_be_excluded(client, chat):
    note = chat_message_add_system(chat=chat, message="Stopped by user")
    response = hx(client, "post", f"/chats/{chat.id}/messages/{note.id}/included/", {})
    assert response.status_code == 200
    assert "always included" in triggers(response)["malamar:toast"]["message"]
    assert hx(client, "post", f"/chats/{chat.id}/messages/nope/included/").status_code == 404


def test_pending_region_shows_each_answering_agent(client, agents, chat):
    chat_participant_add(chat=chat, agent_id=agents[0].id)
    hx(client, "post", f"/chats/{chat.id}/send/", {"message": "Both of you"})
    live = html(hx(client, "get", f"/chats/{chat.id}/", target="chat-live"))
    assert re.findall(r'data-typing="([^"]+)"', live) == ["Malamar", "Planner"]
    assert "is-working" in live


def test_user_line_breaks_are_kept_outside_code(client, chat):
    chat_message_send(chat=chat, message="line one\nline two\n```\ncode a\ncode b\n```")
    bubble = parse(popup(client, chat)).find("chat-msg__bubble")
    paragraph = bubble.find(tag="p")
    assert paragraph.children[:3] == ["line one", paragraph.find(tag="br"), "\nline two"]
    assert bubble.find(tag="code").children == ["code a\ncode b\n"]  # no <br> inside code


def test_an_upload_previews_as_its_file_name(db, workspace):
    from chats.selectors import message_preview

    text = "User has uploaded /tmp/malamar/chat_x/style guide.md"
    assert message_preview("system", text) == "Uploaded style guide.md"
    assert message_preview("user", text) == text  # only the system note is rewritten
