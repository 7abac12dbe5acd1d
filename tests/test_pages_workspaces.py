"""Workspace pages: list and search, create, detail tabs and banners, settings, delete."""

import re
from html.parser import HTMLParser

import pytest

from agents.services import agent_create
from core.actors import SYSTEM
from runner.models import CliHealth
from tasks.services import task_create, task_status_set
from tests.conftest import error_of
from tests.htmltree import parse
from tests.pages import element_text, elements, field_error_is_tied, html, hx, live_events, triggers
from workspaces.models import Workspace
from workspaces.services import workspace_create, workspace_update

pytestmark = pytest.mark.django_db


# --- list ----------------------------------------------------------------------------------


def card_titles(client) -> list[str]:
    return [title.text for title in parse(html(client.get("/"))).find_all("workspace-card__title")]


def test_empty_list_invites_to_create_a_workspace(client):
    page = parse(html(client.get("/")))
    assert page.find("empty-state__title").text == "No workspaces yet"
    invite = page.find("empty-state").find(tag="button", data_dialog_open="create-dialog")
    assert invite.text == "Create Workspace"
    assert page.by_id("create-dialog").tag == "dialog"
    assert "hidden" in page.find("search", tag="form").attrs  # nothing to search yet


def test_cards_show_title_snippet_counts_agents_and_activity(client, workspace, agents):
    task_create(workspace=workspace, summary="One")
    running = task_create(workspace=workspace, summary="Two")
    task_status_set(task=running, status="in_progress", actor=SYSTEM)
    card = parse(html(client.get("/"))).find("workspace-card", data_workspace=workspace.id)
    title = card.find("workspace-card__title").find(tag="a")
    assert (title.text, title.attrs["href"]) == ("Project X", f"/workspaces/{workspace.id}/")
    assert card.find("workspace-card__desc").text == "Build things"
    counts = {
        count.attrs["class"].split()[1].removeprefix("status--"): count.find("status-count__n").text
        for count in card.find_all("status-count", tag="li")
    }
    assert counts == {"todo": "1", "in_progress": "1", "in_review": "0", "done": "0"}
    foot = card.find("workspace-card__foot").find_all("meta")
    assert foot[0].text == "3 agents"
    time = foot[1].find(tag="time")
    assert time.text == "Active just now" and time.attrs["datetime"]
    assert "data-relative" in time.attrs


@pytest.mark.pg
def test_list_is_ordered_by_last_activity(client, workspace):
    workspace_create(title="Newer")
    assert card_titles(client) == ["Newer", "Project X"]
    task_create(workspace=workspace, summary="bump")
    assert card_titles(client) == ["Project X", "Newer"]


@pytest.mark.pg
def test_search_filters_by_title_as_a_fragment(client, workspace):
    workspace_create(title="Marketing site")
    response = hx(client, "get", "/?q=market", target="workspace-results")
    page = parse(html(response))
    assert page.find(tag="html") is None and page.by_id("workspace-results") is None  # inner
    assert [title.text for title in page.find_all("workspace-card__title")] == ["Marketing site"]
    full = parse(html(client.get("/?q=market")))
    assert full.find(tag="html") is not None and full.by_id("workspace-search").attrs["value"] == (
        "market"
    )
    assert [title.text for title in full.find_all("workspace-card__title")] == ["Marketing site"]


def test_search_without_results_says_so(client, workspace):
    page = parse(html(hx(client, "get", "/?q=zzz", target="workspace-results")))
    assert page.find("empty-state__title").text == "No workspaces match “zzz”"
    assert page.find(tag="a", href="/").text == "Clear search"


def test_create_workspace_redirects_to_it(client):
    response = hx(client, "post", "/workspaces/new/", {"title": "  Alpha ", "description": "Do"})
    workspace = Workspace.objects.get()
    assert (workspace.title, workspace.description) == ("Alpha", "Do")
    assert response.headers["HX-Redirect"] == f"/workspaces/{workspace.id}/"


def test_create_workspace_requires_a_title_and_ties_the_error_to_it(client):
    response = hx(client, "post", "/workspaces/new/", {"title": "   "})
    assert response.status_code == 200  # a fragment with errors (4xx would log console errors)
    page = html(response)
    assert parse(page).find(tag="html") is None and parse(page).by_id("create-form") is not None
    assert element_text(page, "id_title_error") == "Title is required"
    assert field_error_is_tied(page, "id_title")
    assert not Workspace.objects.exists()


def test_create_workspace_without_javascript(client):
    response = client.post("/workspaces/new/", {"title": ""})
    assert response.status_code == 422
    assert element_text(html(response), "id_title_error") == "Title is required"
    assert "data-open-on-load" in parse(html(response)).by_id("create-dialog").attrs
    response = client.post("/workspaces/new/", {"title": "Beta"})
    assert response.status_code == 302
    assert response.url == f"/workspaces/{Workspace.objects.get().id}/"


# --- detail --------------------------------------------------------------------------------


def test_detail_has_tabs_and_part_two_placeholders(client, workspace, agents):
    page = parse(html(client.get(f"/workspaces/{workspace.id}/")))
    assert page.find("page-title", tag="h1").text == "Project X"
    assert page.find(data_workspace_id=workspace.id) is not None
    tabs = [page.by_id(f"tab-{tab}") for tab in ("tasks", "chat", "agents")]
    assert [tab.attrs.get("aria-current") for tab in tabs] == ["page", None, None]
    assert page.by_id("tasks-panel") is not None
    chat = parse(html(client.get(f"/workspaces/{workspace.id}/?tab=chat")))
    assert chat.by_id("chat-panel") is not None
    unknown = parse(html(client.get(f"/workspaces/{workspace.id}/?tab=nope")))
    assert unknown.by_id("tasks-panel") is not None
    assert page.find(tag="a", href=f"/workspaces/{workspace.id}/settings/") is not None


def test_switching_tabs_returns_only_the_tabs_fragment(client, workspace, agents):
    response = hx(client, "get", f"/workspaces/{workspace.id}/?tab=agents", target="workspace-tabs")
    page = parse(html(response))
    [fragment] = [child for child in page.children if not isinstance(child, str)]
    assert fragment.attrs["id"] == "workspace-tabs"  # the fragment alone, no page around it
    assert page.by_id("tab-agents").attrs["aria-current"] == "page"
    assert "Planner" in page.by_id("agents-panel").text


def test_unknown_workspace_is_a_404(client):
    assert client.get("/workspaces/nope/").status_code == 404
    assert client.get("/workspaces/nope/settings/").status_code == 404


def banners(page) -> dict:
    """The banners of a parsed page or fragment, by title."""
    return {banner.find("banner__title").text: banner for banner in page.find_all("banner")}


def test_no_agents_banner_prompts_to_chat_with_malamar(client, workspace):
    page = parse(html(client.get(f"/workspaces/{workspace.id}/")))
    banner = banners(page.by_id("workspace-banners"))["This workspace has no agents"]
    chat = f"/workspaces/{workspace.id}/?tab=chat&start=malamar"
    assert banner.find(tag="a", href=chat).text == "Chat with Malamar"
    agent_create(workspace=workspace, name="Solo", instruction="Work")
    page = parse(html(client.get(f"/workspaces/{workspace.id}/banners/")))
    assert "This workspace has no agents" not in banners(page)


def test_banner_when_an_agents_cli_is_unhealthy(client, workspace, agents):
    url = f"/workspaces/{workspace.id}/banners/"
    assert not [title for title in banners(parse(html(client.get(url)))) if "unavailable" in title]
    CliHealth.objects.create(cli_type="claude", status="unhealthy", error="Binary not found")
    banner = banners(parse(html(client.get(url))))["Claude Code is unavailable"]
    assert banner.find("banner__text").text == (
        "Planner, Implementer, Reviewer use it and cannot run until it works again. "
        "Binary not found"
    )
    assert banner.find(tag="a", href="/settings/").text == "Configure"


def test_a_new_workspace_leads_to_its_working_directory_setting(client, workspace, tmp_path):
    def banner():
        page = html(client.get(f"/workspaces/{workspace.id}/banners/"))
        return Items(page, "data-banner").by_value().get("working-directory")

    hint = banner()
    assert hint["text"].startswith("Where should the agents work?")
    assert hint["links"] == [f"/workspaces/{workspace.id}/settings/#directory-heading"]
    page = html(client.get(f"/workspaces/{workspace.id}/"))
    assert {"workspace.updated", "task.created"} <= live_events(page, "workspace-banners")
    workspace_update(
        workspace=workspace, working_directory_mode="static", working_directory_path=str(tmp_path)
    )
    assert banner() is None
    other = workspace_create(title="Scratch")  # keeps the temp folder: its first task says so
    task_create(workspace=other, summary="Try")
    page = parse(html(client.get(f"/workspaces/{other.id}/banners/")))
    assert [el for el in page.iter() if "data-banner" in el.attrs] == []


def test_header_fragment_follows_renames(client, workspace):
    workspace.title = "Renamed"
    workspace.save()
    page = parse(html(hx(client, "get", f"/workspaces/{workspace.id}/header/")))
    assert page.find(tag="html") is None and page.find("page-title").text == "Renamed"


# --- settings ------------------------------------------------------------------------------


def settings_data(**changes):
    data = {
        "title": "Project X",
        "description": "Build things",
        "working_directory_mode": "temp",
        "working_directory_path": "",
        "auto_delete_done_tasks": "on",
        "retention_days": "7",
        "stall_kill_minutes": "0",
        "notify_on_error": "on",
        "notify_on_in_review": "on",
    }
    data.update(changes)
    return {k: v for k, v in data.items() if v is not None}


def test_settings_page_shows_current_values(client, workspace):
    page = parse(html(client.get(f"/workspaces/{workspace.id}/settings/")))
    assert page.find(tag="input", name="title").attrs["value"] == "Project X"
    assert page.find(tag="textarea", name="description").text == "Build things"
    assert "checked" in page.find(tag="input", name="working_directory_mode", value="temp").attrs
    auto_delete = page.find(tag="input", name="auto_delete_done_tasks", role="switch")
    assert "checked" not in auto_delete.attrs  # Done tasks are kept by default
    tools = page.find(tag="input", name="mcp_tools_enabled", role="switch")
    assert "checked" not in tools.attrs  # off by default
    assert page.find(tag="label", for_=tools.attrs["id"]).find("switch__label").text == (
        "Give agents Malamar's tools"
    )
    assert page.find(tag="input", name="retention_days").attrs["value"] == "7"
    assert page.find(tag="button", data_dialog_open="delete-dialog").text == "Delete workspace"


def test_save_settings(client, workspace, tmp_path):
    url = f"/workspaces/{workspace.id}/settings/"
    data = settings_data(
        title="Renamed",
        working_directory_mode="static",
        working_directory_path=str(tmp_path),
        auto_delete_done_tasks=None,
        retention_days="0",
        stall_kill_minutes="30",
        notify_on_error="off",
        notify_on_in_review="inherit",
        mcp_tools_enabled="on",
    )
    response = hx(client, "post", url, data)
    assert triggers(response)["malamar:toast"] == {"level": "success", "message": "Settings saved"}
    ws = Workspace.objects.get(id=workspace.id)
    assert ws.title == "Renamed" and ws.working_directory_mode == "static"
    assert ws.working_directory_path == str(tmp_path)
    assert (ws.auto_delete_done_tasks, ws.retention_days, ws.notify_on_error) == (False, 0, "off")
    assert ws.notify_on_in_review == "inherit" and ws.stall_kill_minutes == 30
    assert ws.mcp_tools_enabled is True
    assert parse(html(response)).by_id("path-warning-text") is None


def test_settings_errors_are_tied_to_fields(client, workspace):
    url = f"/workspaces/{workspace.id}/settings/"
    page = html(hx(client, "post", url, settings_data(title="", retention_days="-1")))
    assert element_text(page, "id_title_error") == "Title is required"
    assert field_error_is_tied(page, "id_title")
    assert element_text(page, "id_retention_days_error") == "Enter 0 or more days"
    assert field_error_is_tied(page, "id_retention_days")
    page = html(hx(client, "post", url, settings_data(stall_kill_minutes="-5")))
    assert element_text(page, "id_stall_kill_minutes_error") == "Enter 0 or more minutes"
    assert field_error_is_tied(page, "id_stall_kill_minutes")
    assert not triggers(hx(client, "post", url, settings_data(title="")))
    assert Workspace.objects.get(id=workspace.id).title == "Project X"


@pytest.mark.pg
def test_huge_retention_is_an_error_on_the_field_not_a_crash(client, workspace):
    url = f"/workspaces/{workspace.id}/settings/"
    page = html(hx(client, "post", url, settings_data(retention_days="1" + "0" * 20)))
    assert field_error_is_tied(page, "id_retention_days")
    assert "36500" in element_text(page, "id_retention_days_error")
    assert Workspace.objects.get(id=workspace.id).retention_days == 7


def selected_option(page: str, select_id: str) -> str:
    select = re.search(rf'<select[^>]*id="{select_id}"[^>]*>(.*?)</select>', page, re.S)
    option = re.search(r"<option[^>]*selected[^>]*>([^<]*)</option>", select.group(1))
    return option.group(1)


def test_notification_switches_say_what_inherit_means(client, workspace):
    from core.settings_store import settings_update

    url = f"/workspaces/{workspace.id}/settings/"
    page = html(client.get(url))
    assert selected_option(page, "id_notify_on_error") == "Inherit (currently on)"
    assert selected_option(page, "id_notify_on_in_review") == "Inherit (currently on)"
    settings_update(changes={"notify_on_error": False})
    page = html(client.get(url))
    assert selected_option(page, "id_notify_on_error") == "Inherit (currently off)"
    response = hx(client, "post", url, settings_data(notify_on_error="on"))
    assert selected_option(html(response), "id_notify_on_error") == "On"
    assert Workspace.objects.get(id=workspace.id).notify_on_error == "on"
    page = html(hx(client, "post", url, settings_data(notify_on_error="maybe")))
    assert field_error_is_tied(page, "id_notify_on_error")


def test_static_mode_needs_a_path_a_service_error_on_the_field(client, workspace):
    url = f"/workspaces/{workspace.id}/settings/"
    page = html(hx(client, "post", url, settings_data(working_directory_mode="static")))
    assert "working_directory_path is required" in element_text(
        page, "id_working_directory_path_error"
    )
    assert field_error_is_tied(page, "id_working_directory_path")


PATH_WARNING = "This folder does not exist yet. Agents will fail until it is created."


def test_a_directory_that_does_not_exist_is_refused_on_save(client, workspace):
    url = f"/workspaces/{workspace.id}/settings/"
    data = settings_data(working_directory_mode="static", working_directory_path="/no/such/dir")
    response = hx(client, "post", url, data)
    assert "malamar:toast" not in triggers(response)  # no "Settings saved"
    assert Workspace.objects.get(id=workspace.id).working_directory_mode == "temp"
    page = html(response)
    assert "/no/such/dir does not exist: create it first" in page
    assert field_error_is_tied(page, "id_working_directory_path")
    check = hx(
        client,
        "get",
        f"/workspaces/{workspace.id}/settings/path-check/"
        "?working_directory_mode=static&working_directory_path=/no/such/dir",
    )
    assert element_text(html(check), "path-warning-text") == PATH_WARNING  # said while typing
    ok = hx(
        client,
        "get",
        f"/workspaces/{workspace.id}/settings/path-check/"
        "?working_directory_mode=static&working_directory_path=/",
    )
    assert element_text(html(ok), "path-warning-text") is None


def test_temp_folder_workspaces_hide_the_git_only_settings(client, workspace, tmp_path):
    def static_block(page: str) -> str:
        start = page.index("data-mode-static")
        return page[page.rfind("<div", 0, start) : page.index('id="cleanup-heading"')]

    # The block shows while "Static directory" is chosen (app.css: a :has() rule on the radios).
    page = html(client.get(f"/workspaces/{workspace.id}/settings/"))
    block = static_block(page)
    assert re.search(r'value="temp"[^>]*checked', page)  # temp: the block is hidden
    for name in ("isolation", "base_branch", "setup_command", "keep_merged_branches"):
        assert f'name="{name}"' in block
    Workspace.objects.filter(id=workspace.id).update(
        working_directory_mode="static", working_directory_path=str(tmp_path)
    )
    page = html(client.get(f"/workspaces/{workspace.id}/settings/"))
    assert re.search(r'value="static"[^>]*checked', page)


def test_save_settings_without_javascript(client, workspace):
    url = f"/workspaces/{workspace.id}/settings/"
    response = client.post(url, settings_data(title="Plain"))
    assert response.status_code == 302 and response.url == url
    flash = parse(html(client.get(url))).by_id("flash-messages")  # becomes a toast
    assert [message.text for message in flash.find_all(tag="li")] == ["Settings saved"]
    assert client.post(url, settings_data(title="")).status_code == 422


def test_delete_needs_the_exact_name(client, workspace):
    url = f"/workspaces/{workspace.id}/delete/"
    page = html(hx(client, "post", url, {"confirm_title": "project x"}))
    assert "The name does not match" in element_text(page, "id_confirm_title_error")
    assert field_error_is_tied(page, "id_confirm_title")
    assert Workspace.objects.filter(id=workspace.id).exists()
    response = hx(client, "post", url, {"confirm_title": "Project X"})
    assert response.headers["HX-Redirect"] == "/"
    assert not Workspace.objects.filter(id=workspace.id).exists()
    flash = parse(html(client.get("/"))).by_id("flash-messages")
    assert [message.text for message in flash.find_all(tag="li")] == ["Deleted “Project X”"]


def test_workspace_tab_links(db):
    from workspaces.links import workspace_tab_url

    assert workspace_tab_url("w1", "tasks") == "/workspaces/w1/?tab=tasks"
    assert workspace_tab_url("w1", "tasks", task="t1") == "/workspaces/w1/?tab=tasks&task=t1"
    assert workspace_tab_url("w1", "chat", chat=None) == "/workspaces/w1/?tab=chat"


# --- first run: checklist and CLI notices on the home page ---------------------------------


class Items(HTMLParser):
    """The elements carrying `attr` (e.g. data-step), each {"value", "class", "text", "links"}
    with every <a href> / data-dialog-open inside it."""

    def __init__(self, page: str, attr: str):
        super().__init__()
        self.attr, self.items, self.depth, self.current = attr, [], 0, None
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if self.current is None and self.attr in attrs:
            self.current = {"value": attrs[self.attr], "class": attrs.get("class", "")}
            self.current.update(text="", links=[])
            self.items.append(self.current)
            self.depth = 0
        if self.current is None:
            return
        if tag not in VOID:
            self.depth += 1
        if tag == "a":
            self.current["links"].append(attrs["href"])
        if "data-dialog-open" in attrs:
            self.current["links"].append("dialog:" + attrs["data-dialog-open"])

    def handle_endtag(self, tag):
        if self.current is not None and tag not in VOID:
            self.depth -= 1
            if self.depth == 0:
                self.current = None

    def handle_data(self, data):
        if self.current is not None:
            self.current["text"] += data

    def by_value(self) -> dict:
        for item in self.items:
            item["text"] = " ".join(item["text"].split())
            item["done"] = "is-done" in item["class"].split()
        return {item["value"]: item for item in self.items}


VOID = {"input", "br", "img", "meta", "link", "hr", "path", "circle", "line", "polyline", "rect"}


def checklist(client) -> dict:
    return Items(html(client.get("/")), "data-step").by_value()


def test_first_run_checklist_ticks_each_step_then_goes_away(client, tmp_path):
    steps = checklist(client)
    assert list(steps) == ["cli", "directory", "task"]
    assert not any(step["done"] for step in steps.values())
    assert "Checking your CLIs" in steps["cli"]["text"]
    assert steps["cli"]["links"] == ["/settings/#clis-heading"]
    assert steps["directory"]["links"] == ["dialog:create-dialog"]  # no workspace yet

    CliHealth.objects.create(cli_type="claude", status="unhealthy", error="Binary not found")
    CliHealth.objects.create(cli_type="codex", status="healthy")
    workspace = workspace_create(title="Shop")
    steps = checklist(client)
    assert steps["cli"]["done"] and "Working: Codex CLI." in steps["cli"]["text"]
    assert "Claude" not in steps["cli"]["text"]
    assert not steps["directory"]["done"]  # the temp-folder default: not set up yet
    assert steps["directory"]["links"] == [
        f"/workspaces/{workspace.id}/settings/#directory-heading"
    ]
    assert steps["task"]["links"] == [f"/workspaces/{workspace.id}/?tab=tasks"]

    workspace_update(
        workspace=workspace, working_directory_mode="static", working_directory_path=str(tmp_path)
    )
    steps = checklist(client)
    assert steps["directory"]["done"] and steps["directory"]["links"] == []
    assert str(tmp_path) in steps["directory"]["text"]
    assert not steps["task"]["done"]

    task_create(workspace=workspace, summary="First")
    assert checklist(client) == {}
    assert parse(html(client.get("/"))).by_id("first-run") is not None  # the live region stays


def test_first_run_checklist_counts_a_cli_slow_to_answer_as_working(client):
    """A CLI "Slow to answer" stays available (a healthy CLI on a loaded machine): the checklist
    must not tell the user that none works and to install one."""
    CliHealth.objects.create(cli_type="claude", status="slow", error="Timed out twice")
    CliHealth.objects.create(cli_type="codex", status="unhealthy", error="Binary not found")
    steps = checklist(client)
    assert steps["cli"]["done"]
    assert "Working: Claude Code." in steps["cli"]["text"]


def test_first_run_checklist_can_be_dismissed(client):
    assert checklist(client)
    response = hx(client, "post", "/first-run/dismiss/", target="first-run")
    assert response.status_code == 200 and Items(html(response), "data-step").items == []
    assert checklist(client) == {}
    again = client.post("/first-run/dismiss/")  # without JavaScript; twice is harmless
    assert again.status_code == 302 and again.url == "/"


def test_first_run_checklist_refreshes_itself_live(client):
    page = html(client.get("/"))
    assert {"cli.health_changed", "task.created"} <= live_events(page, "first-run")
    CliHealth.objects.create(cli_type="gemini", status="healthy")
    fragment = html(hx(client, "get", "/", target="first-run"))
    assert parse(fragment).find(tag="html") is None
    assert "Working: Gemini CLI." in Items(fragment, "data-step").by_value()["cli"]["text"]


def test_cards_say_when_agents_use_a_cli_that_is_not_working(client, workspace, agents):
    other = workspace_create(title="Other")
    agent_create(workspace=other, name="Solo", instruction="x", cli_type="codex")
    assert Items(html(client.get("/")), "data-workspace").by_value()[workspace.id]["links"] == [
        f"/workspaces/{workspace.id}/"
    ]
    CliHealth.objects.create(cli_type="claude", status="unhealthy", error="Binary not found")
    cards = Items(html(client.get("/")), "data-workspace").by_value()
    card = cards[workspace.id]
    assert "Claude Code is not working: 3 agents cannot run. Fix in Settings" in card["text"]
    assert "/settings/#clis-heading" in card["links"]
    assert "not working" not in cards[other.id]["text"]
    page = html(client.get("/"))
    assert "cli.health_changed" in live_events(page, "workspace-results")


@pytest.mark.parametrize("stored, shown", [(0, "0"), (15.0, "15"), (2.5, "2.5")])
def test_settings_show_the_silent_run_minutes_as_a_person_writes_them(
    client, workspace, stored, shown
):
    Workspace.objects.filter(id=workspace.id).update(stall_kill_minutes=stored)
    page = html(client.get(f"/workspaces/{workspace.id}/settings/"))
    [field] = elements(page, "input", name="stall_kill_minutes")
    assert field["value"] == shown


# The page and PUT /api/workspaces/:id refuse the same values, each on its field, and store
# nothing (the page's form checks first, the service checks for both).
WORKSPACE_SAME_RULES = [
    ("base_branch", "b" * 201),  # longer than the column (PostgreSQL: a 500 from the API)
    ("title", "t" * 201),
    ("parallel_tasks", 0),
    ("parallel_tasks", 2),  # needs branch per task
    ("retention_days", 36_501),
    ("stall_kill_minutes", -5),
    ("setup_command", 'npm "ci'),
    ("isolation", "branch"),  # needs a static directory in a git repository
    ("notify_on_error", "sometimes"),
]


@pytest.mark.parametrize(("field", "value"), WORKSPACE_SAME_RULES)
def test_workspace_api_refuses_what_the_settings_page_refuses(client, api, workspace, field, value):
    from django.forms.models import model_to_dict

    before = model_to_dict(Workspace.objects.get(id=workspace.id))
    url = f"/workspaces/{workspace.id}/settings/"
    page = html(hx(client, "post", url, settings_data(**{field: str(value)})))
    assert field_error_is_tied(page, f"id_{field}"), page
    response = api.put(f"/api/workspaces/{workspace.id}", {field: value})
    assert response.status_code == 400, response.content
    message = error_of(response)["message"]
    assert field in message or message == element_text(page, f"id_{field}_error"), message
    assert model_to_dict(Workspace.objects.get(id=workspace.id)) == before


def test_the_settings_edit_the_checks_in_rows_and_say_which_is_wrong(client, workspace):
    url = f"/workspaces/{workspace.id}/settings/"
    data = settings_data(
        check_name=["tests", "", ""],
        check_command=["python -m pytest -q", "ruff check .", ""],
        check_timeout=["2.5", "", ""],
        checks_attempts="4",
    )
    response = hx(client, "post", url, data)
    assert triggers(response)["malamar:toast"]["message"] == "Settings saved"
    ws = Workspace.objects.get(id=workspace.id)
    assert ws.checks == [
        {"name": "tests", "command": "python -m pytest -q", "timeout_minutes": 2.5},
        {"name": "ruff", "command": "ruff check .", "timeout_minutes": 10},
    ]
    assert ws.checks_attempts == 4
    page = parse(html(client.get(url)))
    commands = [i.attrs["value"] for i in page.find_all(tag="input", name="check_command")]
    assert commands == ["python -m pytest -q", "ruff check .", "", ""]  # two rows to add more
    assert page.find(tag="input", name="checks_attempts").attrs["value"] == "4"

    bad = settings_data(check_name=["x"], check_command=["pytest 'x"], check_timeout=[""])
    page = html(hx(client, "post", url, bad))
    assert "check 1: the command cannot be read" in element_text(page, "checks-error")
    again = parse(page)
    assert again.find(tag="input", name="check_command").attrs["value"] == "pytest 'x"  # kept
    assert Workspace.objects.get(id=workspace.id).checks == ws.checks  # nothing lost
