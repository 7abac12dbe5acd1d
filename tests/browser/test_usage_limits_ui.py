"""Usage limits in the browser (DESIGN "Usage limits"): when a CLI runs out of quota the board
shows a banner with how many tasks wait and a chip on each waiting card, live (no reload), and
both go when the CLI is back."""

import pytest
from playwright.sync_api import expect

from tests.live import django_script

pytestmark = pytest.mark.browser

# What the worker does when a run hits the limit (notifications.cli_states.cli_limit_set and the
# pass's pause), straight through the ORM: this test runs without a worker.
LIMIT = """
from datetime import timedelta
from django.db import transaction
from django.utils import timezone
from core import events
from runner.limits import Limit
from notifications.cli_states import cli_limit_set
from tasks.models import TaskQueueItem

with transaction.atomic():
    until = timezone.now() + timedelta(hours=3)
    cli_limit_set(cli_type="claude", limit=Limit("You've hit your session limit", until))
    TaskQueueItem.objects.queued().filter(task_id__in={ids!r}).update(waiting_for_cli="claude")
    for task_id in {ids!r}:
        events.publish("task.updated", {{"task_id": task_id, "workspace_id": {workspace!r}}})
"""
LIFT = """
from notifications.cli_states import cli_limit_lift
cli_limit_lift(cli_type="claude")
"""


def test_the_board_shows_the_limit_banner_and_the_waiting_cards_live(server, page):
    workspace = server.workspace("Quota")
    server.agent(workspace["id"], "Implementer", "claude")
    tasks = [
        server.api("POST", f"/workspaces/{workspace['id']}/tasks", {"summary": summary})
        for summary in ("Waits for the quota", "Waits as well")
    ]
    page.goto(f"{server.url}/workspaces/{workspace['id']}/")
    expect(page.locator("#task-board")).to_contain_text("Waits for the quota")
    expect(page.locator('[data-banner="cli-limited"]')).to_have_count(0)

    ids = [task["id"] for task in tasks]
    django_script(server.data_dir, LIMIT.format(ids=ids, workspace=workspace["id"]))

    banner = page.locator('[data-banner="cli-limited"]')
    expect(banner).to_contain_text("Claude Code is out of quota until")
    expect(banner).to_contain_text("2 tasks wait")
    for task in tasks:
        chip = page.locator(f'[data-task-waiting="{task["id"]}"]')
        expect(chip).to_have_text("Waits for Claude Code")
    expect(page.locator(".toast").filter(has_text="Claude Code is out of quota")).to_be_visible()

    django_script(server.data_dir, LIFT)
    expect(banner).to_have_count(0)
    expect(page.locator("[data-task-waiting]")).to_have_count(0)
    expect(page.locator(".toast").filter(has_text="Claude Code works again")).to_be_visible()
