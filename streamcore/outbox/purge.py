"""Purging done jobs: the table keeps every job until an operator (or a schedule) purges."""

from __future__ import annotations

import sqlalchemy as sa

from streamcore.errors import InvalidArgumentError
from streamcore.outbox.claim import now_ms
from streamcore.outbox.schema import IS_DONE, jobs

__all__ = ["purge"]


def purge(
    conn: sa.Connection, done_older_than: float, queue: str | None = None, chunk: int = 10_000
) -> int:
    """Delete `done` jobs finished more than `done_older_than` seconds ago; returns how many.

    Jobs another job depends on are deleted too: a dependency that is gone no longer blocks (a
    dependant waits only for a job that exists and is not done)."""
    if done_older_than < 0:
        raise InvalidArgumentError(f"done_older_than is {done_older_than}; use seconds >= 0")
    cutoff = now_ms() - int(done_older_than * 1000)
    where = [IS_DONE, jobs.c.done_ms <= cutoff]
    if queue is not None:
        where.append(jobs.c.queue == queue)
    deleted = 0
    while True:
        seqs = list(conn.execute(sa.select(jobs.c.seq).where(*where).limit(chunk)).scalars())
        if not seqs:
            return deleted
        deleted += conn.execute(sa.delete(jobs).where(jobs.c.seq.in_(seqs))).rowcount
