"""Usage limits, the worker's side (DESIGN "Usage limits"): a CLI limited until T is lifted at T;
one limited without a known reset time gets a cheap health prompt on a back-off (5, 15, 30, then
every 60 minutes), and is lifted when the prompt answers. Lifting re-queues the waiting work,
which continues at the agent where it stopped.

`clock` is injectable so that tests move time instead of sleeping.
"""

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from django.db import connection
from django.utils import timezone

from notifications.cli_states import cli_limit_lift
from runner.clis import cli_for
from runner.limits import Limit
from runner.models import CliHealth, CliHealthStatus
from runner.services import cli_limit_probe_failed
from worker import health

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProbeResult:
    answered: bool
    limit: Limit | None = None


def probe(cli_type: str) -> ProbeResult:
    """The health prompt, once: did the CLI answer, or is it still out of quota?"""
    outcome = health.check(cli_type, full=True)
    if "limit" in outcome:
        return ProbeResult(answered=False, limit=outcome["limit"])
    if outcome["status"] == CliHealthStatus.HEALTHY:
        return ProbeResult(answered=True)
    error = outcome.get("error", "")
    limit = cli_for(cli_type).usage_limit(stdout="", stderr=error, now=timezone.now())
    return ProbeResult(answered=False, limit=limit)


class LimitWatch:
    """Called from the worker's loop: lifts due limits and starts due probes (one per CLI at a
    time, on a thread of its own so the loop never waits for a model call)."""

    def __init__(
        self,
        *,
        clock: Callable = timezone.now,
        prober: Callable[[str], ProbeResult] = probe,
        background: bool = True,
    ):
        self.clock, self.prober, self.background = clock, prober, background
        self.lock = threading.Lock()
        self.probing: set[str] = set()

    def tick(self) -> None:
        now = self.clock()
        for row in CliHealth.objects.filter(limited_since__isnull=False):
            if row.limited_until is not None:
                if row.limited_until <= now:
                    log.info("Usage limit reset time reached", extra={"cli": row.cli_type})
                    cli_limit_lift(cli_type=row.cli_type)
            elif row.probe_at is not None and row.probe_at <= now:
                self._start_probe(row.cli_type)

    def _start_probe(self, cli_type: str) -> None:
        with self.lock:
            if cli_type in self.probing:
                return
            self.probing.add(cli_type)
        if not self.background:
            self._probe(cli_type)
            return
        threading.Thread(
            target=self._probe, args=(cli_type,), name=f"malamar-probe-{cli_type}", daemon=True
        ).start()

    def _probe(self, cli_type: str) -> None:
        try:
            result = self.prober(cli_type)
            if result.answered:
                log.info("Usage limit probe answered", extra={"cli": cli_type})
                cli_limit_lift(cli_type=cli_type)
            else:
                cli_limit_probe_failed(cli_type=cli_type, limit=result.limit, now=self.clock())
        except Exception:  # a probe must never take the worker down; the next one retries
            log.exception("Usage limit probe failed", extra={"cli": cli_type})
            cli_limit_probe_failed(cli_type=cli_type, limit=None, now=self.clock())
        finally:
            with self.lock:
                self.probing.discard(cli_type)
            if self.background:
                connection.close()
