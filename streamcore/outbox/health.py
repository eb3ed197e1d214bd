"""Health, for liveness probes and dashboards: whether this outbox is doing its job.

Healthy means: during the start-up grace period, always (a restarted service first works off
what piled up while it was down); after it, every worker and the retry poller are alive, and no
consumed queue has a job that has been in error for longer than `allowed_error_time` (errors that
retries do not clear need an operator).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import sqlalchemy as sa

from streamcore.outbox.claim import now_ms
from streamcore.outbox.schema import ERROR, jobs

__all__ = ["DEFAULT_ALLOWED_ERROR_TIME", "DEFAULT_STARTUP_GRACE", "Health", "assess"]


DEFAULT_ALLOWED_ERROR_TIME = 15 * 60.0
DEFAULT_STARTUP_GRACE = 10 * 60.0


@dataclass(frozen=True)
class Health:
    """Whether the outbox is healthy, why, and per queue the jobs in error for too long."""

    healthy: bool
    reason: str
    stale_errors: dict[str, int] = field(default_factory=dict)


def stale_errors(
    conn: sa.Connection, queues: list[str], allowed_error_time: float
) -> dict[str, int]:
    """Per queue, jobs in error since before `allowed_error_time` seconds ago."""
    if not queues:
        return {}
    cutoff = now_ms() - int(allowed_error_time * 1000)
    rows = conn.execute(
        sa.select(jobs.c.queue, sa.func.count())
        .where(jobs.c.status == ERROR, jobs.c.queue.in_(queues), jobs.c.error_ms < cutoff)
        .group_by(jobs.c.queue)
    )
    return {queue: int(count) for queue, count in rows}


def assess(
    conn: sa.Connection,
    queues: list[str],
    *,
    started_at: float | None,
    threads_alive: bool,
    allowed_error_time: float,
    startup_grace: float,
) -> Health:
    if started_at is None:
        return Health(False, "not started")
    if time.monotonic() - started_at < startup_grace:
        return Health(True, f"starting up (grace of {startup_grace:g} s)")
    if not threads_alive:
        return Health(False, "a worker or the retry poller thread died; see the log")
    stale = stale_errors(conn, queues, allowed_error_time)
    if stale:
        listed = ", ".join(f"{q}: {n}" for q, n in sorted(stale.items()))
        return Health(
            False,
            f"jobs in error for more than {allowed_error_time:g} s ({listed}); "
            "see `streamcore outbox errors`",
            stale,
        )
    return Health(True, "ok")
