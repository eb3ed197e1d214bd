"""The health probe of a stream processor (Nuxeo's `StreamProbe`).

A computation terminated by a failure shows in the probe at once (`terminated`, `message`), but
the probe turns unhealthy only `delay` seconds (default 36 h) after the first failure: enough
time to fix the cause and restart within the stream retention without paging anyone for a
restart-only incident, and a hard signal if nobody did."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from streamcore.computation.stats import TERMINATED

if TYPE_CHECKING:
    from streamcore.computation.stream_processor import StreamProcessor

__all__ = ["DEFAULT_HEALTH_DELAY", "HealthStatus", "check_health"]

DEFAULT_HEALTH_DELAY = 36 * 3600.0


@dataclass(frozen=True)
class HealthStatus:
    """What the probe found: healthy or not, the computations terminated by a failure and why,
    and the message a monitor shows."""

    healthy: bool
    terminated: list[str] = field(default_factory=list)  # computations terminated by a failure
    first_failure: float | None = None  # epoch seconds
    failures: dict[str, str] = field(default_factory=dict)  # computation -> first failure
    message: str = "ok"

    def to_dict(self) -> dict[str, Any]:
        return {
            "healthy": self.healthy,
            "terminated": list(self.terminated),
            "first_failure": self.first_failure,
            "failures": dict(self.failures),
            "message": self.message,
        }


def _duration(seconds: float) -> str:
    hours, rest = divmod(int(seconds), 3600)
    return f"PT{hours}H" if not rest else f"PT{hours}H{rest // 60}M{rest % 60}S"


def check_health(
    processor: StreamProcessor, delay: float = DEFAULT_HEALTH_DELAY, now: float | None = None
) -> HealthStatus:
    """The health of `processor` at `now` (epoch seconds, default: the current time)."""
    now = time.time() if now is None else now
    failures: dict[str, tuple[float, str]] = {}
    for stats in processor.unit_stats():
        if stats.state == TERMINATED and stats.failure_time is not None:
            known = failures.get(stats.computation)
            if known is None or stats.failure_time < known[0]:
                failures[stats.computation] = (stats.failure_time, stats.failure or "")
    if not failures:
        return HealthStatus(True)
    first = min(t for t, _ in failures.values())
    when = datetime.fromtimestamp(first, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    message = (
        f"{len(failures)} computation(s) have been terminated after failure "
        f"({', '.join(sorted(failures))}). First failure detected: {when}, probe failure "
        f"delayed by {_duration(delay)}. The processor must be restarted within the stream "
        "retention period."
    )
    return HealthStatus(
        healthy=now - first < delay,
        terminated=sorted(failures),
        first_failure=first,
        failures={name: text for name, (_, text) in failures.items()},
        message=message,
    )
