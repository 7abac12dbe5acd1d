"""What a CLI prints is hostile input too: every parser path of every CLI (the run's result,
usage-limit detection, live stream events, the health answer) meets each recorded output with
each of its values swapped for a value of another type or size, and 100,000-level nesting. A
run's result is data or an error message; never an exception out of the parser."""

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from runner import limits
from runner.clis import cli_for
from runner.streams import parse_line
from worker.execution import interpret
from worker.process import ProcessResult

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "limits"
NOW = datetime(2026, 11, 24, 12, tzinfo=UTC)
ODD_VALUES = [None, True, 0, -1, 10**30, 1e308, "", "x" * 10_000, [], {}, [1, "a"], {"a": [None]}]
DEEP = "[" * 100_000 + "]" * 100_000


def _paths(value, path=()):
    yield path
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _paths(child, (*path, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _paths(child, (*path, index))


def _swapped(value, path, new):
    if not path:
        return new
    copy = json.loads(json.dumps(value))
    holder = copy
    for step in path[:-1]:
        holder = holder[step]
    holder[path[-1]] = new
    return copy


def _variants(text: str):
    """`text` with each JSON value of each of its JSON lines (or its one JSON document)
    swapped for each odd value, one at a time."""
    lines = text.splitlines()
    for number, line in enumerate(lines):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        for path in _paths(value):
            for new in ODD_VALUES:
                changed = json.dumps(_swapped(value, path, new))
                yield "\n".join([*lines[:number], changed, *lines[number + 1 :]])
    try:
        whole = json.loads(text)
    except ValueError:
        return
    if "\n" in text.strip():
        for path in _paths(whole):
            for new in ODD_VALUES:
                yield json.dumps(_swapped(whole, path, new), indent=1)


def _recorded():
    for path in sorted(FIXTURES.glob("*.json")):
        sample = json.loads(path.read_text())
        yield pytest.param(sample, id=path.stem)


def _every_path(cli, stdout: str, stderr: str, exit_code: int, output: Path) -> None:
    for code in (exit_code, 0):
        interpret(cli, ProcessResult(exit_code=code, stdout=stdout, stderr=stderr), output)
    cli.usage_limit(stdout=stdout, stderr=stderr, now=NOW)
    cli.health_answer(stdout)
    parser = cli.stream_parser()
    for line in stdout.splitlines():
        parse_line(parser, line)


@pytest.mark.parametrize("sample", list(_recorded()))
def test_odd_values_anywhere_in_a_cli_output_never_raise(sample, tmp_path):
    cli = cli_for(sample["cli"])
    output = tmp_path / "output.json"
    stdout, stderr, code = sample.get("stdout", ""), sample.get("stderr", ""), sample["exit_code"]
    for variant in _variants(stdout):
        _every_path(cli, variant, stderr, code, output)
    for variant in _variants(stderr):
        _every_path(cli, stdout, variant, code, output)


@pytest.mark.parametrize("cli_type", ["claude", "codex", "gemini", "opencode"])
def test_deep_nesting_and_runaway_text_in_any_stream_are_no_internal_error(cli_type, tmp_path):
    cli = cli_for(cli_type)
    output = tmp_path / "output.json"
    output.write_text(DEEP)
    deep_event = '{"type": "result", "result": ' + DEEP + "}"
    for stdout, stderr in ((deep_event, ""), ("", deep_event), (DEEP, DEEP), ("{" * 50_000, "")):
        _every_path(cli, stdout, stderr, 1, output)
        run = interpret(cli, ProcessResult(exit_code=0, stdout=stdout, stderr=stderr), output)
        assert run.error, run


@pytest.mark.parametrize(
    "message",
    [
        "Please retry in 99999999999999999999999s.",
        "You can try again in 99999999999999999999 days.",
        "Your quota will reset after 99999999999999999999h.",
        "Claude AI usage limit reached|999999999999",
    ],
)
def test_a_reset_time_too_far_to_compute_waits_the_longest_wait(message):
    assert limits.reset_time(message, NOW) == NOW + limits.MAX_WAIT
    assert limits.seconds_after("1e308", NOW) == NOW + limits.MAX_WAIT
    assert limits.seconds_after("nan", NOW) is None
