"""Reads about the workers themselves: who is beating and what each runs now (the Settings
page and `malamar doctor`)."""

from django.conf import settings
from django.db.models import Count
from django.utils import timezone

from chats.models import ChatQueueItem
from runner.clis import CliType, cli_label
from runner.models import Worker
from tasks.models import TaskQueueItem


def workers_live(*, stale_after: float | None = None, now=None) -> list[dict]:
    """The workers beating now (DESIGN "Scale-out"), oldest first: where each runs, what it
    may run, what it runs now and how long ago it last beat (the Settings page, `doctor`)."""
    now = now or timezone.now()
    stale_after = stale_after or settings.CONFIG.worker_stale_after
    rows = list(Worker.objects.alive(stale_after=stale_after, now=now).order_by("started_at"))
    running: dict[str, int] = {}
    for queue in (TaskQueueItem, ChatQueueItem):
        counts = queue.objects.running().filter(worker_id__in=[row.id for row in rows])
        for row in counts.order_by().values("worker_id").annotate(n=Count("id")):
            running[row["worker_id"]] = running.get(row["worker_id"], 0) + row["n"]
    return [
        {
            "id": row.id,
            "hostname": row.hostname,
            "pid": row.pid,
            "capacity": row.capacity,
            "running": running.get(row.id, 0),
            "clis": [cli_label(cli) for cli in row.clis if cli in CliType.values],
            "cli_types": list(row.clis),
            "version": row.version,
            "started_at": row.started_at,
            "heartbeat_at": row.heartbeat_at,
            "heartbeat_age": max(0.0, (now - row.heartbeat_at).total_seconds()),
        }
        for row in rows
    ]
