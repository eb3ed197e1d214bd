"""Claiming jobs: `init` → `processing` for exactly one worker.

PostgreSQL: `FOR UPDATE SKIP LOCKED` lets concurrent workers take disjoint batches without
waiting on each other. SQLite: every outbox transaction is BEGIN IMMEDIATE (one writer at a
time), and the UPDATE only flips rows still `init`, stamping a fresh lock token: a
compare-and-swap whose token later guards `done`/`error` (see `store`).

A job is claimable when its dependency (if any) is `done` (or purged). An ordered queue hands
out only its head: the leading run of claimable jobs in put order, and nothing while an earlier
job is processing or in error.

A batch queue with a threshold is claimed only when its batch is due (`batch_due_in`): a full
batch at once, a partial one once its oldest job has waited the threshold. Jobs are not held in
`processing` while a batch fills, so waiting changes nothing of what a crash leaves behind. The
claim looks at the batch in its own transaction (`claim_due_batch`); a worker waiting for a
batch to fill looks outside any write transaction (`peek_batch`).

A worker records the jobs of its last batch `done` in the transaction of its next claim. On
PostgreSQL a plain claim (`claim_after_done`) does both in one statement run as a transaction
of its own: one round trip where BEGIN, the `done` UPDATE, the claim and COMMIT took four.
"""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import sqlalchemy as sa

from streamcore.outbox import sql
from streamcore.outbox.schema import DONE, ERROR, INIT, PROCESSING, TABLE

__all__ = [
    "BatchDue",
    "ClaimedJob",
    "batch_due_in",
    "claim_after_done",
    "claim_batch",
    "claim_due_batch",
    "claim_error",
    "may_claim",
    "now_ms",
    "peek_batch",
]


_READY = (
    f"(j.depends_id IS NULL OR NOT EXISTS (SELECT 1 FROM {TABLE} d WHERE d.queue = "
    f"j.depends_queue AND d.id = j.depends_id AND d.status <> '{DONE}'))"
)
_RETURNING = "RETURNING seq, id, payload, tries, context"
_SET_PROCESSING = (
    f"SET status = '{PROCESSING}', lock_token = :token, tries = tries + 1, "
    "processing_ms = :now, updated_ms = :now"
)
_CLAIMABLE = (
    f"SELECT j.seq FROM {TABLE} j WHERE j.queue = :queue AND j.status = '{INIT}' AND {_READY} "
    "ORDER BY j.seq LIMIT :limit"
)
_CLAIM_PG = (
    f"UPDATE {TABLE} {_SET_PROCESSING} WHERE seq IN ({_CLAIMABLE} FOR UPDATE OF j SKIP LOCKED) "
    f"{_RETURNING}"
)
# No outer `status = 'init'` re-check on SQLite: the transaction holds the write lock since BEGIN
# IMMEDIATE, so the rows the subquery found cannot change before the UPDATE (and the re-check
# made SQLite walk the status index instead of the rowids).
_CLAIM_SQLITE = f"UPDATE {TABLE} {_SET_PROCESSING} WHERE seq IN ({_CLAIMABLE}) {_RETURNING}"
_HEAD = (
    f"SELECT j.seq, j.status, {_READY} AS ready, j.created_ms FROM {TABLE} j "
    f"WHERE j.queue = :queue AND j.status IN ('{INIT}', '{PROCESSING}', '{ERROR}') "
    "ORDER BY j.seq LIMIT :limit"
)
_CLAIMABLE_CREATED = (
    f"SELECT j.created_ms FROM {TABLE} j WHERE j.queue = :queue AND j.status = '{INIT}' "
    f"AND {_READY} ORDER BY j.seq LIMIT :limit"
)
_ANY_CLAIMABLE = (
    f"SELECT 1 FROM {TABLE} j WHERE j.queue = :queue AND j.status = '{INIT}' AND {_READY} LIMIT 1"
)
_CLAIM_ERROR = (
    f"UPDATE {TABLE} {_SET_PROCESSING} WHERE seq = :seq AND status = '{ERROR}' {_RETURNING}"
)
# The `done` of the last batch and the next claim in one statement. Both UPDATEs see the
# statement's snapshot, in which the jobs being recorded are still `processing`: the claim reads
# those the first one recorded (its RETURNING) as `done`, so a job waiting for one of them is
# claimable in the same statement, as it was in a transaction that recorded first and claimed
# after. The LEFT JOIN returns one row when nothing is claimed, for the count recorded.
_CLAIM_AFTER_DONE_PG = f"""
WITH done AS (
    UPDATE {TABLE} t SET status = '{DONE}', done_ms = :now, updated_ms = :now, lock_token = NULL
    FROM unnest(CAST(:done_seqs AS bigint[]), CAST(:done_tokens AS text[])) AS f(seq, token)
    WHERE t.seq = f.seq AND t.lock_token = f.token
    RETURNING t.seq
), claimed AS (
    UPDATE {TABLE} {_SET_PROCESSING} WHERE seq IN (
        SELECT j.seq FROM {TABLE} j WHERE j.queue = :queue AND j.status = '{INIT}'
        AND (j.depends_id IS NULL OR NOT EXISTS (
            SELECT 1 FROM {TABLE} d WHERE d.queue = j.depends_queue AND d.id = j.depends_id
            AND d.status <> '{DONE}' AND d.seq NOT IN (SELECT seq FROM done)))
        ORDER BY j.seq LIMIT :limit FOR UPDATE OF j SKIP LOCKED
    ) {_RETURNING}
)
SELECT (SELECT count(*) FROM done), c.seq, c.id, c.payload, c.tries, c.context
FROM (SELECT 1) AS one LEFT JOIN claimed c ON true
"""
_QUEUE_LOCK = "SELECT pg_try_advisory_xact_lock(hashtext('streamcore_outbox:' || :queue))"


@dataclass(frozen=True, slots=True)
class ClaimedJob:
    """A claimed job: run it, then finish it with its `token`."""

    seq: int
    queue: str
    id: str
    payload: bytes
    tries: int
    token: str
    context: str | None = None  # the logging context it was put with (JSON)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class BatchDue(NamedTuple):
    """What a look at a batch queue found: `seconds` until its next batch is due (0: now;
    None: no job is claimable) and `ready`, the claimable jobs (counted up to the capacity)."""

    seconds: float | None
    ready: int


def _due(created: list[int], capacity: int, threshold: float) -> BatchDue:
    """When the batch of claimable jobs put at `created` (ms) is due."""
    if not created:
        return BatchDue(None, 0)
    if len(created) >= capacity:
        return BatchDue(0.0, len(created))
    return BatchDue(max(0.0, threshold - (now_ms() - min(created)) / 1000), len(created))


def _jobs(rows: list[Any], queue: str, token: str) -> list[ClaimedJob]:
    return sorted(
        (ClaimedJob(r[0], queue, r[1], bytes(r[2]), r[3], token, r[4]) for r in rows),
        key=lambda j: j.seq,
    )


def claim_batch(
    conn: sa.Connection, queue: str, limit: int, *, ordered: bool = False
) -> list[ClaimedJob]:
    """Claim up to `limit` claimable jobs of `queue` (in a transaction the caller commits)."""
    if ordered:
        return _claim_head(conn, queue, limit)[1]
    token = uuid.uuid4().hex
    params = {"queue": queue, "limit": limit, "token": token, "now": now_ms()}
    statement = _CLAIM_PG if conn.dialect.name == "postgresql" else _CLAIM_SQLITE
    return _jobs(sql.execute(conn, statement, params).fetchall(), queue, token)


def claim_after_done(
    conn: sa.Connection, queue: str, limit: int, done: Sequence[ClaimedJob]
) -> tuple[int, list[ClaimedJob]]:
    """Record `done` (the jobs still holding their claim's token) and claim up to `limit`
    claimable jobs of `queue` (not ordered), in one statement run as a transaction of its own on
    `conn` (PostgreSQL, outside any transaction): (how many were recorded, the jobs claimed)."""
    token = uuid.uuid4().hex
    params = {
        "queue": queue,
        "limit": limit,
        "token": token,
        "now": now_ms(),
        "done_seqs": [job.seq for job in done],
        "done_tokens": [job.token for job in done],
    }
    rows = sql.alone(conn, _CLAIM_AFTER_DONE_PG, params)
    claimed = [row[1:] for row in rows if row[1] is not None]
    return rows[0][0], _jobs(claimed, queue, token)


def may_claim(conn: sa.Connection, queue: str) -> bool:
    """False when a read on SQLite, outside any write transaction, finds no claimable job of
    `queue` (not ordered): a claim would take the write lock for nothing. True otherwise
    (PostgreSQL, whose claim finds that out in one round trip, or an observed engine)."""
    rows = sql.read_unlocked(conn, _ANY_CLAIMABLE, {"queue": queue})
    return rows is None or bool(rows)


def _leading(rows: list[Any]) -> list[Any]:
    """The claimable head of an ordered queue in `_HEAD`'s rows: the leading run of ready
    `init` jobs (nothing after a job that is processing, in error or waiting)."""
    head = []
    for row in rows:
        if row[1] != INIT or not row[2]:
            break
        head.append(row)
    return head


def _head(conn: sa.Connection, params: dict[str, object]) -> list[Any]:
    """(seq, status, ready, created_ms) of an ordered queue's claimable head, in put order."""
    return _leading(sql.execute(conn, _HEAD, params).fetchall())


def _claim_head(
    conn: sa.Connection, queue: str, limit: int, threshold: float | None = None
) -> tuple[BatchDue, list[ClaimedJob]]:
    """Claim the head, up to `limit` jobs: (what was claimable, the jobs claimed). With a
    `threshold` only a due batch is claimed."""
    token = uuid.uuid4().hex
    params: dict[str, object] = {"queue": queue, "limit": limit, "token": token, "now": now_ms()}
    # One claimer per ordered queue at a time: SKIP LOCKED would let a second worker jump over
    # a head row locked by the first one.
    postgres = conn.dialect.name == "postgresql"
    if postgres and not sql.execute(conn, _QUEUE_LOCK, params).scalar():
        return BatchDue(None, 0), []  # another worker is claiming it
    head = _head(conn, params)
    seqs = [row[0] for row in head]
    if threshold is None:
        due = BatchDue(0.0 if seqs else None, len(seqs))
    else:
        due = _due([row[3] for row in head], limit, threshold)
    if due.seconds != 0:
        return due, []
    # On PostgreSQL the status re-check guards against a hung reset or force_retry in between.
    where = f"seq IN {sql.in_list('s', seqs, params)}" + (
        f" AND status = '{INIT}'" if postgres else ""
    )
    rows = sql.execute(conn, f"UPDATE {TABLE} {_SET_PROCESSING} WHERE {where} {_RETURNING}", params)
    return due, _jobs(rows.fetchall(), queue, token)


Rows = Callable[[str, dict[str, object]], list[Any]]


def _due_in(rows: Rows, queue: str, capacity: int, threshold: float, ordered: bool) -> BatchDue:
    params: dict[str, object] = {"queue": queue, "limit": capacity}
    if ordered:
        created = [row[3] for row in _leading(rows(_HEAD, params))]
    else:
        created = [row[0] for row in rows(_CLAIMABLE_CREATED, params)]
    return _due(created, capacity, threshold)


def batch_due_in(
    conn: sa.Connection, queue: str, capacity: int, threshold: float, *, ordered: bool = False
) -> float | None:
    """Seconds until a batch of `queue` is due: 0 when `capacity` jobs are claimable or the
    oldest claimable one was put `threshold` seconds ago; None when no job is claimable."""
    return _due_in(
        lambda statement, params: sql.execute(conn, statement, params).fetchall(),
        queue,
        capacity,
        threshold,
        ordered,
    ).seconds


def peek_batch(
    engine: sa.Engine, queue: str, capacity: int, threshold: float, *, ordered: bool = False
) -> BatchDue:
    """`batch_due_in` (and the claimable jobs) read outside any write transaction
    (`sql.read`), for a worker woken while a partial batch fills: on SQLite, finding that it is
    not due yet then takes neither the write lock the putting threads need nor a BEGIN
    IMMEDIATE. The claim reads the head again in its own transaction."""
    return _due_in(functools.partial(sql.read, engine), queue, capacity, threshold, ordered)


def claim_due_batch(
    conn: sa.Connection, queue: str, capacity: int, threshold: float, *, ordered: bool = False
) -> tuple[BatchDue, list[ClaimedJob]]:
    """Claim up to `capacity` jobs of `queue` if its batch is due (`batch_due_in`), in a
    transaction the caller commits: (what the look found, the jobs claimed: none unless the
    batch was due). An ordered queue's head is read once for both."""
    if not ordered:
        due = _due_in(
            lambda statement, params: sql.execute(conn, statement, params).fetchall(),
            queue,
            capacity,
            threshold,
            ordered,
        )
        return due, claim_batch(conn, queue, capacity) if due.seconds == 0 else []
    return _claim_head(conn, queue, capacity, threshold)


def claim_error(conn: sa.Connection, queue: str, seq: int) -> ClaimedJob | None:
    """Claim one job in `error` for a retry (None if someone else retried it meanwhile)."""
    token = uuid.uuid4().hex
    rows = sql.execute(conn, _CLAIM_ERROR, {"seq": seq, "token": token, "now": now_ms()})
    jobs = _jobs(rows.fetchall(), queue, token)
    return jobs[0] if jobs else None
