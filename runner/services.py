from datetime import datetime

from django.apps import apps as django_apps
from django.db import transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from core import events
from core.compiled_queries import compiled_update, insert, update_row
from core.settings_store import settings_update
from core.wake import wake_worker_on_commit
from runner.clis import CliType
from runner.limits import Limit, probe_delay
from runner.models import (
    HEALTH_MARKS,
    AgentRun,
    CliHealth,
    CliHealthStatus,
    QueueItem,
    RunStatus,
    Worker,
)


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


def custom_health_check_request(*, key: str) -> None:
    """Ask the worker to check a custom-command agent's CLI (`key`: its health row, see
    the registry's custom_health_key) with the real prompt, as for the four CLIs."""
    with transaction.atomic():
        CliHealth.objects.get_or_create(cli_type=key)
        CliHealth.objects.filter(cli_type=key).update(refresh_requested_at=timezone.now())
        wake_worker_on_commit()


def cli_health_refresh_request() -> None:
    """ "Refresh": re-check every CLI now."""
    cli_health_check_request(cli_types=CliType.values)


def cli_health_works(*, cli_type: str) -> None:
    """This CLI works now: a real run of it completed (a task pass or a chat reply), or a check
    found it healthy (cli_health_store). The one place that records it: an "unhealthy" (or
    "slow") mark goes, whatever the last check said, and the work that waited for it because
    it could not run continues at the agent that needed it. No write when it was not marked
    (the usual case after a run: a read, no write lock)."""
    marked = CliHealth.objects.filter(cli_type=cli_type, status__in=HEALTH_MARKS)
    if not marked.exists():
        return
    with transaction.atomic(savepoint=False):
        marked = marked.update(status=CliHealthStatus.HEALTHY, error="")
        if marked:
            payload = {"cli_type": cli_type, "status": CliHealthStatus.HEALTHY, "error": ""}
            events.publish("cli.health_changed", payload)
            _cli_waits_end(cli_type)


def _cli_waits_end(cli_type: str) -> None:
    """Inside a transaction: `cli_type` may run again, so the work that waited for it goes back
    to the queue (it continues at the agent where it stopped), unless it is out of quota."""
    if CliHealth.objects.filter(cli_type=cli_type, limited_since__isnull=False).exists():
        return
    waiting = sum(queue.objects.release(cli_type=cli_type) for queue in _queues())
    if waiting:
        wake_worker_on_commit()


def _queues() -> list[type[QueueItem]]:
    """Every queue of runs (the tasks' and the chats'): the models built on QueueItem, read from
    the app registry, so the runs domain imports none of the apps above it."""
    return [model for model in django_apps.get_models() if issubclass(model, QueueItem)]


def cli_broken_mark(*, cli_type: str, reason: str) -> tuple[CliHealth, bool]:
    """A run found that the CLI cannot run at all (not installed, not executable, not that CLI,
    logged out, an unknown model): it is marked so ("unhealthy", with why) until a check
    passes or a run completes, and the work that needs it waits (DESIGN "Retries"). True when
    it was working until now (notifications.cli_states.cli_broken_set then tells the user).
    Part of the caller's transaction."""
    with transaction.atomic(savepoint=False):
        row, _ = CliHealth.objects.select_for_update().get_or_create(cli_type=cli_type)
        newly = row.status != CliHealthStatus.UNHEALTHY
        if newly or row.error != reason:
            row.status, row.error, row.answer = CliHealthStatus.UNHEALTHY, reason, ""
            row.checked_at = timezone.now()
            row.save()
            events.publish(
                "cli.health_changed", {"cli_type": cli_type, "status": row.status, "error": reason}
            )
    return row, newly


def cli_health_forget(*, cli_type: str) -> None:
    """A checked CLI is gone (a custom-command agent deleted or switched to another CLI)."""
    CliHealth.objects.filter(cli_type=cli_type).delete()


def cli_health_store(*, cli_type: str, outcome: dict, started_at: datetime, full: bool) -> None:
    """Save a health check's outcome (the worker's checks). A full check also answers every
    request (Refresh, Test, saved settings) made before it started; a request made while it ran
    stays pending."""
    with transaction.atomic():
        row, _ = CliHealth.objects.select_for_update().get_or_create(cli_type=cli_type)
        before = (row.status, row.error, row.answer)
        if outcome["status"] == CliHealthStatus.HEALTHY and row.status in HEALTH_MARKS:
            cli_health_works(cli_type=cli_type)  # as a completed run: the waits for it end
        row.status = outcome["status"]
        row.error = outcome.get("error", "")
        row.binary_path = outcome.get("binary_path", "")
        row.version = outcome.get("version", row.version if row.binary_path else "")
        if "answer" in outcome:
            row.answer = outcome["answer"]
        elif row.status == CliHealthStatus.UNHEALTHY:
            row.answer = ""
        row.checked_at = timezone.now()
        requested = row.refresh_requested_at
        answered = full and requested is not None and requested <= started_at
        if answered:
            row.refresh_requested_at = None
        row.save()
        if answered or before != (row.status, row.error, row.answer):
            events.publish(
                "cli.health_changed",
                {"cli_type": cli_type, "status": row.status, "error": row.error},
            )


# usage limits (DESIGN "Usage limits") -----------------------------------------------------


def _limit_payload(row: CliHealth) -> dict:
    return {
        "cli_type": row.cli_type,
        "name": str(CliType(row.cli_type).label),
        "until": row.limited_until.isoformat() if row.limited_until else None,
        "message": row.limit_message,
    }


def cli_limit_mark(*, cli_type: str, limit: Limit, now=None) -> tuple[CliHealth, bool]:
    """The CLI ran out of quota: it is "limited until T" (None: unknown, probed on a back-off).
    `cli.limited` only when it was not limited already (then True: newly limited); a later run
    that hits the limit again only updates the reset time. Part of the caller's transaction
    (notifications.cli_states.cli_limit_set, which also tells the user)."""
    now = now or timezone.now()
    with transaction.atomic(savepoint=False):
        row, _ = CliHealth.objects.select_for_update().get_or_create(cli_type=cli_type)
        newly = not row.is_limited
        if newly:
            row.limited_since, row.probe_attempts = now, 0
        row.limited_until = limit.reset_at
        row.limit_message = limit.message
        row.probe_at = None if limit.reset_at else now + probe_delay(row.probe_attempts)
        row.save()
        if newly:
            events.publish("cli.limited", _limit_payload(row))
    return row, newly


def cli_limit_probe_failed(*, cli_type: str, limit: Limit | None, now=None) -> None:
    """A probe found the CLI still limited (or failing): the next probe waits longer (5, 15,
    30, then every 60 min), unless the CLI named its reset time this time."""
    now = now or timezone.now()
    with transaction.atomic():
        row = CliHealth.objects.select_for_update().filter(cli_type=cli_type).first()
        if row is None or not row.is_limited:
            return
        row.probe_attempts += 1
        if limit is not None and limit.reset_at:
            row.limited_until, row.probe_at = limit.reset_at, None
        else:
            row.probe_at = now + probe_delay(row.probe_attempts)
        if limit is not None:
            row.limit_message = limit.message
        row.save()
        events.publish("cli.limited", _limit_payload(row))


def cli_limit_clear(*, cli_type: str, answered_since=None) -> bool:
    """The reset time passed or a probe answered: the CLI is no longer limited, the work that
    waited for it runs again (at the agent where it stopped), `cli.resumed`
    (notifications.cli_states.cli_limit_lift also tells the user). False if it was not limited.
    `answered_since`: when the answering check started; a limit set after that (a run hit it
    meanwhile) is newer news and stays."""
    with transaction.atomic():
        row = CliHealth.objects.select_for_update().filter(cli_type=cli_type).first()
        if row is None or not row.is_limited:
            return False
        if answered_since is not None and row.limited_since >= answered_since:
            return False
        row.limited_since = row.limited_until = row.probe_at = None
        row.limit_message, row.probe_attempts = "", 0
        row.save()
        for queue in _queues():
            queue.objects.release(cli_type=cli_type)
        label = str(CliType(cli_type).label)
        events.publish("cli.resumed", {"cli_type": cli_type, "name": label})
        wake_worker_on_commit()
    return True


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


# agent runs (written by the worker's run recorder) ------------------------------------------


def agent_run_event(run: AgentRun, **extra) -> dict:
    """The payload of a run's events (`run.trace`, `run.stalled`): which run, where, and `extra`."""
    return {
        "workspace_id": run.workspace_id,
        "task_id": run.task_id,
        "chat_id": run.chat_id,
        "agent_name": run.agent_name,
        "run_id": run.id,
        **extra,
    }


def agent_run_start(*, run: AgentRun) -> AgentRun:
    """A run begins: one INSERT of the run the recorder prepared, in the caller's transaction
    (the run step's start, written once its CLI runs)."""
    run.started_at = timezone.now()
    insert([run])
    return run


def agent_runs_lock(**owner) -> None:
    """Lock the runs of a task, chat or workspace (`task_id=`, `chat_id=`, `workspace_id=`)
    first in the transaction that deletes it: a worker's live flush in flight commits before,
    its traces go with the runs, and later flushes find the runs gone. (On PostgreSQL a trace
    row committed between the cascade collecting the traces and deleting the runs broke the
    foreign key at commit: a 500. SQLite's writes are serialized already.)"""
    list(AgentRun.objects.filter(**owner).select_for_update().values_list("id", flat=True))


def agent_run_progress(*, run_id: str, traces: list, progress: dict, event: dict) -> None:
    """Live activity of a running run: new trace rows, its totals and one `run.trace`."""
    with transaction.atomic():
        running = AgentRun.objects.filter(id=run_id, status=RunStatus.RUNNING)
        if not running.update(last_output_at=timezone.now(), **progress):
            return  # closed by the worker that took this one's runs over (or deleted)
        if traces:
            insert(traces)
        events.publish("run.trace", event)


def agent_run_stalled(*, run_id: str, event: dict) -> None:
    with transaction.atomic():
        AgentRun.objects.filter(id=run_id).update(stalled_at=timezone.now())
        events.publish("run.stalled", event)


def _running(run_id):
    return AgentRun.objects.filter(id=run_id, status=RunStatus.RUNNING)


def agent_run_finish(
    *,
    run_id: str,
    traces: list,
    status: str,
    exit_code,
    progress: dict,
    event: dict,
    changes_event: bool = True,
) -> None:
    """The run's last traces, totals and final status; the event tells open timelines to
    collapse it into its final, grouped form. Part of the caller's transaction when there is
    one (the run step's finish), without a savepoint. `changes_event` False: its totals come
    later (agent_run_totals_record), and their task.changes_updated with them."""
    with transaction.atomic(savepoint=False):
        changes = {"status": status, "exit_code": exit_code, "ended_at": timezone.now()}
        changes.update(progress)
        ended = compiled_update(("agent_run_finish", *changes), _running, changes, run_id=run_id)
        # Deleted with its task or chat while it ran, or closed as interrupted by the worker
        # that took this worker's runs over: nothing left to record.
        if not ended:
            return
        if traces:
            insert(traces)
        events.publish("run.trace", event)
        if event.get("task_id") and "working_directory" in progress and changes_event:
            events.publish("task.changes_updated", _changes_payload(event, progress))


def agent_run_totals_record(*, run: AgentRun, fields: dict) -> None:
    """A run's totals (or why there are none), worked out after its final record while the next
    agent's CLI runs; open pages are told (task.changes_updated). Part of the caller's
    transaction when there is one (the next run's finish), without a savepoint."""
    if not fields:
        return
    with transaction.atomic(savepoint=False):
        if not update_row(AgentRun, run.id, **fields):
            return  # deleted with its task meanwhile
        if run.task_id:
            event = {"workspace_id": run.workspace_id, "task_id": run.task_id, "run_id": run.id}
            events.publish("task.changes_updated", _changes_payload(event, fields))


def _changes_payload(event: dict, progress: dict) -> dict:
    """`task.changes_updated`: an open Changes tab reloads, board cards show the new totals."""
    keys = ("files_changed", "lines_added", "lines_removed")
    return {
        "workspace_id": event["workspace_id"],
        "task_id": event["task_id"],
        "run_id": event["run_id"],
        **{key: progress.get(key) for key in keys},
        **{f"task_{key}": progress.get(f"task_{key}") for key in keys},
    }


def agent_runs_close_interrupted() -> int:
    """At worker start (and when a worker takes a dead one over): runs a dead worker left open
    are closed as interrupted, and open pages are told (the same final event as a normal end),
    so no timeline keeps showing "Working". Runs of live workers are theirs."""
    live = Worker.objects.live_rows().filter(id=OuterRef("worker_id"))
    with transaction.atomic():
        runs = list(AgentRun.objects.filter(status=RunStatus.RUNNING).exclude(Exists(live)))
        AgentRun.objects.filter(id__in=[run.id for run in runs]).update(
            status=RunStatus.INTERRUPTED, ended_at=timezone.now()
        )
        for run in runs:
            final = {"items": [], "text_delta": "", "current_action": ""}
            events.publish("run.trace", agent_run_event(run, status=RunStatus.INTERRUPTED, **final))
    return len(runs)


# workers (DESIGN "Scale-out") -------------------------------------------------------------


def worker_register(*, hostname: str, pid: int, capacity: int, clis, version: str) -> Worker:
    """A worker process starts: its row, beating from now on."""
    now = timezone.now()
    return Worker.objects.create(
        hostname=hostname[:255],
        pid=pid,
        capacity=capacity,
        clis=sorted(clis),
        version=version[:50],
        started_at=now,
        heartbeat_at=now,
    )


def worker_heartbeat(*, worker_id: str, clis=None) -> bool:
    """The worker is alive (and, with `clis`, now advertises those CLIs). False when its row is
    gone or taken over: another worker recovered its runs, so it must drop them."""
    changes = {"heartbeat_at": timezone.now()}
    if clis is not None:
        changes["clis"] = sorted(clis)
    return bool(Worker.objects.live_rows().filter(id=worker_id).update(**changes))


def worker_take_over(*, worker_id: str, by: str, stale_after: float) -> bool:
    """Claim a stale worker's runs for recovery: one conditional UPDATE, so of several workers
    noticing the same silence exactly one wins (True)."""
    stale = Worker.objects.stale(stale_after=stale_after).filter(id=worker_id)
    return bool(stale.update(taken_over_at=timezone.now(), taken_over_by=by))


def workers_forget(*, worker_ids) -> int:
    """The rows of workers whose runs were recovered (taken over, or dead at a start)."""
    return Worker.objects.filter(id__in=list(worker_ids)).delete()[0]


def workers_forget_taken_over() -> int:
    """Once their runs are recovered, taken-over workers' rows go (their items are requeued,
    so nothing refers to them any more)."""
    return Worker.objects.filter(taken_over_at__isnull=False).delete()[0]


def worker_retire(*, worker_id: str) -> None:
    """A worker stops cleanly (its runs were stopped and recovered already): its row goes."""
    Worker.objects.filter(id=worker_id).delete()
