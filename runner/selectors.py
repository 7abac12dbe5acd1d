from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.recorder import MigrationRecorder
from django.db.models import Count, Exists, OuterRef, Q, Sum
from django.utils import timezone

from core.compiled_queries import compiled_rows
from core.settings_store import settings_public
from runner.clis import (
    CLI_PREFERENCE,
    CUSTOM_CLI,
    CUSTOM_CLI_LABEL,
    CliType,
    cli_label,
    custom_health_key,
)
from runner.models import (
    HEALTH_MARKS,
    AgentRun,
    CliHealth,
    CliHealthStatus,
    RunKind,
    RunStatus,
    TraceEvent,
    Worker,
)
from runner.timeline import group_traces


def _health(row: CliHealth, cli_type: str, name: str) -> dict:
    return {
        "cli_type": cli_type,
        "name": name,
        "status": row.status,
        "available": row.is_available,
        "error": row.error,
        "version": row.version,
        "binary_path": row.binary_path,
        "answer": row.answer,
        "checked_at": row.checked_at,
        "refresh_requested_at": row.refresh_requested_at,
        "limited": row.is_limited,
        "limited_until": row.limited_until,
        "limit_message": row.limit_message,
        "probe_at": row.probe_at,
    }


def cli_health_all() -> list[dict]:
    """Each CLI's stored health, "not_checked" until the worker has checked it."""
    rows = {row.cli_type: row for row in CliHealth.objects.filter(cli_type__in=CliType.values)}
    return [
        _health(rows.get(cli.value) or CliHealth(cli_type=cli.value), cli.value, cli.label)
        for cli in CliType
    ]


def custom_cli_health(agent_ids) -> dict[str, dict]:
    """{agent id: health} of custom-command agents (each checks its own command)."""
    keys = {custom_health_key(agent_id): agent_id for agent_id in agent_ids}
    rows = {row.cli_type: row for row in CliHealth.objects.filter(cli_type__in=list(keys))}
    return {
        agent_id: _health(rows.get(key) or CliHealth(cli_type=key), CUSTOM_CLI, CUSTOM_CLI_LABEL)
        for key, agent_id in keys.items()
    }


def cli_limited() -> set[str]:
    """CLIs out of quota right now (DESIGN "Usage limits"): work that needs them waits."""
    limited = CliHealth.objects.filter(limited_since__isnull=False)
    return set(limited.values_list("cli_type", flat=True))


def cli_limits() -> list[dict]:
    """Each limited CLI, since and until when: the board's banner
    (malamar_site.selectors.limited_clis adds what waits for it)."""
    labels = dict(CliType.choices)
    rows = CliHealth.objects.filter(limited_since__isnull=False).order_by("cli_type")
    return [
        {
            "cli_type": row.cli_type,
            "name": labels.get(row.cli_type, row.cli_type),
            "since": row.limited_since,
            "until": row.limited_until,
            "probe_at": row.probe_at,
            "message": row.limit_message,
        }
        for row in rows
    ]


def cli_broken() -> dict[str, str]:
    """CLIs that cannot run at all ("unhealthy": a failed check or a run that could not run),
    each with why: work that needs them waits (DESIGN "Retries")."""
    broken = CliHealth.objects.filter(status=CliHealthStatus.UNHEALTHY)
    return dict(broken.values_list("cli_type", "error"))


@dataclass(frozen=True)
class CliStates:
    """What a run needs to know about the CLIs before it chooses one (runner.plans): those out
    of quota, those that cannot run (with why) and those a health check marked at all."""

    limited: frozenset[str]
    broken: dict[str, str]
    marked: frozenset[str]


def cli_states() -> CliStates:
    """The CLIs' states in one read (a task pass and a chat reply read it once: its SQL is
    compiled once)."""

    def query():
        rows = CliHealth.objects.filter(Q(limited_since__isnull=False) | Q(status__in=HEALTH_MARKS))
        return rows.values_list("cli_type", "status", "error", "limited_since")

    rows = compiled_rows(("cli_states",), query)  # (limited_since: only whether it is set)
    return CliStates(
        limited=frozenset(cli for cli, _s, _e, since in rows if since is not None),
        broken={
            cli: error for cli, status, error, _l in rows if status == CliHealthStatus.UNHEALTHY
        },
        marked=frozenset(cli for cli, status, _e, _l in rows if status in HEALTH_MARKS),
    )


def cli_states_from(health: list[dict]) -> CliStates:
    """The states of the four CLIs from their health (cli_health_all), read already."""
    return CliStates(
        limited=frozenset(h["cli_type"] for h in health if h["limited"]),
        broken={
            h["cli_type"]: h["error"] for h in health if h["status"] == CliHealthStatus.UNHEALTHY
        },
        marked=frozenset(h["cli_type"] for h in health if h["status"] in HEALTH_MARKS),
    )


def cli_waits() -> set[str]:
    """CLIs whose waiting work may not run now: out of quota, or unable to run at all. (Asked
    at every pickup: its SQL is compiled once.)"""

    def query():
        rows = CliHealth.objects.filter(
            Q(limited_since__isnull=False) | Q(status=CliHealthStatus.UNHEALTHY)
        )
        return rows.values_list("cli_type")

    return {cli_type for (cli_type,) in compiled_rows(("cli_waits",), query)}


def cli_completed_a_run_since(cli_type: str, since) -> bool:
    """Whether a real run of this CLI (`custom:<agent id>`: that agent's custom command) ended
    completed at or after `since`: proof that it works, stored with the runs, so it outlives
    a restart (DESIGN "Health checks")."""
    runs = AgentRun.objects.filter(status=RunStatus.COMPLETED, ended_at__gte=since)
    if cli_type.startswith(f"{CUSTOM_CLI}:"):
        runs = runs.filter(cli_type=CUSTOM_CLI, agent_id=cli_type.removeprefix(f"{CUSTOM_CLI}:"))
    else:
        runs = runs.filter(cli_type=cli_type)
    return runs.exists()


def cli_available(cli_type: str) -> bool:
    row = CliHealth.objects.filter(cli_type=cli_type).first()
    return row is None or row.is_available


def first_available_cli() -> str | None:
    """The spec's preference order Claude → Codex → Gemini → OpenCode; None if all unhealthy.
    A CLI out of quota comes after the others (a reply on it would wait)."""
    rows = {row.cli_type: row for row in CliHealth.objects.all()}
    available = [
        cli.value for cli in CLI_PREFERENCE if cli.value not in rows or rows[cli.value].is_available
    ]
    ready = [cli for cli in available if cli not in rows or not rows[cli].is_limited]
    return (ready or available or [None])[0]


# The global settings page's CLI cards.

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


# --- agent runs: timelines and usage --------------------------------------------------------

TIMELINE_RUNS = 30  # most recent runs shown with their traces
TIMELINE_TRACES = 400  # most recent traces shown per run


class RunTimelines(list):
    """Runs (oldest first) with grouped traces, plus what the live JS needs to find them."""

    def __init__(self, runs, *, task_id=None, chat_id=None, running_only=False, hidden=0):
        super().__init__(runs)
        self.task_id, self.chat_id = task_id, chat_id
        self.running_only, self.hidden = running_only, hidden


def _with_groups(runs: list) -> list:
    by_run: dict[str, list] = {run.id: [] for run in runs}
    if by_run:
        rows = (
            TraceEvent.objects.filter(run_id__in=list(by_run))
            .only("run_id", "seq", "kind", "action_kind", "text", "detail")
            .order_by("run_id", "seq")
        )
        for row in rows:
            by_run[row.run_id].append(row)
    for run in runs:
        traces = by_run[run.id][-TIMELINE_TRACES:]
        run.groups = group_traces(traces)
        run.last_seq = traces[-1].seq if traces else 0
        run.hidden_traces = max(0, run.trace_count - len(traces))
        run.is_running = run.status == RunStatus.RUNNING
        run.cli_label = "Check" if run.kind == RunKind.CHECK else cli_label(run.cli_type)
        if run.fallback_for in CliType.values:  # its agent's own CLI was out of quota
            run.cli_label = f"{run.cli_label} (fallback for {CliType(run.fallback_for).label})"
    return runs


def run_timelines(*, task=None, chat=None, running_only=False) -> RunTimelines:
    """A task's or chat's agent runs for the Activity timeline (two queries in all)."""
    if (task is None) == (chat is None):
        raise ValueError("run_timelines needs a task or a chat")
    runs = AgentRun.objects.filter(task=task) if task else AgentRun.objects.filter(chat=chat)
    if running_only:
        runs = runs.filter(status=RunStatus.RUNNING)
    latest = list(runs.order_by("-started_at")[: TIMELINE_RUNS + 1])
    hidden = 0
    if len(latest) > TIMELINE_RUNS:
        hidden = runs.count() - TIMELINE_RUNS
        latest = latest[:TIMELINE_RUNS]
    return RunTimelines(
        _with_groups(latest[::-1]),
        task_id=getattr(task, "id", None),
        chat_id=getattr(chat, "id", None),
        running_only=running_only,
        hidden=hidden,
    )


def run_timeline(run_id: str):
    """One run with its grouped traces (the live JS fetches it when it meets a new run)."""
    run = AgentRun.objects.filter(id=run_id).first()
    return _with_groups([run])[0] if run else None


def run_output_text(run_id: str) -> str | None:
    """A check run's output as it printed it (its "output" traces in order); None when there
    is no such check run."""
    if not AgentRun.objects.filter(id=run_id, kind=RunKind.CHECK).exists():
        return None
    chunks = TraceEvent.objects.filter(run_id=run_id, kind="output").order_by("seq")
    return "\n".join(chunks.values_list("text", flat=True).iterator(chunk_size=200))


def task_first_tree(task_id: str, store: str) -> str | None:
    """The tree the task's first snapshotted run in `store` started from (None: no run yet)."""
    runs = AgentRun.objects.filter(task_id=task_id, snapshot_store=store).exclude(tree_before="")
    return runs.order_by("started_at").values_list("tree_before", flat=True).first()


def runs_without_totals(limit: int):
    """Ended runs with both trees but no totals and no snapshot error, of no live worker: their
    totals were left for the next run's finish (worker.snapshotting), which their worker did
    not live to write."""
    live = Worker.objects.live_rows().filter(id=OuterRef("worker_id"))
    runs = AgentRun.objects.filter(files_changed=None, snapshot_error="")
    runs = runs.exclude(status=RunStatus.RUNNING).exclude(tree_before="").exclude(tree_after="")
    return list(runs.exclude(Exists(live)).order_by("-started_at")[:limit])


def snapshot_trees_by_store() -> dict[str, set[str]]:
    """Every tree a run refers to, by snapshot store: what the snapshot cleanup keeps."""
    trees: dict[str, set[str]] = {}
    rows = AgentRun.objects.exclude(snapshot_store="").values_list(
        "snapshot_store", "tree_before", "tree_after"
    )
    for store, before, after in rows.iterator(chunk_size=2000):
        trees.setdefault(store, set()).update(tree for tree in (before, after) if tree)
    return trees


def usage_totals(runs) -> dict:
    """Sum of tokens and cost over an AgentRun queryset (None where no run reported any)."""
    totals = runs.aggregate(
        n=Count("id"), i=Sum("input_tokens"), o=Sum("output_tokens"), c=Sum("cost_usd")
    )
    return {
        "runs": totals["n"] or 0,
        "input_tokens": totals["i"] or 0,
        "output_tokens": totals["o"] or 0,
        "cost_usd": round(totals["c"] or 0.0, 6),
    }


# the deployment, as `malamar doctor` reports it ----------------------------------------------


def database_status() -> dict:
    """Where the database is (PostgreSQL's address, never its password), its server's version
    (PostgreSQL), how many migrations are pending, whether it is new (`fresh`: SQLite's file
    does not exist yet, which this leaves so; PostgreSQL's database has no tables yet), or why it
    does not answer (`error`)."""
    status = {"name": _database_name(), "server": "", "pending": 0, "fresh": False, "error": ""}
    if connection.vendor == "sqlite" and not Path(connection.settings_dict["NAME"]).exists():
        status["fresh"] = True  # connecting would create the file
        return status
    try:
        connection.ensure_connection()
        status["server"] = _server_version()
        status["fresh"] = not MigrationRecorder(connection).has_table()
        executor = MigrationExecutor(connection)
        status["pending"] = len(executor.migration_plan(executor.loader.graph.leaf_nodes()))
    except Exception as exc:
        status["error"] = _without_password(str(exc))
    return status


def _database_name() -> str:
    """The SQLite file, or PostgreSQL's address without its password."""
    db = connection.settings_dict
    if connection.vendor != "postgresql":
        return str(db["NAME"])
    user = f"{db['USER']}@" if db.get("USER") else ""
    port = f":{db['PORT']}" if db.get("PORT") else ""
    return f"PostgreSQL {user}{db.get('HOST') or 'localhost'}{port}/{db['NAME']}"


def _server_version() -> str:
    if connection.vendor != "postgresql":
        return ""
    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        return cursor.fetchone()[0].split()[0]


def _without_password(text: str) -> str:
    password = connection.settings_dict.get("PASSWORD")
    return text.replace(password, "***") if password else text


def redis_status(url: str) -> dict:
    """Does the Redis at `url` answer a PING: its address (never the URL's password), and its
    version, or the kind of error it gave (`error`)."""
    parts = urlsplit(url)
    where = f"{parts.hostname or parts.path}{f':{parts.port}' if parts.port else ''}"
    status = {"where": where, "version": "", "error": ""}
    import redis  # ~18 MB imported: only `malamar doctor` with REDIS_URL asks

    try:
        client = redis.Redis.from_url(url, socket_timeout=3, socket_connect_timeout=3)
        client.ping()
        status["version"] = client.info("server").get("redis_version", "?")
    except Exception as exc:
        status["error"] = type(exc).__name__
    return status
