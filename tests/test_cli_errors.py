"""Errors in the CLI's own words (issue 26): each recorded failure (tests/fixtures/errors/, each
with its source) becomes an error comment that says what the CLI said first, then the exit code,
without start-up noise; and a failure that no retry can fix (logged out, a refused key, an
unknown model, a binary that is another program) has a reason (Cli.cannot_run_reason)."""

import json
from pathlib import Path

import pytest

from runner.clis import CLIS, cli_for
from runner.worker.execution import interpret
from runner.worker.process import ProcessResult
from tests.test_clis import SAMPLES

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "errors"


def _fixtures():
    return sorted(FIXTURES.glob("*.json"))


def _result(sample: dict) -> ProcessResult:
    return ProcessResult(
        exit_code=sample["exit_code"], stdout=sample["stdout"], stderr=sample["stderr"]
    )


@pytest.mark.parametrize("path", _fixtures(), ids=lambda p: p.stem)
def test_a_failed_run_says_what_the_cli_said_then_the_exit_code(path, tmp_path):
    sample = json.loads(path.read_text())
    error = interpret(sample["cli"], _result(sample), tmp_path / "out.json").error
    if sample["error"] is None:  # exit 0: the spec's order goes on to the missing output file
        assert error.startswith("CLI completed but output file was not created")
        return
    assert error == sample["error"], sample["source"]
    for noise in ("256-color", "Ripgrep", "YOLO mode", "Reading additional input"):
        assert noise not in error


@pytest.mark.parametrize("path", _fixtures(), ids=lambda p: p.stem)
def test_a_failure_no_retry_can_fix_has_a_reason(path):
    sample = json.loads(path.read_text())
    reason = cli_for(sample["cli"]).cannot_run_reason(_result(sample))
    assert reason == sample["cannot_run"], sample["source"]


def test_every_cli_has_recorded_failures_of_each_kind():
    samples = [json.loads(path.read_text()) for path in _fixtures()]
    for kind in ("logged out", "unknown model: "):
        found = {s["cli"] for s in samples if (s["cannot_run"] or "").startswith(kind)}
        assert found == {"claude", "codex", "gemini", "opencode"}, kind


@pytest.mark.parametrize(
    "sample",
    [
        "claude_stream_write.jsonl",
        "gemini_stream_write.jsonl",
        "codex_exec_output_schema.jsonl",
        "opencode_json_write.jsonl",
    ],
)
def test_a_run_that_worked_has_no_reason(sample):
    """The recorded successful runs of shared/cli-samples: never "cannot run"."""
    path = SAMPLES / sample
    if not path.exists():
        pytest.skip(f"no recorded sample {sample}")
    cli = sample.split("_")[0]
    result = ProcessResult(exit_code=0, stdout=path.read_text())
    assert CLIS[cli].cannot_run_reason(result) is None


@pytest.mark.parametrize(
    ("cli", "version"),
    [
        ("claude", "2.1.197 (Claude Code)"),
        ("gemini", "0.61.0"),
        ("codex", "codex-cli 0.169.0"),
        ("opencode", "1.18.33"),
    ],
)
def test_version_output_tells_the_cli_from_another_program(cli, version):
    """The real `--version` lines (shared/cli-samples/help/*.version.txt) pass; another
    program's (recorded: python3, GNU echo) does not."""
    assert cli_for(cli).version_problem(version) == ""
    for other in ("Python 3.11.2", "echo (GNU coreutils) 9.1", ""):
        assert cli_for(cli).version_problem(other).startswith(f"not {cli_for(cli).label}")


def test_an_error_event_in_a_run_that_exited_0_is_no_reason():
    """Gemini and OpenCode print some `error` events they recover from: a run that exited 0
    never marks its CLI broken for the words in them."""
    gemini = (
        '{"type": "init", "model": "auto"}\n'
        '{"type": "error", "severity": "warning", "message": "a tool got a 401; going on"}\n'
        '{"type": "result", "status": "success", "stats": {}}\n'
    )
    assert cli_for("gemini").cannot_run_reason(ProcessResult(exit_code=0, stdout=gemini)) is None
    opencode = (
        '{"type": "error", "error": {"name": "APIError", "data": {"statusCode": 401}}}\n'
        '{"type": "text", "part": {"text": "done"}}\n'
    )
    result = ProcessResult(exit_code=0, stdout=opencode)
    assert cli_for("opencode").cannot_run_reason(result) is None
