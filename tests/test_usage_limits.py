"""Usage limits, the adapters' side: each CLI recognises its own "out of quota / rate limited"
output (recorded in tests/fixtures/limits/, each with its source) and reads the reset time."""

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from runner import limits
from runner.clis import cli_for
from tests.fakes.test_fakecli import Box
from tests.test_clis import SAMPLES

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "limits"
NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


def _fixtures():
    return sorted(FIXTURES.glob("*.json"))


@pytest.mark.parametrize("path", _fixtures(), ids=lambda p: p.stem)
def test_each_recorded_limit_output_is_recognised_with_its_reset_time(path, monkeypatch):
    sample = json.loads(path.read_text())
    monkeypatch.setattr(limits, "local_zone", lambda: ZoneInfo(sample.get("zone", "UTC")))
    now = datetime.fromisoformat(sample["now"])
    found = cli_for(sample["cli"]).usage_limit(
        stdout=sample["stdout"], stderr=sample["stderr"], now=now
    )
    assert found is not None, sample["source"]
    assert found.message
    if "message" in sample:  # the CLI's own words, without its start-up noise
        assert found.message == sample["message"]
    expected = sample["reset_at"]
    assert found.reset_at == (datetime.fromisoformat(expected) if expected else None)


def test_every_cli_has_recorded_limit_outputs():
    clis = {json.loads(path.read_text())["cli"] for path in _fixtures()}
    assert clis == {"claude", "codex", "gemini", "opencode"}


@pytest.mark.parametrize(
    ("cli", "sample", "stream"),
    [
        ("claude", "claude_json_401.json", False),
        ("claude", "claude_stream_no_network.jsonl", False),
        ("codex", "codex_exec_401.jsonl", False),
        ("gemini", "gemini_stream_401.jsonl", False),
        ("gemini", "gemini_json_no_network.stderr.txt", True),
        ("opencode", "opencode_json_401.jsonl", False),
        ("opencode", "opencode_json_no_network.jsonl", False),
    ],
)
def test_other_failures_are_not_limits(cli, sample, stream):
    text = (SAMPLES / sample).read_text()
    stdout, stderr = ("", text) if stream else (text, "")
    assert cli_for(cli).usage_limit(stdout=stdout, stderr=stderr, now=NOW) is None


def test_the_agents_own_words_about_limits_are_not_a_limit():
    """Only the CLI's error output counts: an agent that writes about rate limits in its
    answer (or a tool's output) does not pause anything."""
    prose = json.dumps(
        {
            "type": "assistant",
            "message": {"content": [{"type": "text", "text": "429 rate_limit_error handled"}]},
        }
    )
    ok = json.dumps({"type": "result", "is_error": False, "result": "You've hit your limit"})
    assert cli_for("claude").usage_limit(stdout=f"{prose}\n{ok}\n", stderr="", now=NOW) is None
    codex = json.dumps(
        {"type": "item.completed", "item": {"type": "agent_message", "text": "quota exceeded"}}
    )
    assert cli_for("codex").usage_limit(stdout=codex, stderr="", now=NOW) is None


def test_a_clock_time_already_past_today_means_tomorrow():
    text = "You've hit your session limit · resets 9am (Europe/Berlin)"
    assert limits.reset_time(text, NOW) == datetime(2026, 11, 25, 8, 0, tzinfo=UTC)


def test_a_reset_in_the_past_falls_back_to_probing(caplog):
    assert limits.reset_time("Claude AI usage limit reached|1700000000", NOW) is None
    assert "in the past" in caplog.text


def test_a_reset_years_away_is_clamped_to_seven_days(caplog):
    text = "You've hit your usage limit. Try again at Sep 20th, 2031 4:00 PM."
    assert limits.reset_time(text, NOW) == NOW + timedelta(days=7)
    assert "clamped" in caplog.text


@pytest.mark.parametrize(
    "text",
    [
        "You've hit your session limit · resets soon",
        "You've hit your session limit · resets 25:99pm (Europe/Berlin)",
        "try again at Foo 31st, 2026 4:00 PM",
        "Your quota will reset after later.",
    ],
)
def test_unreadable_reset_texts_mean_probing(text):
    assert limits.reset_time(text, NOW) is None


def test_the_probe_back_off_caps_at_an_hour():
    delays = [limits.probe_delay(n).total_seconds() / 60 for n in range(7)]
    assert delays == [5, 15, 30, 60, 60, 60, 60]


# the fake CLI's `limit` directive prints each CLI's recorded output ------------------------

CLIS = ("claude", "codex", "gemini", "opencode")


@pytest.fixture
def box(tmp_path) -> Box:
    return Box(tmp_path)


@pytest.mark.parametrize("cli", CLIS)
def test_the_fake_cli_limit_directive_is_recognised_by_the_real_adapter(box, cli):
    reset = int(time.time()) + 3 * 3600
    box.task(description=f"@fake limit {reset}")
    proc = box.run(cli, stream=True)
    assert proc.returncode != 0
    found = cli_for(cli).usage_limit(stdout=proc.stdout, stderr=proc.stderr, now=_now())
    assert found is not None
    assert abs(found.reset_at.timestamp() - reset) <= 60  # codex prints minutes only

    box.task(description="@fake limit")
    proc = box.run(cli, stream=True)
    found = cli_for(cli).usage_limit(stdout=proc.stdout, stderr=proc.stderr, now=_now())
    assert found is not None and found.reset_at is None


def _now() -> datetime:
    return datetime.now(UTC)


def test_the_older_claude_wording_with_a_line_break_is_read_too():
    """https://github.com/anthropics/claude-code/issues/9236: "Claude usage limit reached. Your
    limit will reset \\n at 3pm (America/Santiago)." (12:00 UTC is 09:00 in Santiago.)"""
    text = "Claude usage limit reached. Your limit will reset \n     at 3pm (America/Santiago)."
    found = cli_for("claude").usage_limit(stdout="", stderr=text, now=NOW)
    assert found.reset_at == datetime(2026, 11, 24, 18, 0, tzinfo=UTC)
