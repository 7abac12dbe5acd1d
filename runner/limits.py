"""Usage limits (DESIGN "Usage limits"): when a CLI's quota or rate limit runs out, the run is
not an error; the CLI is "limited until T" and the work that needs it waits.

This module is pure: it turns the reset texts the CLIs print into an aware datetime (or None:
unknown, probe on a back-off) and says when to probe next. Each CLI class picks the texts it
trusts (its error events, never the agent's own prose) and calls `reset_time`.
"""

import logging
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

log = logging.getLogger(__name__)

# Never trust a reset further away than this (a bad parse or a monthly cap): probe by then.
MAX_WAIT = timedelta(days=7)
# Minutes between health probes of a CLI limited without a known reset time; the last repeats,
# so a CLI limited forever costs one cheap prompt an hour, never a storm.
PROBE_BACKOFF_MINUTES = (5, 15, 30, 60)


@dataclass(frozen=True)
class Limit:
    """A run ended on the CLI's quota or rate limit."""

    message: str  # the CLI's own words, shown to the user
    reset_at: datetime | None = None  # None: unknown, probe on the back-off


def probe_delay(attempt: int) -> timedelta:
    """How long to wait before probe number `attempt` (0-based)."""
    step = PROBE_BACKOFF_MINUTES[min(attempt, len(PROBE_BACKOFF_MINUTES) - 1)]
    return timedelta(minutes=step)


def local_zone():
    """The zone of clock times printed without one (Codex prints the machine's local time)."""
    return datetime.now().astimezone().tzinfo


def clamp(reset_at: datetime | None, now: datetime) -> datetime | None:
    """A reset in the past is unknown (probe instead); one beyond MAX_WAIT waits MAX_WAIT."""
    if reset_at is None:
        return None
    if reset_at <= now:
        log.warning(
            "Usage limit reset time is in the past; probing instead",
            extra={"reset_at": reset_at.isoformat()},
        )
        return None
    if reset_at - now > MAX_WAIT:
        log.warning(
            "Usage limit reset time is too far away; clamped to 7 days",
            extra={"reset_at": reset_at.isoformat()},
        )
        return now + MAX_WAIT
    return reset_at


# the reset texts ---------------------------------------------------------------------------

# Claude Code: "resets 5:40pm (Europe/Berlin)", "will reset at 3pm (America/Santiago)", and when
# the reset is more than a day away "resets Nov 29, 1:48am (UTC)" (a year only when it is not
# this year's: "resets Jan 2, 2027, 1:48am (UTC)"); its formatResetTime drops the seconds.
_CLOCK_IN_ZONE = re.compile(
    r"reset(?:s| at|s at)?\s+(?:at\s+)?"
    r"(?:([A-Z][a-z]{2})\s+(\d{1,2}),?\s+(?:(\d{4}),?\s+)?)?"
    r"(\d{1,2})(?::(\d{2}))?\s*([ap]m)\s*\(([^)]+)\)",
    re.I,
)
# Claude Code before 2.x: "Claude AI usage limit reached|1749924000" (epoch seconds).
_EPOCH = re.compile(r"usage limit reached\|(\d{9,12})", re.I)
# Codex: "try again at Sep 20th, 2026 4:00 PM." or "try again at 3:29 PM." (local time).
_CODEX_AT = re.compile(
    r"try again at\s+(?:([A-Z][a-z]{2})\s+(\d{1,2})(?:st|nd|rd|th)?,\s+(\d{4})\s+)?"
    r"(\d{1,2}):(\d{2})\s*([AP]M)",
    re.I,
)
# Codex: "try again in 2 days 17 hours 14 minutes."
_IN_WORDS = re.compile(
    r"try again in\s+((?:\d+\s+(?:days?|hours?|minutes?|seconds?)[\s,]*(?:and\s+)?)+)", re.I
)
_WORD_PART = re.compile(r"(\d+)\s+(day|hour|minute|second)", re.I)
# Gemini: "Your quota will reset after 4h28m20s." / "Please retry in 37.5s." / "in 900ms".
_RESET_AFTER = re.compile(r"reset after\s+((?:\d+h)?(?:\d+m)?(?:\d+(?:\.\d+)?s)?)", re.I)
_RETRY_IN = re.compile(r"retry in\s+(\d+(?:\.\d+)?)\s*(ms|s)\b", re.I)
# A daily quota ("You have exhausted your daily quota on this model.": Gemini CLI, exit 173)
# resets once a day; the provider's raw error printed next to it may carry a sub-minute
# "Please retry in 9s", which is the per-request hint, never the quota's reset.
_DAILY = re.compile(r"daily quota|quota per day|PerDay", re.I)
_HMS = re.compile(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+(?:\.\d+)?)s)?$")
_MONTH_NAMES = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_MONTHS = {name: number for number, name in enumerate(_MONTH_NAMES, 1)}


def _minute_reset(at: datetime, local_now: datetime, *, dated: bool) -> datetime:
    """A reset the CLI printed to the minute (Claude, Codex): a minute already under way is
    this minute, so it is over at its end (a "1:42 AM" read at 01:42:00 is not tomorrow); an
    undated time already past means tomorrow."""
    if at > local_now:
        return at
    if local_now - at < timedelta(minutes=1):
        return at + timedelta(minutes=1)
    return at if dated else at + timedelta(days=1)


def _clock_in_zone(match: re.Match, now: datetime) -> datetime | None:
    month, day, year, hour, minute, half, zone = match.groups()
    try:
        tz = ZoneInfo(zone.strip())
    except (ZoneInfoNotFoundError, ValueError):
        return None
    hour = int(hour) % 12 + (12 if half.lower() == "pm" else 0)
    if hour > 23 or int(minute or 0) > 59:
        return None
    local_now = now.astimezone(tz)
    at = local_now.replace(hour=hour, minute=int(minute or 0), second=0, microsecond=0)
    if month is not None:
        number = _MONTHS.get(month.lower())
        try:
            at = at.replace(year=int(year or local_now.year), month=number or 0, day=int(day))
        except ValueError:
            return None
    return _minute_reset(at, local_now, dated=month is not None)


def _codex_at(match: re.Match, now: datetime) -> datetime | None:
    month, day, year, hour, minute, half = match.groups()
    tz = local_zone()
    hour = int(hour) % 12 + (12 if half.upper() == "PM" else 0)
    if hour > 23 or int(minute) > 59:
        return None
    local_now = now.astimezone(tz)
    if month is None:  # a time only: today, else tomorrow
        at = local_now.replace(hour=hour, minute=int(minute), second=0, microsecond=0)
        return _minute_reset(at, local_now, dated=False)
    number = _MONTHS.get(month.lower())
    if number is None:
        return None
    try:
        at = datetime(int(year), number, int(day), hour, int(minute), tzinfo=tz)
    except ValueError:
        return None
    return _minute_reset(at, local_now, dated=True)


def _in_words(match: re.Match, now: datetime) -> datetime:
    units = {"day": "days", "hour": "hours", "minute": "minutes", "second": "seconds"}
    parts = {units[u.lower()]: int(n) for n, u in _WORD_PART.findall(match.group(1))}
    return now + timedelta(**parts)


def _hms(text: str, now: datetime) -> datetime | None:
    found = _HMS.match(text)
    if not text or not found:
        return None
    hours, minutes, seconds = found.groups()
    return now + timedelta(
        hours=int(hours or 0), minutes=int(minutes or 0), seconds=float(seconds or 0)
    )


def reset_time(text: str, now: datetime) -> datetime | None:
    """The reset time a limit message names, clamped (see `clamp`); None if it names none or
    one that cannot be read."""
    try:
        return clamp(_raw_reset_time(text, now), now)
    except (OverflowError, ValueError, OSError):  # a time too far to compute (1e30 seconds)
        return now + MAX_WAIT


def _raw_reset_time(text: str, now: datetime) -> datetime | None:
    if found := _EPOCH.search(text):
        return datetime.fromtimestamp(int(found.group(1)), tz=UTC)
    if found := _CLOCK_IN_ZONE.search(text):
        return _clock_in_zone(found, now)
    if found := _CODEX_AT.search(text):
        return _codex_at(found, now)
    if found := _IN_WORDS.search(text):
        return _in_words(found, now)
    if found := _RESET_AFTER.search(text):
        return _hms(found.group(1), now)
    if _DAILY.search(text):  # a per-request retry hint in the same text is not its reset
        return None
    if found := _RETRY_IN.search(text):
        value, unit = float(found.group(1)), found.group(2).lower()
        return now + timedelta(seconds=value / 1000 if unit == "ms" else value)
    return None


def seconds_after(value, now: datetime) -> datetime | None:
    """A `retry-after` header value in seconds (HTTP), or None."""
    try:
        seconds = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    if not seconds > 0:  # NaN too
        return None
    return clamp(now + timedelta(seconds=min(seconds, MAX_WAIT.total_seconds() + 1)), now)


def first_limit(texts, patterns: re.Pattern, now: datetime) -> Limit | None:
    """The first of `texts` that `patterns` calls a usage limit, with its reset time."""
    for text in texts:
        if text and patterns.search(text):
            return Limit(message=text.strip()[:500], reset_at=reset_time(text, now))
    return None
