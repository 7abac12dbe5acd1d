"""Hostile input to the pages (form posts, htmx, query strings): never a 500.

Every page route is found from the URL configuration, so a new page is covered without
touching this file.
"""

import dataclasses
import json
import re
from pathlib import Path
from urllib.parse import quote_from_bytes

import pytest
from django import forms
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone

from agents.models import Agent
from chats.models import Chat, ChatParticipant
from chats.services import chat_create, chat_message_add_system
from runner.models import AgentRun
from tasks.models import Task
from tests.htmltree import parse
from tests.pages import element_text, field_error_is_tied, html, hx, triggers
from workspaces.models import Workspace

pytestmark = pytest.mark.django_db

SKIPPED = ("api/", "admin/", "login/", "logout/")
FIELDS = (
    "title",
    "description",
    "name",
    "instruction",
    "cli_type",
    "summary",
    "content",
    "message",
    "agent_id",
    "agent_ids",
    "direction",
    "status",
    "confirm_title",
    "working_directory_mode",
    "working_directory_path",
    "retention_days",
    "stall_kill_minutes",
    "included",
    "enabled",
    "draft",
    "binary_path",
    "env_name",
    "env_value",
    "mailgun_api_key",
    "mailgun_domain",
    "mailgun_region",
    "mailgun_from_email",
    "mailgun_to_email",
    "webhook_urls",
    "stall_warning_minutes",
    "password",
    "q",
)


def _form_fields() -> set[str]:
    """Every field of every form the pages use: forms added later are covered too."""
    get_resolver().url_patterns  # noqa: B018 (imports every view, and so every form)
    classes, seen = list(forms.BaseForm.__subclasses__()), set()
    while classes:
        cls = classes.pop()
        if cls not in seen:
            seen.add(cls)
            classes += cls.__subclasses__()
    return {
        name
        for cls in seen
        if cls.__module__.split(".")[0] in APPS
        for name in getattr(cls, "base_fields", {})
    }


def _query_names() -> set[str]:
    """Every query parameter a view reads (`request.GET.get("name"…)` in the source)."""
    pattern = re.compile(r"request\.GET\.get(?:list)?\(\s*\"(\w+)\"")
    return {
        name
        for app in APPS
        for source in (ROOT / app).rglob("*.py")
        for name in pattern.findall(source.read_text())
    }


APPS = ("agents", "chats", "core", "malamar_site", "notifications", "runner", "tasks", "workspaces")
APPS += ("worker",)
ROOT = Path(__file__).resolve().parent.parent
FIELDS = tuple(sorted(set(FIELDS) | _form_fields()))
QUERY_NAMES = tuple(sorted({"q", "task", "chat", "tab", "all", "p"} | _query_names()))


def test_the_field_and_query_lists_come_from_the_code():
    assert {"model", "fallback_cli_type", "base_branch", "blocked_by"} <= set(FIELDS)
    assert {"run", "path", "start"} <= set(QUERY_NAMES)


def _routes(resolver: URLResolver, prefix: str = "") -> list[str]:
    routes = []
    for entry in resolver.url_patterns:
        route = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            routes += _routes(entry, route)
        elif isinstance(entry, URLPattern) and not route.startswith(SKIPPED):
            routes.append(route)
    return routes


PAGE_ROUTES = sorted(set(_routes(get_resolver())))


def test_the_page_list_is_not_empty():
    assert len(PAGE_ROUTES) >= 40
    assert "agents/<str:agent_id>/edit/" in PAGE_ROUTES


@pytest.fixture
def client():
    return Client(raise_request_exception=False)


@pytest.fixture
def ids(workspace, agents, task):
    chat = chat_create(workspace=workspace)
    message = chat_message_add_system(chat=chat, message="hello")
    AgentRun.objects.create(  # a run that exists: its pages read their parameters
        id="r" * 21,
        workspace=workspace,
        task=task,
        agent_name="Planner",
        cli_type="claude",
        status="succeeded",
        started_at=timezone.now(),
    )
    return {
        "workspace_id": workspace.id,
        "agent_id": agents[0].id,
        "task_id": task.id,
        "chat_id": chat.id,
        "participant_id": ChatParticipant.objects.get(chat=chat).id,
        "message_id": message.id,
        "run_id": "r" * 21,
        "cli_type": "claude",
        "status": "todo",
        "token_id": "t" * 21,
        "draft_id": "d" * 21,
    }


def _url(route: str, ids: dict) -> str:
    return "/" + re.sub(r"<(?:\w+:)?(\w+)>", lambda m: ids[m.group(1)], route)


def _form(value: bytes) -> bytes:
    """A urlencoded body with `value` (raw bytes, maybe not UTF-8) in every field."""
    encoded = quote_from_bytes(value).encode()
    return b"&".join(name.encode() + b"=" + encoded for name in FIELDS)


HOSTILE = {
    "nul": _form(b"a\x00b"),
    "invalid-utf8": _form(b"\xff\xfe \xed\xa0\x80 \xc3"),  # incl. an encoded lone surrogate
    "long": _form(b"n" * 50_000),
}


@pytest.mark.pg
@pytest.mark.parametrize("route", PAGE_ROUTES)
@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_hostile_form_posts_are_never_a_500(client, ids, route, kind):
    url = _url(route, ids)
    for headers in ({}, {"HTTP_HX_REQUEST": "true"}):
        response = client.post(
            url, HOSTILE[kind], content_type="application/x-www-form-urlencoded", **headers
        )
        assert response.status_code < 500, (url, headers, response.content[:300])


@pytest.mark.pg
@pytest.mark.parametrize("route", PAGE_ROUTES)
def test_hostile_query_strings_are_never_a_500(client, ids, route):
    url = _url(route, ids)
    for value in ("a%00b", "%FF%FE", "x" * 60_000):
        query = "&".join(f"{name}={value}" for name in QUERY_NAMES)
        for headers in ({}, {"HTTP_HX_REQUEST": "true"}):
            response = client.get(f"{url}?{query}", **headers)
            assert response.status_code < 500, (url, value[:10], response.content[:300])


def test_a_nul_character_in_the_address_is_a_400_with_a_message(client, workspace, task):
    # PostgreSQL refuses NUL even in a lookup: without this, a 500 there (a 404 on SQLite).
    page = client.get(f"/workspaces/{workspace.id}/?task=a%00b")
    assert page.status_code == 400
    assert "task: contains a NUL character" in error_page_text(page)
    toast = client.get("/workspaces/a%00b/", HTTP_HX_REQUEST="true")
    assert (toast.status_code, html(toast)) == (400, "The address contains a NUL character")
    api = client.get(f"/api/tasks/{task.id[:-1]}%00")
    assert api.status_code == 400
    assert api.json()["error"]["message"] == "The address contains a NUL character"


def test_names_and_titles_posted_with_a_nul_character_are_refused_with_a_message(client, ids):
    response = hx(client, "post", "/settings/tokens/", {"name": "to\x00ken"})
    assert "Name contains a NUL character" in json.dumps(triggers(response))
    clone = f"/workspaces/{ids['workspace_id']}/clone/"
    response = client.post(clone, {"title": "co\x00py"}, follow=True)
    assert "Title contains a NUL character" in flash_messages(response)
    assert Workspace.objects.count() == 1


def error_page_text(response) -> str:
    """The error page's title and text."""
    page = parse(html(response)).find("empty-state--page")
    return f"{page.find('empty-state__title', tag='h1').text} {page.find('empty-state__text').text}"


def flash_messages(response) -> list[str]:
    return [item.text for item in parse(html(response)).by_id("flash-messages").find_all(tag="li")]


def _card_titles(response) -> list[str]:
    return [el.text for el in parse(html(response)).find_all("workspace-card__title")]


@pytest.mark.pg
def test_searching_with_a_huge_query_finds_nothing(client, workspace):
    assert _card_titles(client.get("/", {"q": "P" * 60_000})) == []
    assert _card_titles(client.get("/", {"q": "proj"})) == [workspace.title]


# --- names: form errors, nothing stored ------------------------------------------------------


def test_an_over_long_agent_name_is_a_form_error_on_the_edit_and_new_pages(client, agents):
    agent = agents[0]
    long = "N" * 50_000
    data = {"name": long, "instruction": "x", "cli_type": "claude"}
    response = hx(client, "post", f"/agents/{agent.id}/edit/", data)
    assert response.status_code == 200 and field_error_is_tied(html(response), "id_name")
    assert "at most 100 characters" in element_text(html(response), "id_name_error")
    response = client.post(f"/agents/{agent.id}/edit/", data)  # without JavaScript
    assert response.status_code == 422 and field_error_is_tied(html(response), "id_name")
    response = hx(client, "post", f"/workspaces/{agent.workspace_id}/agents/new/", data)
    assert field_error_is_tied(html(response), "id_name")
    assert Agent.objects.get(id=agent.id).name == "Planner"
    assert not Agent.objects.filter(name=long).exists()
    form = parse(html(hx(client, "get", f"/agents/{agent.id}/edit/")))
    assert form.by_id("id_name").attrs["maxlength"] == "100"


def test_over_long_titles_and_summaries_are_form_errors(client, workspace, task):
    long = "T" * 50_000
    response = client.post("/workspaces/new/", {"title": long})
    assert "at most 200 characters" in element_text(html(response), "id_title_error")
    assert not Workspace.objects.filter(title=long).exists()
    response = hx(client, "post", f"/workspaces/{workspace.id}/tasks/new/", {"summary": long})
    assert "at most 500 characters" in element_text(html(response), "task_new_summary_error")
    response = hx(client, "post", f"/tasks/{task.id}/summary/edit/", {"summary": long})
    assert "at most 500 characters" in element_text(html(response), "task_summary_summary_error")
    assert not Task.objects.filter(summary=long).exists()
    chat = chat_create(workspace=workspace)
    response = hx(client, "post", f"/chats/{chat.id}/rename/", {"title": long})
    assert response.status_code < 500
    assert Chat.objects.get(id=chat.id).title == "Untitled chat"


def test_workspace_settings_numbers_out_of_range_are_form_errors(client, workspace):
    data = {"title": "Project X", "working_directory_mode": "temp"}
    data |= {"retention_days": "100000000000000000000", "stall_kill_minutes": "1e400"}
    response = hx(client, "post", f"/workspaces/{workspace.id}/settings/", data)
    page = html(response)
    assert field_error_is_tied(page, "id_retention_days")
    assert "at most 36500 days" in element_text(page, "id_retention_days_error")
    assert field_error_is_tied(page, "id_stall_kill_minutes")
    assert Workspace.objects.get(id=workspace.id).retention_days == 7


# --- request size ----------------------------------------------------------------------------


@pytest.fixture
def small_limit(settings):
    settings.CONFIG = dataclasses.replace(settings.CONFIG, max_json_bytes=4096)
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 4096


def test_a_form_post_over_the_limit_is_a_413_page(client, workspace, small_limit):
    response = client.post("/workspaces/new/", {"title": "Big", "description": "d" * 5_000})
    assert response.status_code == 413
    assert "at most 4 KB per request (MALAMAR_MAX_JSON_BYTES)" in error_page_text(response)
    assert not Workspace.objects.filter(title="Big").exists()


def test_an_htmx_post_over_the_limit_gets_the_error_toast(client, task, small_limit):
    response = hx(client, "post", f"/tasks/{task.id}/comments/new/", {"content": "c" * 5_000})
    assert response.status_code == 413
    assert response.headers["HX-Reswap"] == "none"
    toast = triggers(response)["malamar:toast"]
    assert toast["level"] == "error" and "MALAMAR_MAX_JSON_BYTES" in toast["message"]
    assert not task.comments.exists()


def test_a_body_longer_than_django_reads_is_a_413_page_too(client, workspace, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1024  # the declared-length check lets it through
    response = hx(client, "post", f"/workspaces/{workspace.id}/tasks/new/", {"summary": "s" * 2000})
    assert response.status_code == 413 and "malamar:toast" in triggers(response)
