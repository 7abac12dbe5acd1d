"""Workspace pages: list and search, create, detail tabs and banners, settings, delete."""

import re

import pytest

from agents.services import agent_create
from core.actors import SYSTEM
from runner.models import CliHealth
from tasks.services import task_create, task_status_set
from tests.pages import elements, field_error_is_tied, html, hx, triggers
from workspaces.models import Workspace
from workspaces.services import workspace_create

pytestmark = pytest.mark.django_db


# --- list ----------------------------------------------------------------------------------


def test_empty_list_invites_to_create_a_workspace(client):
    page = html(client.get("/"))
    assert "No workspaces yet" in page
    assert "Create Workspace" in page and 'data-dialog-open="create-dialog"' in page
    assert '<dialog id="create-dialog"' in page
    assert re.search(r'<form class="search"[^>]* hidden', page)  # nothing to search yet


def test_cards_show_title_snippet_counts_agents_and_activity(client, workspace, agents):
    task_create(workspace=workspace, summary="One")
    running = task_create(workspace=workspace, summary="Two")
    task_status_set(task=running, status="in_progress", actor=SYSTEM)
    page = html(client.get("/"))
    card = re.search(
        r'<li class="card workspace-card".*?workspace-card__foot.*?</div>', page, re.S
    )[0]
    assert "Project X" in card and "Build things" in card
    assert f'href="/workspaces/{workspace.id}/"' in card
    counts = dict(
        re.findall(r'status--(\w+)[^"]*"><span class="status-count__n">.*?</span>(\d+)<', card)
    )
    assert counts == {"todo": "1", "in_progress": "1", "in_review": "0", "done": "0"}
    assert "3 agents" in card
    assert re.search(r"<time datetime=\"[^\"]+\" data-relative[^>]*>Active just now</time>", card)


def test_list_is_ordered_by_last_activity(client, workspace):
    newer = workspace_create(title="Newer")
    page = html(client.get("/"))
    assert page.index("Newer") < page.index("Project X")
    task_create(workspace=workspace, summary="bump")
    page = html(client.get("/"))
    assert page.index("Project X") < page.index(newer.title)


def test_search_filters_by_title_as_a_fragment(client, workspace):
    workspace_create(title="Marketing site")
    response = hx(client, "get", "/?q=market", target="workspace-results")
    page = html(response)
    assert "<html" not in page and 'id="workspace-results"' not in page  # inner content
    assert "Marketing site" in page and "Project X" not in page
    full = html(client.get("/?q=market"))
    assert "<html" in full and 'value="market"' in full and "Project X" not in full


def test_search_without_results_says_so(client, workspace):
    page = html(hx(client, "get", "/?q=zzz", target="workspace-results"))
    assert "No workspaces match “zzz”" in page and "Clear search" in page


def test_create_workspace_redirects_to_it(client):
    response = hx(client, "post", "/workspaces/new/", {"title": "  Alpha ", "description": "Do"})
    workspace = Workspace.objects.get()
    assert (workspace.title, workspace.description) == ("Alpha", "Do")
    assert response.headers["HX-Redirect"] == f"/workspaces/{workspace.id}/"


def test_create_workspace_requires_a_title_and_ties_the_error_to_it(client):
    response = hx(client, "post", "/workspaces/new/", {"title": "   "})
    assert response.status_code == 200  # a fragment with errors (4xx would log console errors)
    page = html(response)
    assert "<html" not in page and 'id="create-form"' in page
    assert "Title is required" in page and field_error_is_tied(page, "id_title")
    assert not Workspace.objects.exists()


def test_create_workspace_without_javascript(client):
    response = client.post("/workspaces/new/", {"title": ""})
    assert response.status_code == 422
    assert "Title is required" in html(response) and "data-open-on-load" in html(response)
    response = client.post("/workspaces/new/", {"title": "Beta"})
    assert response.status_code == 302
    assert response.url == f"/workspaces/{Workspace.objects.get().id}/"


# --- detail --------------------------------------------------------------------------------


def test_detail_has_tabs_and_part_two_placeholders(client, workspace, agents):
    page = html(client.get(f"/workspaces/{workspace.id}/"))
    assert '<h1 class="page-title">Project X</h1>' in page
    assert f'data-workspace-id="{workspace.id}"' in page
    for tab in ("tasks", "chat", "agents"):
        assert f'id="tab-{tab}"' in page
    assert re.search(r'id="tab-tasks"[^>]*aria-current="page"', page)
    assert 'id="tasks-panel"' in page
    assert 'id="chat-panel"' in html(client.get(f"/workspaces/{workspace.id}/?tab=chat"))
    assert 'id="tasks-panel"' in html(client.get(f"/workspaces/{workspace.id}/?tab=nope"))
    assert f'href="/workspaces/{workspace.id}/settings/"' in page


def test_switching_tabs_returns_only_the_tabs_fragment(client, workspace, agents):
    response = hx(client, "get", f"/workspaces/{workspace.id}/?tab=agents", target="workspace-tabs")
    page = html(response)
    assert "<html" not in page and page.strip().startswith('<div id="workspace-tabs"')
    assert re.search(r'id="tab-agents"[^>]*aria-current="page"', page)
    assert 'id="agents-panel"' in page and "Planner" in page


def test_unknown_workspace_is_a_404(client):
    assert client.get("/workspaces/nope/").status_code == 404
    assert client.get("/workspaces/nope/settings/").status_code == 404


def test_no_agents_banner_prompts_to_chat_with_malamar(client, workspace):
    page = html(client.get(f"/workspaces/{workspace.id}/"))
    assert "This workspace has no agents" in page
    assert f'href="/workspaces/{workspace.id}/?tab=chat&amp;start=malamar"' in page
    agent_create(workspace=workspace, name="Solo", instruction="Work")
    banners = html(client.get(f"/workspaces/{workspace.id}/banners/"))
    assert "no agents" not in banners


def test_banner_when_an_agents_cli_is_unhealthy(client, workspace, agents):
    page = html(client.get(f"/workspaces/{workspace.id}/banners/"))
    assert "unavailable" not in page
    CliHealth.objects.create(cli_type="claude", status="unhealthy", error="Binary not found")
    page = html(client.get(f"/workspaces/{workspace.id}/banners/"))
    assert "Claude Code is unavailable" in page
    assert "Planner, Implementer, Reviewer use it" in page and "Binary not found" in page
    assert 'href="/settings/"' in page


def test_header_fragment_follows_renames(client, workspace):
    workspace.title = "Renamed"
    workspace.save()
    page = html(hx(client, "get", f"/workspaces/{workspace.id}/header/"))
    assert "Renamed" in page and "<html" not in page


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
    page = html(client.get(f"/workspaces/{workspace.id}/settings/"))
    assert 'value="Project X"' in page and "Build things</textarea>" in page
    assert re.search(r'value="temp"[^>]*checked', page)
    assert re.search(r'name="auto_delete_done_tasks"[^>]*role="switch"[^>]*checked', page)
    assert 'value="7"' in page
    assert "Delete workspace" in page


def test_save_settings(client, workspace, tmp_path):
    url = f"/workspaces/{workspace.id}/settings/"
    data = settings_data(
        title="Renamed",
        working_directory_mode="static",
        working_directory_path=str(tmp_path),
        auto_delete_done_tasks=None,
        retention_days="0",
        stall_kill_minutes="30",
        notify_on_error=None,
    )
    response = hx(client, "post", url, data)
    assert triggers(response)["malamar:toast"] == {"level": "success", "message": "Settings saved"}
    ws = Workspace.objects.get(id=workspace.id)
    assert ws.title == "Renamed" and ws.working_directory_mode == "static"
    assert ws.working_directory_path == str(tmp_path)
    assert (ws.auto_delete_done_tasks, ws.retention_days, ws.notify_on_error) == (False, 0, False)
    assert ws.notify_on_in_review is True and ws.stall_kill_minutes == 30
    assert "does not exist" not in html(response)


def test_settings_errors_are_tied_to_fields(client, workspace):
    url = f"/workspaces/{workspace.id}/settings/"
    page = html(hx(client, "post", url, settings_data(title="", retention_days="-1")))
    assert "Title is required" in page and field_error_is_tied(page, "id_title")
    assert "Enter 0 or more days" in page and field_error_is_tied(page, "id_retention_days")
    page = html(hx(client, "post", url, settings_data(stall_kill_minutes="-5")))
    assert "Enter 0 or more minutes" in page and field_error_is_tied(page, "id_stall_kill_minutes")
    assert not triggers(hx(client, "post", url, settings_data(title="")))
    assert Workspace.objects.get(id=workspace.id).title == "Project X"


def test_static_mode_needs_a_path_a_service_error_on_the_field(client, workspace):
    url = f"/workspaces/{workspace.id}/settings/"
    page = html(hx(client, "post", url, settings_data(working_directory_mode="static")))
    assert "working_directory_path is required" in page
    assert 'id="id_working_directory_path_error"' in page
    assert re.search(r'id="id_working_directory_path"[^>]*aria-invalid="true"', page) or (
        'aria-invalid="true"' in re.search(r"<input[^>]*id_working_directory_path\"[^>]*>", page)[0]
    )


def test_missing_directory_is_a_warning_not_an_error(client, workspace):
    url = f"/workspaces/{workspace.id}/settings/"
    data = settings_data(working_directory_mode="static", working_directory_path="/no/such/dir")
    response = hx(client, "post", url, data)
    assert "malamar:toast" in triggers(response)
    assert Workspace.objects.get(id=workspace.id).working_directory_path == "/no/such/dir"
    assert "This folder does not exist yet" in html(response)
    check = hx(
        client,
        "get",
        f"/workspaces/{workspace.id}/settings/path-check/"
        "?working_directory_mode=static&working_directory_path=/no/such/dir",
    )
    assert "This folder does not exist yet" in html(check)
    ok = hx(
        client,
        "get",
        f"/workspaces/{workspace.id}/settings/path-check/"
        "?working_directory_mode=static&working_directory_path=/",
    )
    assert "does not exist" not in html(ok)


def test_save_settings_without_javascript(client, workspace):
    url = f"/workspaces/{workspace.id}/settings/"
    response = client.post(url, settings_data(title="Plain"))
    assert response.status_code == 302 and response.url == url
    assert "Settings saved" in html(client.get(url))  # the flash message becomes a toast
    assert client.post(url, settings_data(title="")).status_code == 422


def test_delete_needs_the_exact_name(client, workspace):
    url = f"/workspaces/{workspace.id}/delete/"
    page = html(hx(client, "post", url, {"confirm_title": "project x"}))
    assert "The name does not match" in page and field_error_is_tied(page, "id_confirm_title")
    assert Workspace.objects.filter(id=workspace.id).exists()
    response = hx(client, "post", url, {"confirm_title": "Project X"})
    assert response.headers["HX-Redirect"] == "/"
    assert not Workspace.objects.filter(id=workspace.id).exists()
    assert "Deleted “Project X”" in html(client.get("/"))


def test_workspace_tab_links(db):
    from workspaces.links import workspace_tab_url

    assert workspace_tab_url("w1", "tasks") == "/workspaces/w1/?tab=tasks"
    assert workspace_tab_url("w1", "tasks", task="t1") == "/workspaces/w1/?tab=tasks&task=t1"
    assert workspace_tab_url("w1", "chat", chat=None) == "/workspaces/w1/?tab=chat"


@pytest.mark.parametrize("stored, shown", [(0, "0"), (15.0, "15"), (2.5, "2.5")])
def test_settings_show_the_silent_run_minutes_as_a_person_writes_them(
    client, workspace, stored, shown
):
    Workspace.objects.filter(id=workspace.id).update(stall_kill_minutes=stored)
    page = html(client.get(f"/workspaces/{workspace.id}/settings/"))
    [field] = elements(page, "input", name="stall_kill_minutes")
    assert field["value"] == shown
