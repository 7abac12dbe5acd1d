"""Record one run's live activity: parse stdout lines, batch traces into the database and the
event stream, keep token/cost totals, and watch for silence (stalls).

Lines arrive on the process reader thread (`on_line` only queues them); everything that touches
the database happens on the run's own thread in `tick()` and `finish()`, in batches: a chatty CLI
costs a few writes a second, not one per line.
"""

import collections
import logging
import re
import threading
import time

from django.utils import timezone

from core.ids import new_id
from core.settings_store import settings_get
from runner.clis import cli_for
from runner.models import AgentRun, RunKind, RunStatus, TraceEvent
from runner.services import (
    agent_run_event,
    agent_run_finish,
    agent_run_progress,
    agent_run_stalled,
    agent_run_start,
    cli_health_works,
)
from runner.streams import Delta, ModelUsed, Trace, Usage, UserTerms, parse_line

log = logging.getLogger(__name__)
FLUSH_SECONDS = 0.25  # at most ~4 trace events per second per run
FLUSH_ITEMS = 500
LIVE_ITEMS_PER_EVENT = 50
BACKLOG_CHARS = 8 * 1024 * 1024  # lines waiting for the next flush; a flood beyond is dropped


class RunRecorder:
    def __init__(
        self,
        *,
        cli_type: str,
        workspace_id: str,
        agent_id,
        agent_name: str,
        task_id=None,
        chat_id=None,
        stall_warn_seconds: float = 900,
        stall_kill_seconds: float = 0,
        model: str = "",
        fallback_for: str = "",
        deferred: bool = False,
        worker_id: str | None = None,
        knowledge_dir: str = "",
    ):
        """`deferred`: the run's row is written later, by `start_writes()` in the run step's
        start transaction (once its CLI runs); otherwise now. `knowledge_dir`: the Malamar
        agent's knowledge base, which the timeline calls "Malamar's guide"."""
        self.parser = self._stream_parser(cli_type)
        self.terms = UserTerms(knowledge_dir=knowledge_dir)
        self.lines: collections.deque[str] = collections.deque()
        self.backlog_chars = 0
        self.lock = threading.Lock()
        self.last_output = time.monotonic()
        self.last_flush = 0.0
        self.seq = 0
        self.totals = {"input_tokens": None, "output_tokens": None, "cost_usd": None}
        self.pending_text: list[str] = []
        self.current = ""
        self.stall_warn_seconds = stall_warn_seconds
        self.stall_kill_seconds = stall_kill_seconds
        self.warned = False
        self.status = RunStatus.RUNNING
        self.exit_code: int | None = None
        self.killed_for_silence = False
        self.model = self.reported_model = model  # saved again once the stream names another
        self.snapshot_fields: dict = {}  # filled by the pipeline's snapshots, saved at the end
        self.changes_later = False  # its totals are written after the final record
        self.run = AgentRun(
            id=new_id(),
            model=model,
            fallback_for=fallback_for,
            workspace_id=workspace_id,
            task_id=task_id,
            chat_id=chat_id,
            agent_id=agent_id,
            agent_name=agent_name,
            cli_type=cli_type,
            worker_id=worker_id,
        )
        self.started = False
        if not deferred:
            self.start_writes()

    def _stream_parser(self, cli_type: str):
        return cli_for(cli_type).stream_parser()

    def start_writes(self) -> None:
        """Inside the caller's transaction: the run's row. Its silence is counted from here
        (a recorder may be made while the run before works)."""
        self.last_output = time.monotonic()
        agent_run_start(run=self.run)
        self.started = True

    def use_working_directory(self, cwd) -> None:
        """Where the CLI runs: its paths are shown relative to it."""
        self.terms.cwd = str(cwd).rstrip("/")

    # the run's watch, as output arrives ------------------------------------------------------
    def on_line(self, line: str) -> None:
        self.last_output = time.monotonic()
        if not line.lstrip().startswith("{"):
            return  # banners and progress bars: never an event, so never queued
        with self.lock:
            if self.backlog_chars + len(line) > BACKLOG_CHARS:
                return  # a CLI flooding faster than we flush: keep memory bounded
            self.lines.append(line)
            self.backlog_chars += len(line)

    def on_output(self) -> None:
        self.last_output = time.monotonic()

    # run thread ------------------------------------------------------------------------------
    def tick(self) -> bool:
        """Flush when due; returns True when the run must be killed for silence."""
        now = time.monotonic()
        due = now - self.last_flush >= FLUSH_SECONDS or len(self.lines) >= FLUSH_ITEMS
        if due and self.started:  # (a run discarded at its start has no row to add to)
            try:
                self.flush()
            except Exception:  # e.g. the task was deleted mid-run: never break the run
                log.warning("Could not save traces", extra={"run_id": self.run.id})
        silent = now - self.last_output
        if not self.warned and self.stall_warn_seconds and silent >= self.stall_warn_seconds:
            self.warned = True
            self._stalled(silent)
        if self.stall_kill_seconds and silent >= self.stall_kill_seconds:
            self.killed_for_silence = True
            return True
        return False

    def tick_due(self) -> float | None:
        """Seconds until tick() has something to do on its own (a batch to flush, a stall to
        warn about or to kill for); None: nothing until the CLI prints again."""
        now = time.monotonic()
        due = []
        if self.lines:
            due.append(self.last_flush + FLUSH_SECONDS - now)
        if not self.warned and self.stall_warn_seconds:
            due.append(self.last_output + self.stall_warn_seconds - now)
        if self.stall_kill_seconds:
            due.append(self.last_output + self.stall_kill_seconds - now)
        return max(0.0, min(due)) if due else None

    def _drain(self) -> list:
        with self.lock:
            lines = list(self.lines)
            self.lines.clear()
            self.backlog_chars = 0
        items = []
        for line in lines:
            items.extend(parse_line(self.parser, line))
        return items

    def _traces(self, items: list) -> tuple[list[Trace], list[str]]:
        traces, deltas = [], []
        for item in items:
            if isinstance(item, Delta):
                self.pending_text.append(item.text)
                deltas.append(item.text)
            elif isinstance(item, Usage):
                self._add_usage(item)
            elif isinstance(item, ModelUsed):
                self.reported_model = item.name[:200]
            elif isinstance(item, Trace):
                item = self.terms.apply(item)  # every CLI's traces in the user's terms
                if item is None:
                    continue
                if self.pending_text and item.kind != "text":
                    traces.append(Trace("text", "".join(self.pending_text)))
                self.pending_text = []
                traces.append(item)
        return traces, deltas

    def _add_usage(self, usage: Usage) -> None:
        for key in ("input_tokens", "output_tokens", "cost_usd"):
            value = getattr(usage, key)
            if value is None:
                continue
            base = 0 if usage.total or self.totals[key] is None else self.totals[key]
            self.totals[key] = base + value

    def _collect(self, *, final: bool) -> tuple[list, list[str]]:
        """Parse what arrived since the last flush into trace rows (not saved yet)."""
        self.last_flush = time.monotonic()
        traces, deltas = self._traces(self._drain())
        if final and self.pending_text:
            traces.append(Trace("text", "".join(self.pending_text)))
            self.pending_text = []
        now = timezone.now()
        rows = []
        for trace in traces:
            self.seq += 1
            rows.append(
                TraceEvent(
                    run_id=self.run.id,
                    seq=self.seq,
                    kind=trace.kind,
                    action_kind=trace.action_kind or "",
                    text=trace.text,
                    detail=trace.detail,
                    created_at=now,
                )
            )
            if trace.kind in ("action", "plan", "thought", "status"):
                self.current = trace.text
        return rows, deltas

    def _progress(self) -> dict:
        model = {"model": self.reported_model} if self.reported_model != self.model else {}
        return {
            "trace_count": self.seq,
            "current_action": self.current[:500],
            **model,
            **{k: v for k, v in self.totals.items() if v is not None},
        }

    def flush(self) -> None:
        rows, deltas = self._collect(final=False)
        if not rows and not deltas:
            return
        agent_run_progress(
            run_id=self.run.id,
            traces=rows,
            progress=self._progress(),
            event=self._payload(rows, deltas),
        )

    def _payload(self, rows: list, deltas: list[str]) -> dict:
        items = [
            {"seq": r.seq, "kind": r.kind, "action_kind": r.action_kind, "text": r.text[:300]}
            for r in rows[-LIVE_ITEMS_PER_EVENT:]
        ]
        return agent_run_event(
            self.run,
            status=RunStatus.RUNNING,
            items=items,
            text_delta="".join(deltas)[-2000:],
            current_action=self.current[:300],
        )

    def _stalled(self, silent: float) -> None:
        event = agent_run_event(self.run, silent_seconds=int(silent))
        agent_run_stalled(run_id=self.run.id, event=event)

    def note(self, execution) -> None:
        """Remember how the CLI ended (the status is saved by finish())."""
        result = execution.result
        self.exit_code = result.exit_code if result else None
        if execution.stopped:
            self.status = RunStatus.STOPPED
        elif execution.limit:  # out of quota: the run pauses, it did not fail
            self.status = RunStatus.LIMITED
        elif execution.error:
            self.status = RunStatus.FAILED
        else:
            self.status = RunStatus.COMPLETED

    def finish(self, *, status: str, exit_code: int | None) -> None:
        """Save the last traces, usage and the final status in one transaction; a completed
        run clears its CLI's health mark."""
        self.status, self.exit_code = status, exit_code
        self.finish_writes()
        if self.status == RunStatus.COMPLETED:  # the CLI answered: whatever a health check said
            cli_health_works(cli_type=self.run.cli_type)

    def finish_writes(self) -> None:
        """Inside the caller's transaction: the last traces, usage and the final status; the
        event tells open timelines to collapse this run into its final, grouped form."""
        if self.status == RunStatus.RUNNING:  # ended before the CLI ran (or by an exception)
            self.status = RunStatus.FAILED
        if not self.started:  # the CLI never ran (no binary, no folder): the run still counts
            self.start_writes()
        status, exit_code = self.status, self.exit_code
        try:
            rows, _deltas = self._collect(final=True)
        except Exception:
            log.exception("Could not parse the last traces", extra={"run_id": self.run.id})
            rows = []
        agent_run_finish(
            run_id=self.run.id,
            traces=rows,
            status=status,
            exit_code=exit_code,
            progress={**self._progress(), **self.snapshot_fields},
            event={**self._payload(rows, []), "status": status},
            changes_event=not self.changes_later,
        )


# A check's output (issue 30): what a failure comment quotes, and what is kept in all.
TAIL_LINES = 200
TAIL_CHARS = 20_000
CHECK_OUTPUT_CHARS = 2 * 1024 * 1024
ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-_]")


def plain_line(line: str) -> str:
    """A terminal line as text: colour and cursor codes out, a progress bar's last state only
    (what follows its last carriage return)."""
    line = ANSI.sub("", line).rstrip("\r")
    return line.rsplit("\r", 1)[-1]


class CheckRecorder(RunRecorder):
    """The record of one check command (a run of kind "check"): its output lines, colour codes
    stripped, are its traces (kind "output", one per flush, so live in the Activity tab), kept
    up to CHECK_OUTPUT_CHARS (the full output page) with the last TAIL_LINES for its comment."""

    def __init__(self, *, check_name: str, command: str, **kwargs):
        super().__init__(cli_type=RunKind.CHECK, agent_id=None, agent_name=check_name, **kwargs)
        self.run.kind = RunKind.CHECK
        self.run.model = command[:200]  # shown next to the name, as an agent's model is
        self.model = self.reported_model = self.run.model
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self.kept_chars = 0
        self.cut = False

    def _stream_parser(self, cli_type: str):
        return None

    def on_line(self, line: str) -> None:  # stdout and stderr, from the run's watch
        self.last_output = time.monotonic()
        line = plain_line(line)
        with self.lock:
            self.tail.append(line)
            if self.kept_chars + len(line) + 1 > CHECK_OUTPUT_CHARS:
                self.cut = True
                return
            self.kept_chars += len(line) + 1
            self.lines.append(line)

    def _drain(self) -> list:
        with self.lock:
            lines = list(self.lines)
            self.lines.clear()
        if not lines:
            return []
        self.current = next((line for line in reversed(lines) if line.strip()), self.current)
        return [Trace("output", "\n".join(lines))]

    def _traces(self, items: list) -> tuple[list[Trace], list[str]]:
        return items, []

    def tail_text(self) -> str:
        """The end of the output: the last TAIL_LINES lines, at most TAIL_CHARS."""
        with self.lock:
            text = "\n".join(self.tail)
        return text[-TAIL_CHARS:]

    def tail_lines(self) -> int:
        return len(self.tail_text().splitlines())


def stall_limits(workspace, settings: dict | None = None) -> dict:
    """The silence limits of a run in `workspace` (`settings`: already read, else read now)."""
    settings = settings or settings_get()
    return {
        "stall_warn_seconds": float(settings["stall_warning_minutes"]) * 60,
        "stall_kill_seconds": float(workspace.stall_kill_minutes or 0) * 60,
    }
