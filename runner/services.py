from django.db import transaction
from django.utils import timezone

from agents.models import CliType
from core import events
from core.ids import new_id
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


def custom_health_check_request(*, key: str) -> None:
    """Ask the worker to check a custom-command agent's CLI (`key`: its health row, see
    agents.models.custom_health_key) with the real prompt, as for the four CLIs."""
    with transaction.atomic():
        CliHealth.objects.get_or_create(cli_type=key)
        CliHealth.objects.filter(cli_type=key).update(refresh_requested_at=timezone.now())
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


def agent_run_start(
    *,
    cli_type: str,
    workspace_id: str,
    agent_id,
    agent_name: str,
    task_id=None,
    chat_id=None,
    model: str = "",
) -> AgentRun:
    """A run begins: one INSERT, in the caller's transaction (the run step's start). `model`:
    the configured one, until the CLI's stream names the model it really uses."""
    return AgentRun.objects.create(
        model=model,
        id=new_id(),
        workspace_id=workspace_id,
        task_id=task_id,
        chat_id=chat_id,
        agent_id=agent_id,
        agent_name=agent_name,
        cli_type=cli_type,
        started_at=timezone.now(),
    )


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
