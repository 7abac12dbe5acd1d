"""Usage limits on the pages and the API (DESIGN "Usage limits"): the board's banner and the
waiting card's chip, Settings → CLIs' "limited until", the agent's fallback CLI, the run's
fallback label."""

from datetime import timedelta

import pytest
from django.utils import timezone

from agents.services import agent_create
from core.ids import new_id
from notifications.cli_states import cli_limit_lift, cli_limit_set
from runner.limits import Limit
from runner.models import AgentRun
from runner.services import agent_run_start
from tasks.models import TaskQueueItem
from tasks.services import task_create
from tests.conftest import error_of
from tests.htmltree import parse
from tests.pages import html, hx

pytestmark = pytest.mark.django_db


def _waiting_task(workspace, summary: str, cli: str):
    task = task_create(workspace=workspace, summary=summary)
    TaskQueueItem.objects.queued().filter(task=task).update(waiting_for_cli=cli)
    return task


def limit_banner(client, workspace, cli: str | None = "claude"):
    """The parsed workspace's banner about a CLI's quota (`cli`, or any when None), or None."""
    banners = parse(html(client.get(f"/workspaces/{workspace.id}/banners/")))
    found = banners.find_all(data_banner="cli-limited")
    return next((banner for banner in found if cli in (None, banner.attrs["data-cli"])), None)


def test_the_board_shows_the_limited_cli_and_its_waiting_tasks(client, workspace, agents):
    until = timezone.now() + timedelta(hours=3)
    cli_limit_set(cli_type="claude", limit=Limit("You've hit your session limit", until))
    waiting = _waiting_task(workspace, "Waits", "claude")
    task_create(workspace=workspace, summary="Runs")
    _waiting_task(workspace, "Waits too", "claude")

    banner = limit_banner(client, workspace)
    local = timezone.localtime(until).strftime("%H:%M")
    title = banner.find("banner__title").text
    assert title.startswith("Claude Code is out of quota until") and local in title
    assert title.endswith("— 2 tasks wait")
    assert banner.find("banner__detail").text == "You've hit your session limit"

    board = parse(html(client.get(f"/workspaces/{workspace.id}/")))
    chips = board.find_all("task-card__waiting", tag="span")
    assert [chip.text for chip in chips] == ["Waits for Claude Code"] * 2
    assert waiting.id in {chip.attrs["data-task-waiting"] for chip in chips}

    cli_limit_lift(cli_type="claude")
    assert limit_banner(client, workspace, cli=None) is None
    board = parse(html(client.get(f"/workspaces/{workspace.id}/")))
    assert board.find("task-card__waiting", tag="span") is None


def test_the_banner_without_a_reset_time_says_when_it_checks_again(client, workspace, agents):
    cli_limit_set(cli_type="claude", limit=Limit("429 rate_limit_error"))
    banner = limit_banner(client, workspace)
    assert banner.find("banner__title").text == "Claude Code is out of quota"
    assert "Malamar checks it again at" in banner.find("banner__text").text


def test_a_limited_cli_the_workspace_does_not_use_has_no_banner(client, workspace, agents):
    cli_limit_set(cli_type="opencode", limit=Limit("rate limit"))
    assert limit_banner(client, workspace, cli=None) is None


def test_settings_show_how_long_a_cli_is_limited(client):
    until = timezone.now() + timedelta(days=2)
    cli_limit_set(cli_type="codex", limit=Limit("You've hit your usage limit.", until))
    page = parse(html(client.get("/settings/")))
    [badge] = [el for el in page.iter() if "data-cli-limited" in el.attrs]
    assert badge.text == "Out of quota"
    [until_shown] = [el for el in page.iter() if "data-cli-limited-until" in el.attrs]
    time = until_shown.find(tag="time")
    assert (time.attrs["datetime"], time.attrs["data-clock"]) == (until.isoformat(), "weekday")
    assert page.find(tag="dd", text="You've hit your usage limit.") is not None


def test_the_agent_api_takes_a_fallback_cli(api, workspace):
    base = f"/api/workspaces/{workspace.id}/agents"
    made = api.post(base, {"name": "Coder", "instruction": "Code", "fallback_cli_type": "codex"})
    assert made.status_code == 201 and made.json()["fallback_cli_type"] == "codex"
    agent = f"/api/agents/{made.json()['id']}"
    same = api.put(agent, {"fallback_cli_type": "claude"})
    assert same.status_code == 400 and "must differ" in error_of(same)["message"]
    bad = api.put(agent, {"fallback_cli_type": "vim"})
    assert bad.status_code == 400 and "fallback_cli_type" in error_of(bad)["message"]
    assert api.put(agent, {"fallback_cli_type": ""}).json()["fallback_cli_type"] == ""
    # switching the agent to its fallback's CLI drops the fallback
    api.put(agent, {"fallback_cli_type": "gemini"})
    assert api.put(agent, {"cli_type": "gemini"}).json()["fallback_cli_type"] == ""


def test_the_agent_dialog_offers_a_fallback_cli(client, workspace):
    agent = agent_create(workspace=workspace, name="Coder", instruction="Code")
    form = parse(html(client.get(f"/agents/{agent.id}/edit/", HTTP_HX_REQUEST="true")))
    fallback = form.find(tag="select", name="fallback_cli_type")
    assert form.find(tag="label", for_=fallback.attrs["id"]).text.startswith("Fallback CLI")
    saved = client.post(
        f"/agents/{agent.id}/edit/",
        {
            "name": "Coder",
            "instruction": "Code",
            "cli_type": "claude",
            "fallback_cli_type": "codex",
        },
        HTTP_HX_REQUEST="true",
    )
    assert saved.status_code == 200
    agent.refresh_from_db()
    assert agent.fallback_cli_type == "codex"


def test_a_run_on_the_fallback_cli_says_so_in_the_activity(client, workspace):
    task = task_create(workspace=workspace, summary="Fell back")
    run = agent_run_start(
        run=AgentRun(
            id=new_id(),
            cli_type="claude",
            workspace_id=workspace.id,
            agent_id=None,
            agent_name="Coder",
            task_id=task.id,
            fallback_for="codex",
        )
    )
    AgentRun.objects.filter(id=run.id).update(status="completed", ended_at=timezone.now())
    page = parse(html(hx(client, "get", f"/tasks/{task.id}/", target="task-activity")))
    shown = page.by_id(f"run-{run.id}").find("run__meta").find(tag="span")
    assert shown.text == "Claude Code (fallback for Codex CLI)"


def test_the_health_api_says_which_cli_is_limited_until_when(api):
    until = timezone.now() + timedelta(hours=2)
    cli_limit_set(cli_type="gemini", limit=Limit("RESOURCE_EXHAUSTED", until))
    clis = {c["cli_type"]: c for c in api.get("/api/health/cli").json()["clis"]}
    assert clis["gemini"]["limited"] is True
    assert clis["gemini"]["limit_message"] == "RESOURCE_EXHAUSTED"
    assert clis["gemini"]["limited_until"].startswith(until.strftime("%Y-%m-%dT%H:%M"))
    assert clis["claude"]["limited"] is False and clis["claude"]["limited_until"] is None
