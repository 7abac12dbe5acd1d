"""Reads for the global settings page."""

from datetime import timedelta

from django.utils import timezone

from agents.models import CLI_PREFERENCE
from core.settings_store import settings_public
from runner.selectors import cli_health_all

# A check the worker has not answered after this long probably means it is not running (a
# round checks two CLIs at a time, each may take two tries of --version and the prompt).
WORKER_SLOW_AFTER = timedelta(minutes=3)


def _with_pending(health: dict, now) -> dict:
    # The worker clears the request once a check that started after it has ended.
    requested = health["refresh_requested_at"]
    pending = requested is not None
    return {
        **health,
        "pending": pending,
        "worker_slow": pending and now - requested > WORKER_SLOW_AFTER,
    }


def cli_cards() -> list[dict]:
    """Each CLI (preference order) with its health, `pending` refresh, and its settings
    (environment values masked): [{"health": {...}, "settings": {"binary_path", "env"}}]."""
    now = timezone.now()
    health = {h["cli_type"]: _with_pending(h, now) for h in cli_health_all()}
    settings = settings_public()["cli_settings"]
    return [
        {"cli_type": cli.value, "health": health[cli.value], "settings": settings[cli.value]}
        for cli in CLI_PREFERENCE
    ]


def cli_card(cli_type: str) -> dict:
    return next(card for card in cli_cards() if card["cli_type"] == cli_type)
