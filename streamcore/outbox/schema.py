"""The jobs table, its indexes, and the engines the outbox opens (SQLite WAL or PostgreSQL).

One table holds every queue. `seq` orders jobs (FIFO per queue, and the relay's per-key order);
`(queue, id)` is the user's identity of a job. `lock_token` is the compare-and-swap guard: a
worker may only finish a job whose token is still the one it claimed with, so a job the hung
detector handed to another worker cannot be finished twice. Times are epoch milliseconds (UTC).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine

from streamcore.config import StreamcoreConfig, load_config
from streamcore.outbox.errors import OutboxBusyError, OutboxError

logger = logging.getLogger(__name__)

TABLE = "streamcore_outbox_jobs"
INIT, PROCESSING, DONE, ERROR = "init", "processing", "done", "error"
STATUSES = (INIT, PROCESSING, DONE, ERROR)
NOTIFY_CHANNEL = "streamcore_outbox"

metadata = sa.MetaData()
jobs = sa.Table(
    TABLE,
    metadata,
    sa.Column(
        "seq",
        sa.BigInteger().with_variant(sa.Integer, "sqlite"),
        primary_key=True,
        autoincrement=True,
    ),
    sa.Column("queue", sa.String(200), nullable=False),
    sa.Column("id", sa.String(200), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("payload", sa.LargeBinary, nullable=False),
    sa.Column("tries", sa.Integer, nullable=False, server_default="0"),
    sa.Column("lock_token", sa.String(40)),
    sa.Column("depends_queue", sa.String(200)),
    sa.Column("depends_id", sa.String(200)),
    sa.Column("created_ms", sa.BigInteger, nullable=False),
    sa.Column("updated_ms", sa.BigInteger, nullable=False),
    sa.Column("processing_ms", sa.BigInteger),
    sa.Column("done_ms", sa.BigInteger),
    sa.Column("error_ms", sa.BigInteger),
    sa.Column("error_type", sa.String(200)),
    sa.Column("error_message", sa.Text),
    sa.Column("error_traceback", sa.Text),
    sa.UniqueConstraint("queue", "id", name=f"{TABLE}_queue_id"),
)
# Claims, the retry poller and the hung detector scan (queue, status) in seq order; purge scans
# done jobs by time.
sa.Index(f"{TABLE}_claim", jobs.c.queue, jobs.c.status, jobs.c.seq)
sa.Index(f"{TABLE}_done", jobs.c.status, jobs.c.done_ms)
sa.Index(f"{TABLE}_depends", jobs.c.depends_queue, jobs.c.depends_id)


def default_url(config: StreamcoreConfig | None = None) -> str:
    """`$STREAMCORE_OUTBOX_URL`, else SQLite at `STREAMCORE_HOME/outbox.db`."""
    explicit = os.environ.get("STREAMCORE_OUTBOX_URL")
    if explicit:
        return explicit
    home = (config or load_config()).home
    return f"sqlite:///{Path(home) / 'outbox.db'}"


def is_sqlite(engine: Engine | sa.Connection) -> bool:
    return engine.dialect.name == "sqlite"


_write_locks: dict[str, threading.Lock] = {}
_write_locks_guard = threading.Lock()
LOCK_TIMEOUT = 30.0


class SerializedSqliteConnection(sqlite3.Connection):
    """A sqlite3 connection whose transactions take an in-process lock per database file.

    SQLite allows one writer; a second one waits in SQLite's busy handler, which sleeps in
    steps of 1 to 100 ms. With a worker pool and a producer in one process that sleep, not the
    work, would set the pace, so the threads of a process queue on a lock instead (BEGIN
    IMMEDIATE right after it; commit and rollback release it). Other processes still meet the
    busy handler (30 s timeout).
    """

    write_lock: threading.Lock
    _holding = False
    # Called once the current transaction has committed and the lock is free (`notify` wakes
    # the workers of this process with it); dropped by a rollback or a failed commit.
    after_commit: Callable[[], None] | None = None

    def begin_immediate(self) -> None:
        if not self.write_lock.acquire(timeout=LOCK_TIMEOUT):
            raise OutboxBusyError(
                f"no outbox transaction could start within {LOCK_TIMEOUT:g} s: another thread "
                "of this process holds one open (a transaction left open in the same thread?)"
            )
        self._holding = True
        try:
            self.execute("BEGIN IMMEDIATE")
        except BaseException:
            self._release()
            raise

    def _release(self) -> None:
        if self._holding:
            self._holding = False
            self.write_lock.release()

    def commit(self) -> None:
        callback, self.after_commit = self.after_commit, None
        try:
            super().commit()
        finally:
            self._release()
        if callback is not None:
            try:
                callback()
            except Exception:  # the transaction is committed: a failed wake-up must not say no
                logger.exception("outbox: waking the workers after a commit failed")

    def rollback(self) -> None:
        self.after_commit = None
        try:
            super().rollback()
        finally:
            self._release()

    def close(self) -> None:
        self.after_commit = None
        try:
            super().close()
        finally:
            self._release()


def _sqlite_connect(path: str) -> Any:
    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Autocommit at the driver level so that our "begin" listener opens every transaction
        # itself, with BEGIN IMMEDIATE: the write lock is taken up front, so two claimers never
        # deadlock on a read-to-write upgrade.
        dbapi_connection.isolation_level = None
        with _write_locks_guard:
            dbapi_connection.write_lock = _write_locks.setdefault(path, threading.Lock())
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()

    return on_connect


def _sqlite_begin(conn: sa.Connection) -> None:
    dbapi_connection = conn.connection.dbapi_connection
    if isinstance(dbapi_connection, SerializedSqliteConnection):
        dbapi_connection.begin_immediate()
    else:
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def create_engine(url: str | None = None, **kwargs: Any) -> Engine:
    """An engine for the outbox: SQLite (WAL, BEGIN IMMEDIATE, 30 s busy timeout) or PostgreSQL
    (psycopg 3). Applications may pass this engine's connections to `put`."""
    url = url or default_url()
    if url.startswith("sqlite"):
        path = sa.engine.make_url(url).database or ":memory:"
        if path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            path = os.path.realpath(path)
        connect_args = {"check_same_thread": False, "factory": SerializedSqliteConnection}
        engine = sa.create_engine(url, connect_args=connect_args, **kwargs)
        event.listen(engine, "connect", _sqlite_connect(path))
        event.listen(engine, "begin", _sqlite_begin)
        return engine
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        url = "postgresql+psycopg://" + url.split("://", 1)[1]
    if not url.startswith("postgresql"):
        raise OutboxError(
            f"the outbox runs on SQLite or PostgreSQL, not {url.split(':', 1)[0]!r}: give a "
            "sqlite:///path or postgresql://user@host/db URL (STREAMCORE_OUTBOX_URL)"
        )
    kwargs.setdefault("pool_size", 16)
    kwargs.setdefault("max_overflow", 16)
    kwargs.setdefault("pool_pre_ping", True)
    return sa.create_engine(url, **kwargs)


def create_schema(engine: Engine) -> None:
    """Create the jobs table and its indexes if missing (idempotent; safe from many processes:
    PostgreSQL serialises concurrent creators with an advisory lock)."""
    with engine.begin() as conn:
        create_tables(conn, metadata, TABLE)
        _migrate(conn)


def create_tables(conn: sa.Connection, tables: sa.MetaData, lock: str) -> None:
    """Create the missing tables of `tables` in the transaction of `conn`. Many processes may
    do it at once: on PostgreSQL they take turns on an advisory lock named `lock` (CREATE TABLE
    IF NOT EXISTS alone races there); SQLite's write lock already serialises them. Used for every
    table streamcore keeps in the outbox database."""
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(hashtext(:t))"), {"t": lock})
    tables.create_all(conn, checkfirst=True)


def _migrate(conn: sa.Connection) -> None:
    """Add columns a table made by an older version lacks (they are all nullable)."""
    present = {c["name"] for c in sa.inspect(conn).get_columns(TABLE)}
    for column in jobs.columns:
        if column.name in present:
            continue
        kind = column.type.compile(dialect=conn.dialect)
        conn.execute(sa.text(f'ALTER TABLE {TABLE} ADD COLUMN "{column.name}" {kind}'))
        logger.info("outbox: added column %s to %s", column.name, TABLE)
