"""The Chat tab: list, search, new chat, popup, rename, agent/CLI, send, stop, upload, delete,
group chat (participants, include toggle), and bad input answered with a clear message."""

import dataclasses
import json
import re
from html import unescape
from urllib.parse import parse_qs, urlsplit

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

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
from tests.pages import html, hx, triggers

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
    return re.findall(r'<span class="chat-row__title">([^<]+)</span>', page)


def popup(client, chat) -> str:
    response = hx(client, "get", f"/chats/{chat.id}/")
    assert response.status_code == 200
    return html(response)


def messages_of(chat) -> list[tuple[str, str]]:
    return list(chat.messages.order_by("created_at", "id").values_list("role", "message"))


# --- list -------------------------------------------------------------------------------


def test_empty_tab_says_no_conversations_and_offers_every_agent(client, workspace, agents):
    page = tab(client, workspace)
    assert '<section id="chat-panel" class="tab-panel" aria-labelledby="tab-chat">' in page
    assert "No conversations yet" in page and "Start a chat" in page
    menu = re.search(r'<div class="chat-menu__panel".*?</div>\s*</details>', page, re.S).group(0)
    assert re.findall(r'class="chat-menu__text">([A-Za-z]+)', menu) == [
        "Malamar",
        "Planner",
        "Implementer",
        "Reviewer",
    ]


def test_list_shows_title_agents_preview_time_latest_first(client, workspace, agents):
    old = chat_create(workspace=workspace, agent=agents[0], title="Older chat")
    chat_message_add_agent(chat=old, message="Here is **the plan**", actions=None)
    new = chat_create(workspace=workspace, title="Newer chat")
    chat_participant_add(chat=new, agent_id=agents[1].id)
    page = tab(client, workspace)
    assert list_titles(page) == ["Newer chat", "Older chat"]
    assert "Malamar, Implementer" in page and "Planner" in page
    assert "Here is the plan" in page and "<strong>" not in page  # plain text preview
    assert "<time datetime=" in page
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
    assert "Created agent &quot;Reviewer&quot;" in tab(client, workspace)


def test_search_filters_by_title(client, workspace):
    chat_create(workspace=workspace, title="Login page")
    chat_create(workspace=workspace, title="Billing")
    page = html(hx(client, "get", f"/workspaces/{workspace.id}/chats/?q=log"))
    assert "<html" not in page and list_titles(page) == ["Login page"]
    page = html(hx(client, "get", f"/workspaces/{workspace.id}/chats/?q=zzz"))
    assert "No chats match “zzz”" in page
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
    page = html(response)
    assert 'id="chat-head"' in page and 'id="chat-composer"' in page
    assert f'<option value="{agents[1].id}" selected>Implementer' in page


def test_new_chat_with_malamar(client, workspace):
    hx(client, "post", f"/workspaces/{workspace.id}/chats/new/", {"agent_id": ""})
    assert Chat.objects.get().participants.lead().agent is None


def test_new_chat_with_a_foreign_agent_is_refused_with_a_toast(client, workspace):
    response = hx(client, "post", f"/workspaces/{workspace.id}/chats/new/", {"agent_id": "nope"})
    assert response.status_code == 200 and response.headers["HX-Reswap"] == "none"
    assert triggers(response)["malamar:toast"]["level"] == "error"
    assert not Chat.objects.exists()


def test_start_malamar_opens_a_new_chat_form_without_creating_anything(client, workspace):
    page = tab(client, workspace, "&start=malamar")
    assert not Chat.objects.exists()
    assert "data-chat-draft" in page and "data-open-on-load" in page
    assert re.search(r'<option value="" selected>Malamar', page)


def test_first_message_from_the_new_chat_form_creates_and_sends(client, workspace):
    url = f"/workspaces/{workspace.id}/chats/new/"
    response = hx(client, "post", url, {"draft": "1", "agent_id": "", "message": "Hi there"})
    chat = Chat.objects.get()
    assert messages_of(chat) == [("user", "Hi there")]
    assert ChatQueueItem.objects.filter(chat=chat).count() == 1
    assert response.headers["HX-Push-Url"].endswith(f"chat={chat.id}")
    assert "Hi there" in html(response)


def test_empty_first_message_keeps_the_form_with_the_error(client, workspace):
    url = f"/workspaces/{workspace.id}/chats/new/"
    response = hx(client, "post", url, {"draft": "1", "agent_id": "", "message": "  "})
    page = html(response)
    assert response.status_code == 200 and not Chat.objects.exists()
    assert "Message is required" in page and 'aria-invalid="true"' in page
    assert "data-chat-draft" in page


def test_first_message_without_any_cli_leaves_no_empty_chat(client, workspace):
    for cli in ("claude", "codex", "gemini", "opencode"):
        CliHealth.objects.create(cli_type=cli, status="unhealthy", error="gone")
    url = f"/workspaces/{workspace.id}/chats/new/"
    response = hx(client, "post", url, {"draft": "1", "agent_id": "", "message": "Hello"})
    page = html(response)
    assert "No CLI available" in page and not Chat.objects.exists()
    assert ">Hello</textarea>" in page


# --- popup ------------------------------------------------------------------------------


def test_reload_with_chat_in_the_url_opens_the_popup(client, workspace, chat):
    chat_message_send(chat=chat, message="What do we ship **first**?")
    page = tab(client, workspace, f"&chat={chat.id}")
    assert '<dialog id="chat-dialog"' in page and "data-open-on-load" in page
    assert "Plan the launch" in page and "<strong>first</strong>" in page  # markdown


def test_unknown_chat_in_the_url_says_so(client, workspace, chat):
    from workspaces.services import workspace_create

    other = chat_create(workspace=workspace_create(title="Other"))
    for chat_id in ("missing", other.id):
        page = tab(client, workspace, f"&chat={chat_id}")
        assert "That chat no longer exists." in page and "data-open-on-load" not in page


def test_popup_renders_messages_oldest_first_with_authors(client, workspace, agents, chat):
    chat_message_send(chat=chat, message="First")
    ChatQueueItem.objects.update(status=QueueStatus.COMPLETED)
    chat_message_add_agent(chat=chat, message="Second <script>x</script>", actions=None)
    chat_message_add_system(chat=chat, message="CLI exited with code 1: boom")
    chat_message_add_system(chat=chat, message="Stopped by user")
    page = popup(client, chat)
    assert page.index("First") < page.index("Second") < page.index("CLI exited")
    assert "<script>x</script>" not in page
    assert "chat-msg--system chat-msg--error" in page  # errors are tinted
    assert "chat-msg--system chat-msg--info" in page
    assert page.count('class="chat-msg__author">You<') == 1
    assert re.search(r"chat-msg__author\">.*?Malamar</span>", page, re.S)


def test_agent_actions_show_as_cards_and_a_task_link(client, workspace, chat):
    actions = [
        {"type": "create_task", "summary": "Write docs", "task_id": "T1", "result": "ok"},
        {"type": "delete_agent", "agent_id": "x", "result": "failed", "error": "not found"},
    ]
    chat_message_add_agent(chat=chat, message="", actions=actions)
    page = popup(client, chat)
    assert 'data-action-type="create_task" data-task-id="T1"' in page
    assert f'href="/workspaces/{workspace.id}/?tab=tasks&amp;task=T1"' in page
    assert "Failed: not found" in page


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
    assert 'class="chat-title__text">Launch plan<' in html(response)
    assert triggers(response) == {}  # its chat.updated event refreshes the rest


def test_rename_to_nothing_keeps_the_form_open_with_the_error(client, chat):
    response = hx(client, "post", f"/chats/{chat.id}/rename/", {"title": "   "})
    page = html(response)
    assert response.status_code == 200 and "data-editing" in page
    assert "Title is required" in page and 'aria-describedby="chat-title-input_error"' in page
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
    page = html(response)
    assert f'<option value="{agents[0].id}" selected>Planner' in page
    assert '<option value="" selected>Default · Claude Code' in page
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
    page = html(response)
    assert '<option value="gemini" selected>Gemini CLI' in page
    assert "Codex CLI (unavailable)" in page  # unhealthy CLIs are marked
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
    assert "></textarea>" in page  # cleared
    # The composer follows the state #chat-live shows (chats.css: Stop while busy).
    live = html(hx(client, "get", f"/chats/{chat.id}/", target="chat-live"))
    assert "data-busy" in live and "is answering…" in live
    assert f'data-chat-current="{chat.id}"' in live
    # The live trace: activity.js adds runs that start into this timeline.
    assert f'data-runs-chat="{chat.id}" data-runs-running-only' in live


def test_empty_message_keeps_the_text_box_with_the_error(client, chat):
    page = html(hx(client, "post", f"/chats/{chat.id}/send/", {"message": "  "}))
    assert "Write a message first" in page and 'aria-invalid="true"' in page
    assert not ChatMessage.objects.exists()


def test_second_message_while_answering_is_refused_with_the_text_kept(client, chat):
    hx(client, "post", f"/chats/{chat.id}/send/", {"message": "One"})
    page = html(hx(client, "post", f"/chats/{chat.id}/send/", {"message": "Two"}))
    assert "still answering" in page and ">Two</textarea>" in page
    assert messages_of(chat) == [("user", "One")]


def test_no_cli_available_blocks_sending(client, chat):
    for cli in ("claude", "codex", "gemini", "opencode"):
        CliHealth.objects.create(cli_type=cli, status="unhealthy", error="gone")
    live = html(hx(client, "get", f"/chats/{chat.id}/", target="chat-live"))
    assert "No CLI available" in live and "data-blocked" in live
    page = popup(client, chat)  # its Send follows this state (chats.css)
    assert re.search(r"data-chat-state[^>]*data-blocked", page)
    page = html(hx(client, "post", f"/chats/{chat.id}/send/", {"message": "Hi"}))
    assert "No CLI available" in page and not ChatMessage.objects.filter(role="user").exists()


def test_idle_chat_has_no_pending_region(client, chat):
    live = html(hx(client, "get", f"/chats/{chat.id}/", target="chat-live"))
    assert "data-runs-chat" not in live and "chat-pending" not in live


def test_stop_cancels_every_pending_answer(client, chat):
    hx(client, "post", f"/chats/{chat.id}/send/", {"message": "Hello"})
    response = hx(client, "post", f"/chats/{chat.id}/stop/")
    assert not ChatQueueItem.objects.filter(status=QueueStatus.QUEUED).exists()
    page = html(response)
    assert "Stopped by user" in page and "data-busy" not in page.split(">", 1)[0]


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
    page = html(response)
    assert "notes.txt" in page and "evil.md" in page and "chat-msg--upload" in page
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
    assert "No conversations yet" in html(response)  # the refreshed list
    assert events["malamar:toast"]["message"] == "Deleted “Plan the launch”"


def test_delete_without_htmx_goes_back_to_the_list(client, workspace, chat):
    response = client.post(f"/chats/{chat.id}/delete/")
    assert response.status_code == 302 and response.url.endswith("?tab=chat")


# --- group chat -------------------------------------------------------------------------


def test_pills_show_participants_and_add_removes(client, agents, chat):
    page = popup(client, chat)
    assert page.count('class="chat-pill__toggle"') == 1
    addable = re.search(r'aria-label="Add to this chat">(.*?)</div>', page, re.S).group(1)
    assert "Planner" in addable and "Malamar" not in addable
    response = hx(client, "post", f"/chats/{chat.id}/participants/", {"agent_id": agents[0].id})
    page = html(response)
    assert page.count('class="chat-pill__toggle"') == 2 and "Planner joined the chat" in page
    planner = ChatParticipant.objects.get(agent=agents[0])
    page = html(hx(client, "post", f"/chats/{chat.id}/participants/{planner.id}/remove/"))
    assert page.count('class="chat-pill__toggle"') == 1 and "Planner left the chat" in page


def test_adding_twice_and_removing_the_last_are_toasts(client, chat):
    response = hx(client, "post", f"/chats/{chat.id}/participants/", {"agent_id": ""})
    assert "already in this chat" in triggers(response)["malamar:toast"]["message"]
    only = chat.participants.get()
    response = hx(client, "post", f"/chats/{chat.id}/participants/{only.id}/remove/")
    assert "at least one agent" in triggers(response)["malamar:toast"]["message"]


def test_toggle_pills_down_to_solo_mode(client, agents, chat):
    malamar = chat.participants.get()
    url = f"/chats/{chat.id}/participants/{malamar.id}/toggle/"
    page = html(hx(client, "post", url, {"enabled": "0"}))
    malamar.refresh_from_db()
    assert not malamar.enabled and 'aria-pressed="false"' in page
    assert "All agents are muted" in page
    # Solo mode: the message is stored, nothing runs.
    hx(client, "post", f"/chats/{chat.id}/send/", {"message": "note to self"})
    assert messages_of(chat) == [("user", "note to self")]
    assert not ChatQueueItem.objects.exists()
    page = html(hx(client, "post", url, {"enabled": "1"}))
    assert 'aria-pressed="true"' in page and "All agents are muted" not in page
    assert hx(client, "post", url, {"enabled": "maybe"}).status_code == 200


def test_lead_agent_choices_leave_out_other_participants(client, agents, chat):
    chat_participant_add(chat=chat, agent_id=agents[0].id)
    head = html(hx(client, "get", f"/chats/{chat.id}/", target="chat-head"))
    lead = re.search(r'<select id="chat-agent".*?</select>', head, re.S).group(0)
    assert "Planner" not in lead and "Implementer" in lead and "Lead agent" in head
    response = hx(client, "post", f"/chats/{chat.id}/agent/", {"agent_id": agents[0].id})
    assert "already in this chat" in triggers(response)["malamar:toast"]["message"]


def test_include_checkbox_saves_at_once(client, chat):
    message = chat_message_send(chat=chat, message="Ignore me")
    url = f"/chats/{chat.id}/messages/{message.id}/included/"
    page = popup(client, chat)
    assert re.search(rf'id="include-{message.id}"[^>]*checked', page)
    response = hx(client, "post", url, {})  # unchecked: no value
    assert response.status_code == 204
    message.refresh_from_db()
    assert message.included is False
    assert "is-excluded" in popup(client, chat)
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
    page = popup(client, chat)
    assert "line one<br" in page and "code a\ncode b" in page


def test_an_upload_previews_as_its_file_name(db, workspace):
    from chats.selectors import message_preview

    text = "User has uploaded /tmp/malamar/chat_x/style guide.md"
    assert message_preview("system", text) == "Uploaded style guide.md"
    assert message_preview("user", text) == text  # only the system note is rewritten
