from datetime import datetime

from django.db import transaction
from django.utils import timezone

from agents.models import CliType
from core import events
from core.settings_store import settings_update
from core.wake import wake_worker_on_commit
from runner.models import HEALTH_MARKS, AgentRun, CliHealth, CliHealthStatus, RunStatus, TraceEvent


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
    marked = CliHealth.objects.filter(cli_type=cli_type, status__in=HEALTH_MARKS)
    if not marked.exists():  # the usual case: a read, no write lock after every run
        return
    with transaction.atomic():
        marked = marked.update(status=CliHealthStatus.HEALTHY, error="")
        if marked:
            payload = {"cli_type": cli_type, "status": CliHealthStatus.HEALTHY, "error": ""}
            events.publish("cli.health_changed", payload)


def cli_health_store(*, cli_type: str, outcome: dict, started_at: datetime, full: bool) -> None:
    """Save a health check's outcome (the worker's checks). A full check also answers every
    request (Refresh, Test, saved settings) made before it started; a request made while it ran
    stays pending."""
    with transaction.atomic():
        row, _ = CliHealth.objects.select_for_update().get_or_create(cli_type=cli_type)
        before = (row.status, row.error, row.answer)
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
    run.save(force_insert=True)
    return run


def agent_run_progress(*, run_id: str, traces: list, progress: dict, event: dict) -> None:
    """Live activity of a running run: new trace rows, its totals and one `run.trace`."""
    with transaction.atomic():
        if traces:
            TraceEvent.objects.bulk_create(traces)
        AgentRun.objects.filter(id=run_id).update(last_output_at=timezone.now(), **progress)
        events.publish("run.trace", event)


def agent_run_stalled(*, run_id: str, event: dict) -> None:
    with transaction.atomic():
        AgentRun.objects.filter(id=run_id).update(stalled_at=timezone.now())
        events.publish("run.stalled", event)


def agent_run_finish(
    *, run_id: str, traces: list, status: str, exit_code, progress: dict, event: dict
) -> None:
    """The run's last traces, totals and final status; the event tells open timelines to
    collapse it into its final, grouped form. Part of the caller's transaction when there is
    one (the run step's finish), without a savepoint."""
    with transaction.atomic(savepoint=False):
        if traces:
            TraceEvent.objects.bulk_create(traces)
        AgentRun.objects.filter(id=run_id).update(
            status=status, exit_code=exit_code, ended_at=timezone.now(), **progress
        )
        events.publish("run.trace", event)


def agent_runs_close_interrupted() -> int:
    """At worker start: runs a dead worker left open are closed as interrupted, and open pages
    are told (the same final event as a normal end), so no timeline keeps showing "Working"."""
    with transaction.atomic():
        runs = list(AgentRun.objects.filter(status=RunStatus.RUNNING))
        AgentRun.objects.filter(id__in=[run.id for run in runs]).update(
            status=RunStatus.INTERRUPTED, ended_at=timezone.now()
        )
        for run in runs:
            final = {"items": [], "text_delta": "", "current_action": ""}
            events.publish("run.trace", agent_run_event(run, status=RunStatus.INTERRUPTED, **final))
    return len(runs)
