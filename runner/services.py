from django.db import transaction
from django.utils import timezone

from agents.models import CliType
from core.wake import wake_worker_on_commit
from runner.models import CliHealth


def cli_health_refresh_request() -> None:
    """Ask the worker to re-check every CLI now (it owns the checks; the server only asks)."""
    now = timezone.now()
    with transaction.atomic():
        for cli in CliType.values:
            CliHealth.objects.get_or_create(cli_type=cli)
        CliHealth.objects.update(refresh_requested_at=now)
        wake_worker_on_commit()
