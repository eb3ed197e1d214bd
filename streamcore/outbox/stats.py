"""Statistics: jobs per queue and status, retries, processing times, Prometheus text."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from streamcore.outbox.claim import now_ms
from streamcore.outbox.schema import IS_DONE, STATUSES, jobs

__all__ = ["percentile", "processing_time_stats", "prometheus_text", "queue_stats", "retry_stats"]


DAY_MS = 86_400_000
PERCENTILES = (50, 90, 95, 99)


def queue_stats(conn: sa.Connection) -> list[dict[str, Any]]:
    """Per queue: how many jobs are in each status, and the total."""
    counts: dict[str, dict[str, int]] = {}
    rows = conn.execute(
        sa.select(jobs.c.queue, jobs.c.status, sa.func.count()).group_by(
            jobs.c.queue, jobs.c.status
        )
    )
    for queue, status, count in rows:
        counts.setdefault(queue, dict.fromkeys(STATUSES, 0))[status] = count
    return [
        {"queue": queue, **by_status, "total": sum(by_status.values())}
        for queue, by_status in sorted(counts.items())
    ]


def retry_stats(conn: sa.Connection, age_days: float = 1.0) -> list[dict[str, Any]]:
    """Per queue, for jobs updated in the last `age_days`: how many needed more than one try,
    the retries they took, the most tries of one job, and how many are in error now."""
    since = now_ms() - int(age_days * DAY_MS)
    retried = sa.case((jobs.c.tries > 1, 1), else_=0)
    extra = sa.case((jobs.c.tries > 1, jobs.c.tries - 1), else_=0)
    in_error = sa.case((jobs.c.status == "error", 1), else_=0)
    rows = conn.execute(
        sa.select(
            jobs.c.queue,
            sa.func.count(),
            sa.func.sum(retried),
            sa.func.sum(extra),
            sa.func.max(jobs.c.tries),
            sa.func.sum(in_error),
        )
        .where(jobs.c.updated_ms >= since)
        .group_by(jobs.c.queue)
        .order_by(jobs.c.queue)
    )
    return [
        {
            "queue": queue,
            "jobs": int(count),
            "retried_jobs": int(retried_jobs or 0),
            "retries": int(retries or 0),
            "max_tries": int(max_tries or 0),
            "errors": int(errors or 0),
        }
        for queue, count, retried_jobs, retries, max_tries, errors in rows
    ]


def percentile(ordered: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile of sorted values."""
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return float(ordered[rank - 1])


def processing_time_stats(
    conn: sa.Connection, age_days: float = 1.0, queue: str | None = None
) -> list[dict[str, Any]]:
    """Per queue, over jobs done in the last `age_days`: count, avg, min, max, p50, p90, p95
    and p99 of the time from the last claim or stamp (see `lease`) to done, in milliseconds."""
    since = now_ms() - int(age_days * DAY_MS)
    query = sa.select(jobs.c.queue, jobs.c.done_ms - jobs.c.processing_ms).where(
        IS_DONE, jobs.c.done_ms >= since, jobs.c.processing_ms.is_not(None)
    )
    if queue is not None:
        query = query.where(jobs.c.queue == queue)
    durations: dict[str, list[int]] = {}
    for name, duration in conn.execute(query):
        durations.setdefault(name, []).append(int(duration))
    out = []
    for name, values in sorted(durations.items()):
        values.sort()
        entry: dict[str, Any] = {
            "queue": name,
            "count": len(values),
            "avg_ms": sum(values) / len(values),
            "min_ms": float(values[0]),
            "max_ms": float(values[-1]),
        }
        entry.update({f"p{p}_ms": percentile(values, p) for p in PERCENTILES})
        out.append(entry)
    return out


def _labels(**labels: str) -> str:
    inner = ",".join(
        f'{k}="{v.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'
        for k, v in labels.items()
    )
    return "{" + inner + "}"


def prometheus_text(
    queues: list[dict[str, Any]],
    counters: dict[tuple[str, str], int],
    *,
    healthy: bool,
    overdue: int,
) -> str:
    """The outbox metrics in the Prometheus text exposition format."""
    lines = [
        "# HELP streamcore_outbox_jobs Jobs in the outbox table by queue and status.",
        "# TYPE streamcore_outbox_jobs gauge",
    ]
    for entry in queues:
        for status in STATUSES:
            lines.append(
                f"streamcore_outbox_jobs{_labels(queue=entry['queue'], status=status)} "
                f"{entry[status]}"
            )
    lines += [
        "# HELP streamcore_outbox_runs_total Job runs of this process by queue and outcome.",
        "# TYPE streamcore_outbox_runs_total counter",
    ]
    for (queue, outcome), count in sorted(counters.items()):
        lines.append(f"streamcore_outbox_runs_total{_labels(queue=queue, outcome=outcome)} {count}")
    lines += [
        "# HELP streamcore_outbox_overdue_total Job runs that exceeded their max execute time.",
        "# TYPE streamcore_outbox_overdue_total counter",
        f"streamcore_outbox_overdue_total {overdue}",
        "# HELP streamcore_outbox_healthy 1 if the outbox is healthy (see Outbox.healthy).",
        "# TYPE streamcore_outbox_healthy gauge",
        f"streamcore_outbox_healthy {int(healthy)}",
    ]
    return "\n".join(lines) + "\n"
