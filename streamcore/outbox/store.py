"""State changes after a claim, and the queries behind retries and operations.

Every transition out of `processing` compares the lock token the job was claimed with: when the
hung detector has handed a job to another worker, the first worker's late `done` changes nothing
(and is logged), so a job is finished once.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from streamcore.outbox import sql
from streamcore.outbox.claim import ClaimedJob, now_ms
from streamcore.outbox.schema import DONE, ERROR, INIT, PROCESSING, TABLE, jobs

__all__ = [
    "FailedJob",
    "check_done",
    "due_errors",
    "errors",
    "force_retry",
    "head",
    "mark_done",
    "mark_error",
    "oldest_error",
    "release",
    "reset_hung",
    "stamp",
]


logger = logging.getLogger(__name__)

MAX_TRACEBACK = 20_000


@dataclass(frozen=True)
class FailedJob:
    """A job in `error`, as `get_errors` reports it."""

    queue: str
    id: str
    tries: int
    error_ms: int | None
    error_type: str | None
    error_message: str | None
    error_traceback: str | None
    payload: Any


def mark_done(conn: sa.Connection, batch: Sequence[ClaimedJob]) -> int:
    """`processing` → `done` for jobs still holding their token; returns how many."""
    if not batch:
        return 0
    now = now_ms()
    by_token: dict[str, list[int]] = {}
    for job in batch:
        by_token.setdefault(job.token, []).append(job.seq)
    changed = 0
    for token, seqs in by_token.items():
        params: dict[str, Any] = {"now": now, "token": token}
        changed += sql.execute(
            conn,
            f"UPDATE {TABLE} SET status = '{DONE}', done_ms = :now, updated_ms = :now, "
            f"lock_token = NULL WHERE seq IN {sql.in_list('s', seqs, params)} "
            "AND lock_token = :token",
            params,
        ).rowcount
    check_done(batch, changed)
    return changed


def check_done(batch: Sequence[ClaimedJob], changed: int) -> None:
    """Log the jobs of `batch` that recording them `done` did not change (`changed` did)."""
    if changed != len(batch):
        logger.warning(
            "outbox: %d of %d finished jobs of %s had been taken over (hung timeout too short "
            "for them?); their other run decides their status",
            len(batch) - changed,
            len(batch),
            batch[0].queue,
        )


def stamp(conn: sa.Connection, batch: Sequence[ClaimedJob]) -> set[int]:
    """Claimed jobs (one claim's) count as `processing` from now for the hung detector; returns
    the seqs still holding their token (the others were handed to another worker)."""
    if not batch:
        return set()
    params: dict[str, Any] = {"now": now_ms(), "token": batch[0].token}
    rows = sql.execute(
        conn,
        f"UPDATE {TABLE} SET processing_ms = :now, updated_ms = :now WHERE seq IN "
        f"{sql.in_list('s', [job.seq for job in batch], params)} AND lock_token = :token "
        "RETURNING seq",
        params,
    )
    return {row[0] for row in rows.fetchall()}


def mark_error(conn: sa.Connection, job: ClaimedJob, exc: BaseException) -> bool:
    """`processing` → `error` with the exception's type, message and traceback."""
    now = now_ms()
    text = "".join(traceback.format_exception(exc))[-MAX_TRACEBACK:]
    return bool(
        conn.execute(
            sa.update(jobs)
            .where(jobs.c.seq == job.seq, jobs.c.lock_token == job.token)
            .values(
                status=ERROR,
                error_ms=now,
                updated_ms=now,
                lock_token=None,
                error_type=type(exc).__qualname__,
                error_message=str(exc)[:MAX_TRACEBACK],
                error_traceback=text,
            )
        ).rowcount
    )


def release(conn: sa.Connection, batch: Sequence[ClaimedJob]) -> int:
    """Give claimed jobs that never ran back to `init` (stop, or an ordered batch cut short);
    the claim does not count as a try."""
    changed = 0
    for job in batch:
        changed += conn.execute(
            sa.update(jobs)
            .where(jobs.c.seq == job.seq, jobs.c.lock_token == job.token)
            .values(status=INIT, lock_token=None, tries=jobs.c.tries - 1, updated_ms=now_ms())
        ).rowcount
    return changed


def due_errors(
    conn: sa.Connection,
    queue: str,
    backoff_s: float,
    max_retries: int,
    limit: int = 100,
    *,
    ordered: bool = False,
) -> list[int]:
    """Seqs of `error` jobs whose backoff has passed and which have tries left, oldest first.
    On an `ordered` queue only its head can be due: nothing put later may run before it, even
    when its backoff is younger (it failed again) or it is out of tries."""
    query = (
        sa.select(jobs.c.seq)
        .where(
            jobs.c.queue == queue,
            jobs.c.status == ERROR,
            jobs.c.error_ms <= now_ms() - int(backoff_s * 1000),
        )
        .order_by(jobs.c.error_ms, jobs.c.seq)
        .limit(limit)
    )
    if ordered:
        query = query.where(jobs.c.seq == _head_seq(queue))
    if max_retries:
        query = query.where(jobs.c.tries < max_retries)
    return list(conn.execute(query).scalars())


def _head_seq(queue: str) -> sa.ScalarSelect[Any]:
    """The seq of the oldest unfinished job of `queue`: an ordered queue's head."""
    return (
        sa.select(sa.func.min(jobs.c.seq))
        .where(jobs.c.queue == queue, jobs.c.status.in_((INIT, PROCESSING, ERROR)))
        .scalar_subquery()
    )


def reset_hung(conn: sa.Connection, queue: str, hung_s: float, max_retries: int) -> tuple[int, int]:
    """Jobs `processing` for longer than `hung_s` since their last stamp (their worker died or
    froze, or the job overran; a live worker stamps each job as it starts): back to `init`
    while they have tries left, else to `error`. Returns (retried, errored)."""
    now = now_ms()
    hung = sa.and_(
        jobs.c.queue == queue,
        jobs.c.status == PROCESSING,
        jobs.c.processing_ms < now - int(hung_s * 1000),
    )
    if max_retries:
        exhausted = conn.execute(
            sa.update(jobs)
            .where(hung, jobs.c.tries >= max_retries)
            .values(
                status=ERROR,
                lock_token=None,
                error_ms=now,
                updated_ms=now,
                error_type="HungJobError",
                error_message=f"processing for more than {hung_s:g} s and no tries left",
                error_traceback=None,
            )
        ).rowcount
    else:
        exhausted = 0
    retried = conn.execute(
        sa.update(jobs).where(hung).values(status=INIT, lock_token=None, updated_ms=now)
    ).rowcount
    return retried, exhausted


def force_retry(conn: sa.Connection, queue: str, job_id: str | None = None) -> int:
    """Every `error` job of `queue` (or the one `job_id`) back to `init` now, whatever its
    backoff and tries; returns how many."""
    where = [jobs.c.queue == queue, jobs.c.status == ERROR]
    if job_id is not None:
        where.append(jobs.c.id == job_id)
    return conn.execute(
        sa.update(jobs).where(*where).values(status=INIT, updated_ms=now_ms())
    ).rowcount


def errors(conn: sa.Connection, queue: str, limit: int = 100) -> list[sa.Row[Any]]:
    return list(
        conn.execute(
            sa.select(jobs)
            .where(jobs.c.queue == queue, jobs.c.status == ERROR)
            .order_by(jobs.c.error_ms, jobs.c.seq)
            .limit(limit)
        )
    )


def oldest_error(conn: sa.Connection, queue: str) -> int | None:
    return conn.execute(
        sa.select(jobs.c.seq)
        .where(jobs.c.queue == queue, jobs.c.status == ERROR)
        .order_by(jobs.c.error_ms, jobs.c.seq)
        .limit(1)
    ).scalar()


def head(conn: sa.Connection, queue: str) -> sa.Row[int, str, str] | None:
    """(seq, id, status) of the oldest unfinished job of `queue` (an ordered queue's head)."""
    return conn.execute(
        sa.select(jobs.c.seq, jobs.c.id, jobs.c.status).where(jobs.c.seq == _head_seq(queue))
    ).first()
