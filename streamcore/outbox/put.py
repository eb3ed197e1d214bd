"""`put`: write a job in the caller's transaction (the transactional outbox pattern).

The job exists exactly when the caller's transaction commits: a rollback leaves nothing, a commit
makes it visible to workers (and wakes them). Give `put` the SQLAlchemy Connection or ORM Session
that does your business write.
"""

from __future__ import annotations

import functools
import logging
import os
import time
import weakref
from collections.abc import Sequence
from typing import Any, cast

import sqlalchemy as sa

from streamcore.errors import CodecError
from streamcore.outbox import sql
from streamcore.outbox.consumers import QueueSpec, Registry, default_registry
from streamcore.outbox.errors import (
    DependencyCycleError,
    DependencyNotFoundError,
    DuplicateJobError,
    InvalidPayloadError,
    OutboxError,
    SchemaMissingError,
)
from streamcore.outbox.log_context import encode_context
from streamcore.outbox.notify import PENDING_KEY, local_hub
from streamcore.outbox.schema import INIT, NOTIFY_CHANNEL, TABLE, jobs, missing_columns

__all__ = ["JobRef", "new_ids", "put", "put_many"]


logger = logging.getLogger(__name__)

JobRef = tuple[str, str]
_checked: weakref.WeakSet[sa.Engine] = weakref.WeakSet()


def _connection(conn_or_session: Any) -> sa.Connection:
    if isinstance(conn_or_session, sa.Connection):
        return conn_or_session
    if isinstance(conn_or_session, sa.Engine):
        raise OutboxError(
            "put needs the Connection or Session of your transaction, not an Engine: "
            "`with engine.begin() as conn: put(conn, queue, payload)`"
        )
    connection = getattr(conn_or_session, "connection", None)
    if callable(connection):
        # A Session's (or a scoped session's) connection(): the Connection of its transaction.
        return cast(sa.Connection, connection())
    raise OutboxError(
        f"put needs a SQLAlchemy Connection or Session, got {type(conn_or_session).__name__}"
    )


def _check_schema(conn: sa.Connection) -> None:
    engine = conn.engine
    if engine in _checked:
        return
    if not sa.inspect(conn).has_table(TABLE):
        raise SchemaMissingError(
            f"the outbox table {TABLE} does not exist in {engine.url.render_as_string()}; "
            "create it once with streamcore.outbox.create_schema(engine) (Outbox.start() does)"
        )
    missing = sorted(c.name for c in missing_columns(conn))
    if missing:
        raise SchemaMissingError(
            f"the outbox table {TABLE} in {engine.url.render_as_string()} lacks the column(s) "
            f"{missing} (made by an older version); run streamcore.outbox.create_schema(engine) "
            "once to add them (Outbox.start() does)"
        )
    _checked.add(engine)


def _encode(spec: QueueSpec, payload: Any) -> bytes:
    if spec.valid_payload is not None and not spec.valid_payload(payload):
        raise InvalidPayloadError(
            f"queue {spec.name}: valid_payload rejected {payload!r:.200}; fix the payload"
        )
    try:
        return spec.codec.encode(payload)
    except CodecError as exc:
        raise InvalidPayloadError(
            f"queue {spec.name}: the payload cannot be encoded ({exc}); fix the payload or the "
            "queue's codec"
        ) from exc


def _dependency(spec: QueueSpec, payload: Any, depends_on: JobRef | None) -> JobRef | None:
    ref = depends_on if depends_on is not None else (spec.depends_on and spec.depends_on(payload))
    if not ref:
        return None
    if not (
        isinstance(ref, tuple | list) and len(ref) == 2 and all(isinstance(x, str) for x in ref)
    ):
        raise OutboxError(f"queue {spec.name}: depends_on must be (queue, id) strings, got {ref!r}")
    return (ref[0], ref[1])


def _check_cycles(queue: str, ids: Sequence[str], refs: Sequence[JobRef | None]) -> None:
    """Refuse jobs of this put that wait for themselves through each other: none could ever
    run. Each job waits for at most one other, so following the waits from every job finds a
    cycle in linear time. A job put earlier waited for a job that existed then, so it closes no
    cycle with these, unless one of them reuses the id of a purged job it waited for."""
    waits_for: dict[str, str] = {}
    for waiting, ref in zip(ids, refs, strict=True):
        if ref is not None and ref[0] == queue:
            waits_for.setdefault(waiting, ref[1])
    cleared: set[str] = set()
    for start in waits_for:
        path: dict[str, int] = {}
        job_id: str | None = start
        while job_id in waits_for and job_id not in cleared:
            if job_id in path:
                cycle = [*list(path)[path[job_id] :], job_id]
                raise DependencyCycleError(
                    f"queue {queue}: depends_on makes jobs wait for each other forever: "
                    f"{' -> '.join(repr(j) for j in cycle)}; drop or change one of these "
                    "dependencies (nothing was put)"
                )
            path[job_id] = len(path)
            job_id = waits_for[job_id]
        cleared.update(path)


def _check_dependencies(conn: sa.Connection, refs: set[JobRef], queue: str) -> None:
    for dep_queue, dep_id in refs:
        found = conn.execute(
            sa.select(jobs.c.seq).where(jobs.c.queue == dep_queue, jobs.c.id == dep_id)
        ).first()
        if found is None:
            raise DependencyNotFoundError(
                f"queue {queue}: depends_on=({dep_queue!r}, {dep_id!r}) names no job; put that "
                "job first (in this or an earlier transaction) or drop the dependency"
            )


_COLUMNS = (
    "queue",
    "id",
    "status",
    "payload",
    "tries",
    "depends_queue",
    "depends_id",
    "created_ms",
    "updated_ms",
    "context",
)


# put is the hot path, so both statements go to the driver as they are. SQLite: one multi-row
# INSERT per up to `_SQLITE_ROWS` jobs, whose values common to the batch are bound once; about
# 30 % cheaper than an executemany of a one-row INSERT (each row stepped and bound from a dict of
# its own), which was several times cheaper than SQLAlchemy's multi-values INSERT with
# RETURNING; run on the driver connection itself where nothing can tell (`sql.execute`). Texts
# are made once per row count (at most `_SQLITE_ROWS` of them, kept by the driver's statement
# cache). PostgreSQL: the whole batch and its notification in one statement from arrays, one
# round trip (with the caller's COMMIT, two a put; an executemany and a separate pg_notify made
# three, and the enqueuing thread waits for the GIL again after each reply when worker threads
# share the process). Rows go in array (and VALUES) order, so seq follows the batch.
_SQLITE_ROWS = 64


@functools.lru_cache(maxsize=_SQLITE_ROWS)
def _sqlite_insert(rows: int) -> str:
    values = ", ".join(
        f"(:queue, :i{n}, '{INIT}', :p{n}, 0, :q{n}, :d{n}, :now, :now, :context)"
        for n in range(rows)
    )
    return (
        f"INSERT INTO {TABLE} ({', '.join(_COLUMNS)}) VALUES {values} "
        "ON CONFLICT (queue, id) DO NOTHING"
    )


_ROW_KEYS = [(f"i{n}", f"p{n}", f"q{n}", f"d{n}") for n in range(_SQLITE_ROWS)]


def _insert_sqlite(
    conn: sa.Connection,
    queue: str,
    now: int,
    context: str | None,
    ids: Sequence[str],
    payloads: Sequence[bytes],
    refs: Sequence[JobRef | None],
) -> int:
    """INSERT the jobs (`_SQLITE_ROWS` at a time); returns how many were new."""
    inserted = 0
    for start in range(0, len(ids), _SQLITE_ROWS):
        count = min(_SQLITE_ROWS, len(ids) - start)
        params: dict[str, Any] = {"queue": queue, "now": now, "context": context}
        for n in range(count):
            i, p, q, d = _ROW_KEYS[n]
            ref = refs[start + n]
            params[i] = ids[start + n]
            params[p] = payloads[start + n]
            params[q], params[d] = ref if ref is not None else (None, None)
        inserted += sql.execute(conn, _sqlite_insert(count), params).rowcount
    return inserted


_PG_INSERT = f"""
WITH ins AS (
    INSERT INTO {TABLE} ({", ".join(_COLUMNS)})
    SELECT %(queue)s, u.id, %(status)s, u.payload, 0, u.dq, u.di, %(now)s, %(now)s, %(context)s
    FROM unnest(%(ids)s::text[], %(payloads)s::bytea[], %(dqs)s::text[], %(dis)s::text[])
        WITH ORDINALITY AS u(id, payload, dq, di, n)
    ORDER BY u.n
    ON CONFLICT (queue, id) DO NOTHING
    RETURNING 1
)
SELECT (SELECT count(*) FROM ins), pg_notify(%(channel)s, %(queue)s)
"""


def new_ids(count: int, now_ms: int) -> list[str]:
    """`count` job ids as UUIDv7 (RFC 9562) in hex: 48 bits of Unix time in milliseconds, then
    74 random bits. Ids put together sort together, so the rows of a put land on one or two
    pages of the (queue, id) index instead of one page each, which random UUIDs (version 4)
    cost on every put and commit, on SQLite and PostgreSQL alike. Still unique: an id of the same
    millisecond repeats with odds of about 2^-74 per pair."""
    random = int.from_bytes(os.urandom(10 * count), "big")
    ids = []
    for _ in range(count):
        bits, random = random & _RANDOM_80, random >> 80
        rand_a, rand_b = bits >> 68, bits & _RANDOM_62  # 12 and 62 random bits
        value = now_ms << 80 | 0x7 << 76 | rand_a << 64 | 0b10 << 62 | rand_b
        ids.append(f"{value:032x}")
    return ids


_RANDOM_80 = (1 << 80) - 1
_RANDOM_62 = (1 << 62) - 1


def _notify_local(conn: sa.Connection, queue: str, count: int) -> None:
    """Wake this process's SQLite workers when the caller's transaction commits, telling them
    how many jobs of `queue` it put."""
    local_hub.watch_commits(conn.engine)
    pending = conn.info.setdefault(PENDING_KEY, {})
    pending[queue] = pending.get(queue, 0) + count


def put_many(
    conn_or_session: Any,
    queue: str,
    payloads: Sequence[Any],
    *,
    ids: Sequence[str] | None = None,
    depends_on: JobRef | None = None,
    registry: Registry | None = None,
) -> list[str]:
    """`put` for many payloads in one statement; returns their ids (all or nothing)."""
    conn = _connection(conn_or_session)
    spec = (registry or default_registry).get(queue)
    _check_schema(conn)
    if ids is not None and len(ids) != len(payloads):
        raise OutboxError(f"put_many: {len(ids)} ids for {len(payloads)} payloads; give one each")
    now = time.time_ns() // 1_000_000
    context = encode_context()
    job_ids = [str(i) for i in ids] if ids is not None else new_ids(len(payloads), now)
    encoded: list[bytes] = []
    deps: list[JobRef | None] = []
    for payload in payloads:
        deps.append(_dependency(spec, payload, depends_on))
        encoded.append(_encode(spec, payload))
    if not job_ids:
        return []
    refs = {ref for ref in deps if ref is not None}
    if refs:
        _check_cycles(queue, job_ids, deps)
        _check_dependencies(conn, refs - {(queue, job_id) for job_id in job_ids}, queue)
    postgres = conn.dialect.name == "postgresql"
    if postgres:
        inserted = conn.exec_driver_sql(
            _PG_INSERT,
            {
                "queue": queue,
                "status": INIT,
                "now": now,
                "ids": job_ids,
                "payloads": encoded,
                "dqs": [ref[0] if ref else None for ref in deps],
                "dis": [ref[1] if ref else None for ref in deps],
                "context": context,
                "channel": NOTIFY_CHANNEL,
            },
        ).scalar_one()
    else:
        inserted = _insert_sqlite(conn, queue, now, context, job_ids, encoded, deps)
    if inserted != len(job_ids):
        what = (
            f"job id {job_ids[0]!r} exists"
            if len(job_ids) == 1
            else (f"{len(job_ids) - inserted} of {len(job_ids)} job ids exist")
        )
        raise DuplicateJobError(
            f"queue {queue}: {what} already; ids are unique per queue (roll back this "
            "transaction, or pick another id)"
        )
    if not postgres:
        _notify_local(conn, queue, len(job_ids))
    return job_ids


def put(
    conn_or_session: Any,
    queue: str,
    payload: Any,
    *,
    id: str | None = None,
    depends_on: JobRef | None = None,
    registry: Registry | None = None,
) -> str:
    """Put one job on `queue` in the transaction of `conn_or_session`; returns its id.

    :param id: the job id, unique per queue. Default - a UUIDv7 in hex (time-ordered, 74 random
        bits: `new_ids`).
    :param depends_on: `(queue, id)` of an existing job that must be `done` before this one
        runs. Default - the queue's `depends_on(payload)`, if it has one.
    :raises UnknownQueueError: the queue is not registered in this process.
    :raises InvalidPayloadError: `valid_payload` says no, or the codec cannot encode it.
    :raises DuplicateJobError: `(queue, id)` exists (on a duplicate, nothing else was written:
        with PostgreSQL the transaction stays usable).
    :raises DependencyNotFoundError: `depends_on` names no job.
    """
    return put_many(
        conn_or_session,
        queue,
        [payload],
        ids=None if id is None else [id],
        depends_on=depends_on,
        registry=registry,
    )[0]
