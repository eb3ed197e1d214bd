"""The SQL database streamcore keeps its tables in: its URL, its engines (SQLite WAL or
PostgreSQL) and table creation.

One database holds the tables of three subsystems: the outbox's jobs (`streamcore.outbox.schema`),
the bulk commands (`streamcore.bulk.store`) and the redrive ledger (`streamcore.recovery.ledger`).
Each opens it with `create_engine(default_url(config))`, declares its own tables and creates them
with `create_tables`; this module knows none of them. It is named the outbox database after its
first user (`STREAMCORE_OUTBOX_URL`, `STREAMCORE_HOME/outbox.db`).

SQLite: WAL, and every transaction starts with BEGIN IMMEDIATE behind an in-process lock per
database file (`SerializedSqliteConnection`). PostgreSQL: psycopg 3, a pool of 16 + 16.
"""

from __future__ import annotations

import collections
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
from streamcore.errors import StreamcoreError

__all__ = [
    "LOCK_TIMEOUT",
    "DatabaseBusyError",
    "DatabaseError",
    "FifoLock",
    "LockNotHeldError",
    "SerializedSqliteConnection",
    "create_engine",
    "create_tables",
    "default_url",
    "is_sqlite",
]

logger = logging.getLogger(__name__)


class DatabaseError(StreamcoreError):
    """The database cannot be opened as asked (a URL of another kind of database): retrying
    does not help; fix the URL."""

    retryable = False


class DatabaseBusyError(DatabaseError):
    """No transaction could start in time: another thread of the process held one open that
    long. A retry can help once it ends; a transaction left open in the same thread never ends."""

    retryable = True


def default_url(config: StreamcoreConfig | None = None) -> str:
    """`$STREAMCORE_OUTBOX_URL`, else SQLite at `STREAMCORE_HOME/outbox.db`."""
    explicit = os.environ.get("STREAMCORE_OUTBOX_URL")
    if explicit:
        return explicit
    home = (config or load_config()).home
    return f"sqlite:///{Path(home) / 'outbox.db'}"


def is_sqlite(engine: Engine | sa.Connection) -> bool:
    return engine.dialect.name == "sqlite"


class LockNotHeldError(DatabaseError, RuntimeError):
    """`FifoLock.release` of a lock nobody holds: a bug in its caller (a RuntimeError, as
    `threading.Lock` raises for it)."""


class FifoLock:
    """A lock granted in the order it was asked for (`threading.Lock` is not: a thread that
    gives it back and asks again at once mostly gets it again, so one busy writer, an enqueuer
    putting flat out, kept five workers from their claims). A release hands the lock to the
    longest waiter, which holds it from then on."""

    __slots__ = ("_guard", "_held", "_waiters")

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._held = False
        self._waiters: collections.deque[threading.Lock] = collections.deque()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        with self._guard:
            if not self._held:
                self._held = True
                return True
            if not blocking:
                return False
            turn = threading.Lock()
            turn.acquire()
            self._waiters.append(turn)
        if turn.acquire(timeout=timeout):
            return True
        with self._guard:
            try:
                self._waiters.remove(turn)
            except ValueError:  # handed over as the wait ran out: ours after all
                return True
            return False

    def release(self) -> None:
        with self._guard:
            if not self._held:
                raise LockNotHeldError("release of an unheld FifoLock")
            if self._waiters:
                self._waiters.popleft().release()
            else:
                self._held = False

    def locked(self) -> bool:
        return self._held


_write_locks: dict[str, FifoLock] = {}
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

    write_lock: FifoLock
    _holding = False
    # Called once the current transaction has committed and the lock is free (`notify` wakes
    # the workers of this process with it); dropped by a rollback or a failed commit.
    after_commit: Callable[[], None] | None = None

    def take_write_lock(self) -> None:
        """Take the process's write lock ahead of a transaction (`begin_immediate` then uses
        it): a thread can read, knowing no other thread of the process writes meanwhile, before
        it decides to write. `drop_write_lock` gives it back if no transaction began."""
        if self._holding:
            return
        if not self.write_lock.acquire(timeout=LOCK_TIMEOUT):
            raise DatabaseBusyError(
                f"no outbox transaction could start within {LOCK_TIMEOUT:g} s: another thread "
                "of this process holds one open (a transaction left open in the same thread?)"
            )
        self._holding = True

    def drop_write_lock(self) -> None:
        """Give back a lock `take_write_lock` took, unless a transaction holds it now (its
        commit or rollback gives it back)."""
        if not self.in_transaction:
            self._release()

    def begin_immediate(self) -> None:
        self.take_write_lock()
        try:
            self.execute("BEGIN IMMEDIATE")
        except BaseException:
            self.drop_write_lock()
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
            dbapi_connection.write_lock = _write_locks.setdefault(path, FifoLock())
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
    """An engine for the database: SQLite (WAL, BEGIN IMMEDIATE, 30 s busy timeout) or
    PostgreSQL (psycopg 3); `url` defaults to `default_url()`. Applications may pass this
    engine's connections to `streamcore.outbox.put`."""
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
        raise DatabaseError(
            f"the outbox runs on SQLite or PostgreSQL, not {url.split(':', 1)[0]!r}: give a "
            "sqlite:///path or postgresql://user@host/db URL (STREAMCORE_OUTBOX_URL)"
        )
    kwargs.setdefault("pool_size", 16)
    kwargs.setdefault("max_overflow", 16)
    kwargs.setdefault("pool_pre_ping", True)
    return sa.create_engine(url, **kwargs)


def create_tables(conn: sa.Connection, tables: sa.MetaData, lock: str) -> None:
    """Create the missing tables of `tables` in the transaction of `conn`. Many processes may
    do it at once: on PostgreSQL they take turns on an advisory lock named `lock` (CREATE TABLE
    IF NOT EXISTS alone races there); SQLite's write lock already serialises them."""
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(hashtext(:t))"), {"t": lock})
    tables.create_all(conn, checkfirst=True)
