"""Rules that several places need, each written once (issue 17): the workspace link format,
the "No CLI available" wording and author display names."""

import re
from html import unescape
from pathlib import Path

from chats.cli_notes import no_cli_message, no_cli_reason
from chats.models import ChatParticipant
from chats.services import chat_create
from core.actors import DELETED_AGENT_NAME, author_name
from runner.models import CliHealth
from tasks.services import task_create
from tests.pages import html, hx
from workspaces.links import workspace_tab_url

STATIC_JS = Path(__file__).resolve().parent.parent / "malamar_site" / "static" / "js"


def _hrefs(page: str) -> set[str]:
    return {unescape(href) for href in re.findall(r'href="([^"]*)"', page)}


def test_workspace_page_links_are_built_by_the_one_helper(client, workspace):
    task = task_create(workspace=workspace, summary="A task")
    page = html(client.get(workspace_tab_url(workspace.id, "tasks")))
    hrefs = _hrefs(page)
    for tab in ("tasks", "chat", "agents"):
        assert workspace_tab_url(workspace.id, tab) in hrefs
    assert workspace_tab_url(workspace.id, "tasks", task=task.id) in hrefs
    assert workspace_tab_url(workspace.id, "chat", start="malamar") in hrefs


def test_the_chat_search_clear_link_is_the_helpers(client, workspace):
    page = html(hx(client, "get", f"/workspaces/{workspace.id}/chats/", {"q": "a&b#c"}))
    assert workspace_tab_url(workspace.id, "chat") in _hrefs(page)


def test_scripts_build_workspace_links_in_one_place():
    writers = sorted(p.name for p in STATIC_JS.glob("*.js") if "?tab=" in p.read_text())
    assert writers == []  # live.js builds them with URLSearchParams, the others call it
    assert "window.malamarItemLink = itemLink" in (STATIC_JS / "live.js").read_text()


def test_author_names():
    names = {"a1": "Planner"}
    assert author_name("user", None, names) == "User"
    assert author_name("agent", "a1", names) == "Planner"
    assert author_name("agent", "gone", names) == DELETED_AGENT_NAME == "(Deleted Agent)"
    assert author_name("system", None, names) == "System"


def test_no_cli_wording():
    assert no_cli_message([]).startswith("No CLI available: Every CLI failed")
    assert no_cli_reason(["Codex CLI"]).startswith("Codex CLI failed its health check")
    assert "failed their health check" in no_cli_reason(["Codex CLI", "Gemini CLI"])


def test_the_chat_banner_says_what_the_send_refusal_says(client, workspace):
    chat = chat_create(workspace=workspace, agent=None)
    for cli in ("claude", "codex", "gemini", "opencode"):
        CliHealth.objects.create(cli_type=cli, status="unhealthy", error="gone")
    assert ChatParticipant.objects.filter(chat=chat).exists()
    live = unescape(html(hx(client, "get", f"/chats/{chat.id}/", target="chat-live")))
    refused = unescape(html(hx(client, "post", f"/chats/{chat.id}/send/", {"message": "Hi"})))
    reason = no_cli_reason([])
    assert reason in live and reason in refused
