from django.db import transaction
from django.utils import timezone

from agents.models import CliType
from core import events
from core.settings_store import settings_update
from core.wake import wake_worker_on_commit
from runner.models import CliHealth, CliHealthStatus


def cli_health_check_request(*, cli_types) -> None:
    """Ask the worker to check these CLIs now with the real minimal prompt (it owns the checks;
    the server only asks). The request stays pending until a check that started after it ends."""
    now = timezone.now()
    cli_types = [cli for cli in CliType.values if cli in set(cli_types)]
    with transaction.atomic():
        for cli in cli_types:
            CliHealth.objects.get_or_create(cli_type=cli)
        CliHealth.objects.filter(cli_type__in=cli_types).update(refresh_requested_at=now)
        wake_worker_on_commit()


def cli_health_refresh_request() -> None:
    """ "Refresh": re-check every CLI now."""
    cli_health_check_request(cli_types=CliType.values)


def cli_health_run_succeeded(*, cli_type: str) -> None:
    """A real run of this CLI just succeeded (a task pass or a chat reply): it works, whatever
    its last health check said. Clears an "unhealthy" (or "slow") mark; no write otherwise."""
    marked = CliHealth.objects.filter(
        cli_type=cli_type, status__in=[CliHealthStatus.UNHEALTHY, CliHealthStatus.SLOW]
    )
    if not marked.exists():  # the usual case: a read, no write lock after every run
        return
    with transaction.atomic():
        marked = marked.update(status=CliHealthStatus.HEALTHY, error="")
        if marked:
            payload = {"cli_type": cli_type, "status": CliHealthStatus.HEALTHY, "error": ""}
            events.publish("cli.health_changed", payload)


def settings_save(*, changes: dict) -> dict:
    """Save global settings (validated by core.settings_store, for the pages and the API alike);
    every CLI whose settings were saved is re-checked by the worker right away, so its card and
    the agents never rely on a health result from before the change. Returns the public view."""
    clis = changes.get("cli_settings")
    with transaction.atomic():
        public = settings_update(changes=changes)
        if isinstance(clis, dict) and clis:
            cli_health_check_request(cli_types=list(clis))
    return public
