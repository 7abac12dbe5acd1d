"""The page shell: layout, CSP-ready front end, CLI warning, times, errors, static files."""

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.conf import settings
from django.utils import timezone
from django_eventstream import send_event
from django_eventstream.storage import DjangoModelStorage

from core.events import EVENT_TYPES
from core.templatetags.malamar import first_paragraph, relative_time, reltime
from runner.models import CliHealth
from tests.htmltree import parse
from tests.pages import html, hx

pytestmark = pytest.mark.django_db


def all_pages(workspace):
    return [
        "/",
        f"/workspaces/{workspace.id}/",
        f"/workspaces/{workspace.id}/?tab=chat",
        f"/workspaces/{workspace.id}/?tab=agents",
        f"/workspaces/{workspace.id}/settings/",
        "/settings/",
    ]


def test_every_page_has_the_shell(client, workspace, agents):
    for url in all_pages(workspace):
        page = parse(html(client.get(url)))
        assert page.find("skip-link", tag="a", href="#main").text == "Skip to content", url
        assert page.by_id("main").tag == "main", url
        nav = page.find("site-nav", tag="nav")
        links = [(link.attrs["href"], link.text) for link in nav.find_all(tag="a")]
        assert links == [("/", "Workspaces"), ("/settings/", "Settings")], url
        assert page.find(tag="button", data_theme_toggle="") is not None, url
        assert page.find(tag="html").attrs["lang"] == "en", url


def test_front_end_is_csp_ready(client, workspace, agents):
    for url in all_pages(workspace):
        page = html(client.get(url))
        # Every script is an external file; none inline, none from a CDN.
        scripts = re.findall(r"<script\b[^>]*>", page)
        assert scripts, url
        for tag in scripts:
            src = re.search(r'src="([^"]+)"', tag)
            assert src, f"inline script on {url}: {tag}"
            assert src.group(1).startswith("/static/"), tag
        assert "hx-on" not in page, url
        assert " style=" not in page, url  # no inline styles either
        assert re.search(r"hx-trigger=\"[^\"]*\[", page) is None, f"trigger filter on {url}"
        assert '"allowEval": false' in page and '"includeIndicatorStyles": false' in page


def test_theme_is_applied_before_styles_and_htmx_comes_from_django_htmx(client):
    page = html(client.get("/"))
    head = page.split("</head>")[0]
    theme_init = head.index("/static/js/theme-init.js")
    assert theme_init < head.index("/static/css/app.css")
    assert "defer" not in re.search(r"<script[^>]*theme-init[^>]*>", head).group(0)
    assert "/static/django_htmx/htmx-2.min.js" in head
    assert '<meta name="color-scheme" content="light dark">' in head


def test_body_carries_csrf_header_and_live_event_names(client):
    page = html(client.get("/"))
    body = re.search(r"<body[^>]*>", page, re.S).group(0)
    assert re.search(r"hx-headers='\{\"X-CSRFToken\": \"[A-Za-z0-9]+\"\}'", body)
    stream = parse(page).by_id("live-stream").attrs
    assert stream["hx-ext"] == "sse" and stream["sse-connect"] == "/api/events"
    names = re.search(r'data-live-events="([^"]*)"', body).group(1).split()
    assert set(names) == set(EVENT_TYPES)


def test_static_files_are_served(client):
    for path in ("/static/css/app.css", "/static/js/app.js", "/static/js/theme-init.js"):
        response = client.get(path)
        assert response.status_code == 200, path
    assert client.get("/static/django_htmx/htmx-2.min.js").status_code == 200


def cli_warning(response) -> str | None:
    """The text of the header's no-CLI warning, None without one."""
    warning = parse(html(response)).find("global-warning")
    return warning.text if warning is not None else None


def test_no_cli_warning_while_any_cli_is_available_or_unchecked(client):
    assert cli_warning(client.get("/")) is None
    for cli in ("claude", "codex", "gemini"):
        CliHealth.objects.create(cli_type=cli, status="unhealthy", error="missing")
    assert cli_warning(client.get("/")) is None  # OpenCode: not checked yet


def test_header_warns_when_no_cli_is_healthy(client, workspace):
    for cli in ("claude", "codex", "gemini", "opencode"):
        CliHealth.objects.create(cli_type=cli, status="unhealthy", error="missing")
    for url in ("/", f"/workspaces/{workspace.id}/", "/settings/"):
        page = parse(html(client.get(url)))
        warning = page.by_id("cli-warning").find("global-warning")
        link = warning.find(tag="a", href="/settings/")
        assert link.text == "No CLIs available - configure in settings", url
    fragment = client.get("/settings/cli-warning/", HTTP_HX_REQUEST="true")
    assert cli_warning(fragment) == "No CLIs available - configure in settings"
    assert parse(html(fragment)).find(tag="html") is None
    CliHealth.objects.filter(cli_type="codex").update(status="healthy")
    assert cli_warning(client.get("/settings/cli-warning/")) is None


NOW = datetime(2026, 6, 20, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("delta", "expected"),
    [
        (timedelta(seconds=10), "just now"),
        (timedelta(minutes=5), "5 min ago"),
        (timedelta(minutes=59), "59 min ago"),
        (timedelta(hours=1), "1 hour ago"),
        (timedelta(hours=3), "3 hours ago"),
        (timedelta(days=1), "1 day ago"),
        (timedelta(days=2), "2 days ago"),
        (timedelta(days=6, hours=23), "6 days ago"),
    ],
)
def test_relative_time_follows_the_spec_table(delta, expected):
    assert relative_time(NOW - delta, NOW) == expected


def test_relative_time_uses_dates_after_a_week():
    assert relative_time(datetime(2026, 1, 15, 9, 0, tzinfo=UTC), NOW) == "Jan 15"
    assert relative_time(datetime(2025, 1, 15, 9, 0, tzinfo=UTC), NOW) == ("Jan 15, 2025")


def test_time_tag_has_iso_datetime_fallback_text_and_full_timestamp():
    moment = timezone.now() - timedelta(minutes=5)
    tag = reltime(moment, prefix="Active ")
    assert f'datetime="{moment.isoformat()}"' in tag
    assert "data-relative" in tag and ">Active 5 min ago</time>" in tag
    assert re.search(r'title="\w{3} \d+, \d{4}, \d\d:\d\d UTC"', tag)


def test_error_pages_are_styled_pages_outside_the_api(client):
    response = client.get("/workspaces/doesnotexist/")
    assert response.status_code == 404
    page = parse(html(response))
    error = page.find("empty-state--page")
    assert error.find("empty-state__title").text == "Not found"
    assert error.find(tag="a", href="/").text == "Back to workspaces"
    styles = [link.attrs["href"] for link in page.find_all(tag="link", rel="stylesheet")]
    assert any(href.startswith("/static/css/app.css") for href in styles)
    api = client.get("/api/workspaces/doesnotexist")
    assert api.status_code == 404 and api.json()["error"]["code"] == "NOT_FOUND"


def test_pages_vary_on_htmx_headers(client, workspace):
    for url in ("/", f"/workspaces/{workspace.id}/"):
        vary = client.get(url).headers.get("Vary", "")
        assert "HX-Request" in vary, url


def test_first_paragraph_makes_the_agent_snippet():
    assert first_paragraph("\n\nRole line.\nMore.\n\n- rule one\n- rule two") == "Role line.\nMore."
    assert first_paragraph("") == ""


def test_full_page_remembers_the_stream_position_fragments_and_api_do_not_ask(client, monkeypatch):
    send_event(settings.EVENTS_CHANNEL, "task.updated", {"task_id": "t"})
    newest = DjangoModelStorage().get_current_id(settings.EVENTS_CHANNEL)
    asked = []
    original = DjangoModelStorage.get_current_id

    def counting(self, channel):
        asked.append(channel)
        return original(self, channel)

    monkeypatch.setattr(DjangoModelStorage, "get_current_id", counting)
    body = re.search(r"<body[^>]*>", html(client.get("/")), re.S).group(0)
    assert f'data-live-from="{settings.EVENTS_CHANNEL}:{newest}"' in body
    assert len(asked) == 1
    assert hx(client, "get", "/").status_code == 200
    assert client.get("/api/workspaces").status_code == 200
    assert len(asked) == 1, "an htmx fragment or an API call read the stream position"
