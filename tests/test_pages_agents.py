"""The Agents tab: list, create/edit dialog, default CLI, validation, delete, reorder."""

import re

import pytest

from agents.models import Agent
from runner.models import CliHealth
from tests.htmltree import parse
from tests.pages import element_text, field_error_is_tied, html, hx, live_events, triggers

pytestmark = pytest.mark.django_db


def names_in_order(workspace) -> list[str]:
    return list(Agent.objects.filter(workspace=workspace).in_order().values_list("name", flat=True))


def panel_names(page: str) -> list[str]:
    return [name.text for name in parse(page).find_all("agent-row__name", tag="h3")]


def test_panel_lists_agents_with_positions(client, workspace, agents):
    page = html(hx(client, "get", f"/workspaces/{workspace.id}/agents/"))
    tree = parse(page)
    assert tree.find(tag="html") is None and tree.by_id("agents-panel") is None  # its content
    assert panel_names(page) == ["Planner", "Implementer", "Reviewer"]
    rows = tree.find("agent-list", tag="ol").find_all("agent-row", tag="li")
    assert [row.find("agent-row__pos").text for row in rows] == ["1", "2", "3"]
    assert all(row.attrs["draggable"] == "true" for row in rows)
    assert "data-sortable" in tree.find("agent-list").attrs
    # In the page, the panel refreshes itself when agents change anywhere.
    full = html(client.get(f"/workspaces/{workspace.id}/?tab=agents"))
    assert "agents.changed" in live_events(full, "agents-panel")
    assert 'hx-swap="innerHTML"' in re.search(r'<section id="agents-panel"[^>]*>', full)[0]


def test_panel_without_htmx_goes_to_the_tab(client, workspace):
    response = client.get(f"/workspaces/{workspace.id}/agents/")
    assert response.status_code == 302 and response.url.endswith("?tab=agents")


def test_empty_panel_offers_malamar_and_add(client, workspace):
    empty = parse(html(client.get(f"/workspaces/{workspace.id}/?tab=agents"))).find("empty-state")
    assert empty.find("empty-state__title").text == "No agents yet"
    actions = empty.find("empty-state__actions")
    assert actions.find(tag="a").text == "Chat with Malamar"
    assert actions.find(tag="button").text == "Add agent"


def cli_checked(page: str) -> str:
    return re.search(r'name="cli_type" value="(\w+)" checked', page).group(1)


def test_new_agent_defaults_to_the_first_available_cli(client, workspace):
    url = f"/workspaces/{workspace.id}/agents/new/"
    assert cli_checked(html(hx(client, "get", url))) == "claude"
    CliHealth.objects.create(cli_type="claude", status="unhealthy", error="gone")
    page = html(hx(client, "get", url))
    assert cli_checked(page) == "codex"
    # The unhealthy option is marked with a red dot and a word.
    claude = re.search(r'value="claude".*?</label>', page, re.S).group(0)
    assert "dot--unhealthy" in claude and "Unavailable" in claude
    for cli in ("codex", "gemini", "opencode"):
        CliHealth.objects.create(cli_type=cli, status="unhealthy", error="gone")
    assert cli_checked(html(hx(client, "get", url))) == "claude"


def test_the_dialog_opens_on_the_chosen_clis_fields(client, workspace):
    # Re-rendered with an error, the dialog shows the chosen CLI's fields and keeps what was
    # typed; picking another CLI reads that CLI's fields with what was typed in them.
    data = {"name": "", "instruction": "x", "cli_type": "codex", "model": "o3"}
    data |= {"custom_binary": "q"}
    page = html(hx(client, "post", f"/workspaces/{workspace.id}/agents/new/", data))
    assert 'list="agent-models"' in page and 'value="o3"' in page
    settings = f"/workspaces/{workspace.id}/agents/cli-settings/"
    picked = {"cli_type": "codex", "model": "o3", "reasoning_effort": "high"}
    for answer in (page, html(hx(client, "get", settings, picked | {"custom_binary": "q"}))):
        tree = parse(answer).by_id("agent-cli-settings")
        [datalist] = tree.find_all(tag="datalist")  # the chosen CLI's suggestions only
        assert (datalist.attrs["id"], datalist.attrs["data-cli"]) == ("agent-models", "codex")
        [effort] = tree.find_all(tag="select", name="reasoning_effort")  # the chosen CLI's
        assert effort.attrs["id"] == "id_reasoning_effort"
        assert "hidden" in tree.find(data_cli_only="custom").attrs
        assert tree.find(tag="input", name="custom_binary").attrs["value"] == "q"  # kept
    assert effort.find(tag="option", value="high").attrs.get("selected") is not None
    for answer in (
        html(
            hx(
                client,
                "post",
                f"/workspaces/{workspace.id}/agents/new/",
                data | {"cli_type": "custom"},
            )
        ),
        html(hx(client, "get", settings, {"cli_type": "custom", "custom_binary": "q"})),
    ):
        tree = parse(answer).by_id("agent-cli-settings")
        assert "hidden" not in tree.find(data_cli_only="custom").attrs
        assert "has no reasoning effort setting" in tree.text
        assert not tree.find_all(tag="select", name="reasoning_effort")
    assert client.get(settings).status_code == 302  # (no JavaScript)


def test_cli_options_follow_the_preference_order(client, workspace):
    page = html(hx(client, "get", f"/workspaces/{workspace.id}/agents/new/"))
    assert re.findall(r'name="cli_type" value="(\w+)"', page) == [
        "claude",
        "codex",
        "gemini",
        "opencode",
        "custom",  # the custom command comes last
    ]


def test_create_agent_appends_and_refreshes_the_panel(client, workspace, agents):
    data = {"name": "Approver", "instruction": "Approve", "cli_type": "gemini"}
    response = hx(client, "post", f"/workspaces/{workspace.id}/agents/new/", data)
    assert response.headers["HX-Retarget"] == "#agents-panel"
    assert response.headers["HX-Reswap"] == "innerHTML"
    events = triggers(response)
    assert "malamar:dialog-close" in events and "malamar:agents-saved" not in events
    assert events["malamar:toast"]["message"] == "Added Approver"
    assert panel_names(html(response))[-1] == "Approver"
    agent = Agent.objects.get(name="Approver")
    assert (agent.order, agent.cli_type) == (4, "gemini")


def test_duplicate_name_is_an_inline_error(client, workspace, agents):
    data = {"name": "planner", "instruction": "Again", "cli_type": "claude"}
    response = hx(client, "post", f"/workspaces/{workspace.id}/agents/new/", data)
    page = html(response)
    assert "HX-Retarget" not in response.headers
    assert "already exists" in element_text(page, "id_name_error")
    assert field_error_is_tied(page, "id_name")
    assert parse(page).by_id("id_name").attrs["value"] == "planner"
    assert parse(page).by_id("id_instruction").text == "Again"
    assert Agent.objects.count() == 3


def test_required_fields(client, workspace):
    data = {"name": " ", "instruction": "", "cli_type": "claude"}
    page = html(hx(client, "post", f"/workspaces/{workspace.id}/agents/new/", data))
    assert element_text(page, "id_name_error") == "Name is required"
    assert field_error_is_tied(page, "id_name")
    assert element_text(page, "id_instruction_error") == "Instruction is required"
    assert field_error_is_tied(page, "id_instruction")
    bad_cli = {"name": "A", "instruction": "B", "cli_type": "vim"}
    page = html(hx(client, "post", f"/workspaces/{workspace.id}/agents/new/", bad_cli))
    assert "Select a valid choice" in element_text(page, "id_cli_type_error")


def test_edit_agent(client, workspace, agents):
    planner = agents[0]
    page = html(hx(client, "get", f"/agents/{planner.id}/edit/"))
    assert element_text(page, "agent-dialog-title") == "Edit Planner"
    assert parse(page).by_id("id_name").attrs["value"] == "Planner"
    assert parse(page).by_id("id_instruction").text == "You are the Planner."
    assert cli_checked(page) == "claude"
    data = {"name": "Architect", "instruction": "Design first", "cli_type": "codex"}
    response = hx(client, "post", f"/agents/{planner.id}/edit/", data)
    assert triggers(response)["malamar:toast"]["message"] == "Saved Architect"
    planner.refresh_from_db()
    assert (planner.name, planner.instruction, planner.cli_type) == (
        "Architect",
        "Design first",
        "codex",
    )
    taken = {"name": "Reviewer", "instruction": "x", "cli_type": "codex"}
    page = html(hx(client, "post", f"/agents/{planner.id}/edit/", taken))
    assert "already exists" in element_text(page, "id_name_error")
    assert field_error_is_tied(page, "id_name")


def test_agent_form_without_javascript(client, workspace, agents):
    response = client.post(f"/workspaces/{workspace.id}/agents/new/", {"name": ""})
    assert response.status_code == 422
    assert "data-open-on-load" in parse(html(response)).by_id("agent-dialog").attrs
    data = {"name": "Solo", "instruction": "Work", "cli_type": "claude"}
    response = client.post(f"/workspaces/{workspace.id}/agents/new/", data)
    assert response.status_code == 302 and response.url.endswith("?tab=agents")


def test_delete_agent_asks_first_and_refreshes(client, workspace, agents):
    page = html(client.get(f"/workspaces/{workspace.id}/?tab=agents"))
    assert re.search(r'hx-post="/agents/[^"]+/delete/"\s+data-confirm="Delete Planner\?"', page)
    response = hx(client, "post", f"/agents/{agents[0].id}/delete/")
    assert panel_names(html(response)) == ["Implementer", "Reviewer"]
    assert triggers(response)["malamar:toast"]["message"] == "Deleted Planner"
    assert names_in_order(workspace) == ["Implementer", "Reviewer"]


def test_move_buttons(client, workspace, agents):
    planner, implementer, reviewer = agents
    response = hx(client, "post", f"/agents/{reviewer.id}/move/", {"direction": "up"})
    assert panel_names(html(response)) == ["Planner", "Reviewer", "Implementer"]
    hx(client, "post", f"/agents/{planner.id}/move/", {"direction": "down"})
    assert names_in_order(workspace) == ["Reviewer", "Planner", "Implementer"]
    hx(client, "post", f"/agents/{reviewer.id}/move/", {"direction": "up"})  # already first
    hx(client, "post", f"/agents/{implementer.id}/move/", {"direction": "down"})  # already last
    assert names_in_order(workspace) == ["Reviewer", "Planner", "Implementer"]


def test_first_and_last_arrows_are_marked_disabled(client, workspace, agents):
    page = html(hx(client, "get", f"/workspaces/{workspace.id}/agents/"))
    assert re.search(rf'id="move-up-{agents[0].id}"[^>]*aria-disabled="true"', page)
    assert re.search(rf'id="move-down-{agents[2].id}"[^>]*aria-disabled="true"', page)
    assert not re.search(rf'id="move-up-{agents[1].id}"[^>]*aria-disabled', page)


@pytest.mark.pg
def test_reorder_saves_the_dropped_order(client, workspace, agents):
    ids = [agents[2].id, agents[0].id, agents[1].id]
    response = hx(client, "post", f"/workspaces/{workspace.id}/agents/reorder/", {"agent_ids": ids})
    assert panel_names(html(response)) == ["Reviewer", "Planner", "Implementer"]
    assert names_in_order(workspace) == ["Reviewer", "Planner", "Implementer"]


@pytest.mark.pg
def test_reorder_with_a_stale_list_keeps_the_order_and_says_so(client, workspace, agents):
    ids = [agents[1].id, agents[0].id]  # one agent missing: the list changed meanwhile
    response = hx(client, "post", f"/workspaces/{workspace.id}/agents/reorder/", {"agent_ids": ids})
    assert triggers(response)["malamar:toast"]["level"] == "error"
    assert names_in_order(workspace) == ["Planner", "Implementer", "Reviewer"]
