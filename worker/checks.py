"""A pass's checks phase (issue 30, DESIGN "Checks"): the workspace's check commands, run in
order in the task's folder or worktree once its agents would put it In Review, stopping at the
first failure.

Each check is a run like an agent's, through the same pieces: process.spawn (its own process
group, held at the gate until the start transaction recorded it on the pass's queue item, so a
cancel, a delete, a move or a shutdown kills it and a restart's recovery kills what survived and
runs the checks again), a recorder (its output streamed to the Activity tab, bounded), the run's
snapshots (a formatter's changes show in the task's Changes; on a task branch they are
committed). A check that exceeds its time limit is killed and counts as failed. The round's end
is one service, tasks.services.task_checks_ended, in one transaction.
"""

import os
from dataclasses import dataclass

from django.db import transaction

from core import events
from runner.clis.base import Command
from runner.models import RunStatus
from runner.recorder import CheckRecorder
from tasks import branches
from tasks import services as task_services
from worker import execution, process
from worker.snapshotting import RunSnapshots
from workspaces.checks import Check, workspace_checks


class ChecksStopped(Exception):
    """The pass was stopped (or the worker stops) during a check: discard the round."""


@dataclass
class CheckOutcome:
    check: Check
    recorder: CheckRecorder
    status: str  # passed | failed | timed_out | not_started
    exit_code: int | None = None
    duration: float = 0.0
    start_error: str = ""

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def result(self) -> dict:
        return {
            "name": self.check.name,
            "command": self.check.command,
            "status": self.status,
            "exit_code": self.exit_code,
            "duration": round(self.duration, 2),
            "run_id": self.recorder.run.id,
        }

    def failure(self) -> dict:
        return {
            **self.result(),
            "timed_out": self.status == "timed_out",
            "timeout_minutes": self.check.timeout_minutes,
            "start_error": self.start_error,
            "tail": self.recorder.tail_text(),
            "tail_lines": self.recorder.tail_lines(),
        }


def run_checks(owner) -> None:
    """Run the workspace's checks for `owner` (a TaskPass in its checks phase) and end the
    round through tasks.services. Raises ChecksStopped when the pass was stopped meanwhile."""
    outcomes: list[CheckOutcome] = []
    for check in workspace_checks(owner.task.workspace):
        outcome = _run_one(owner, check)
        outcomes.append(outcome)
        if not outcome.passed:
            break
    failed = next((o for o in outcomes if not o.passed), None)
    with transaction.atomic(), events.batched():
        if not owner.lock_if_wanted():
            raise ChecksStopped
        task_services.task_checks_ended(
            task=owner.task,
            item=owner.item,
            results=[outcome.result() for outcome in outcomes],
            failure=failed.failure() if failed else None,
            settings=owner.settings,
        )
    owner.ended = True


def _recorder(owner, check: Check) -> CheckRecorder:
    return CheckRecorder(
        check_name=check.name,
        command=check.command,
        workspace_id=owner.task.workspace_id,
        task_id=owner.task.id,
        stall_warn_seconds=0,  # a quiet test suite is no stuck agent: its time limit rules
        deferred=True,
        worker_id=owner.item.worker_id,
    )


def _run_one(owner, check: Check) -> CheckOutcome:
    recorder = _recorder(owner, check)
    cwd, problem = owner.run_directory()
    if cwd is None:
        return _not_started(recorder, check, problem)
    try:
        argv = check.argv
    except ValueError as exc:  # cleaned when saved; an imported or older row may not be
        return _not_started(recorder, check, f"the command cannot be read: {exc}")
    snapshots = RunSnapshots(recorder, cwd, owner.snapshots)
    snapshots.take_before()
    recorder.use_working_directory(cwd)
    held = process.spawn(
        Command(argv), cwd=str(cwd), env=execution.process_env(dict(os.environ), cwd=cwd)
    )
    if held.start_error is None:
        try:
            _start(owner, recorder, held.started)
        except BaseException:
            held.cancel()
            raise
        held.release()
    result = held.wait(
        stop=owner.stop,
        timeout=check.timeout_seconds,
        on_line=recorder.on_line,
        on_error_line=recorder.on_line,
        on_output=recorder.on_output,
        on_tick=recorder.tick,
    )
    snapshots.take_after()
    _commit(owner, check)
    if result.stopped or owner.stop.is_set():
        recorder.status = RunStatus.INTERRUPTED if owner.shutdown.is_set() else RunStatus.STOPPED
        _finish(recorder)
        raise ChecksStopped
    outcome = CheckOutcome(check, recorder, "passed", result.exit_code, result.duration)
    if result.start_error:
        outcome.status, outcome.start_error = "not_started", result.start_error
        recorder.on_line(result.start_error)
    elif result.timed_out:
        outcome.status = "timed_out"
        recorder.on_line(f"Timed out after {check.timeout_minutes:g} min: killed.")
    elif result.exit_code != 0:
        outcome.status = "failed"
    if recorder.cut:
        recorder.on_line("(output cut: the run kept its first 2 MB)")
    recorder.status = RunStatus.COMPLETED if outcome.passed else RunStatus.FAILED
    recorder.exit_code = result.exit_code
    _finish(recorder)
    return outcome


def _not_started(recorder: CheckRecorder, check: Check, problem: str) -> CheckOutcome:
    recorder.on_line(problem)
    recorder.status = RunStatus.FAILED
    _finish(recorder)
    return CheckOutcome(check, recorder, "not_started", start_error=problem)


def _start(owner, recorder: CheckRecorder, started: process.Started) -> None:
    """The start transaction: the process recorded on the pass's item (the "still wanted"
    check, and what a recovery kills) and the run's row, before the command may run."""
    with transaction.atomic(), events.batched():
        recorded = owner.queue.objects.record_process(
            owner.item, pid=started.pid, pgid=started.pgid, started_at=started.create_time
        )
        if not recorded:
            raise ChecksStopped
        recorder.start_writes()
        task_services.task_check_started(task=owner.task, name=recorder.run.agent_name)


def _finish(recorder: CheckRecorder) -> None:
    with transaction.atomic(), events.batched():
        recorder.finish_writes()


def _commit(owner, check: Check) -> None:
    """On a task branch, what a check changed (a formatter) is committed like an agent's work."""
    if owner.worktree is None:
        return
    try:
        branches.commit_run(owner.worktree.path, agent_name=f"Check {check.name}", task=owner.task)
    except branches.BranchProblem:
        return  # the Changes tab still shows it; the next agent's commit takes it along
