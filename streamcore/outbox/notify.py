"""Waking workers the moment a job is committed.

PostgreSQL: `put` calls `pg_notify` in the caller's transaction, which the server delivers only
on commit, to every process that LISTENs (`PgListener`, one connection per worker pool).
SQLite has no such channel: `put` marks the connection with the jobs it put per queue, and an
engine `commit` listener wakes the pools of this process watching the same database file
(`local_hub`), telling them those counts; other processes find the jobs by polling. The listener
fires just before the driver commits; on the outbox's own connections
(`streamcore.sql.create_engine`) it leaves the wake-up to the driver connection, which calls it
once the commit is done and the process's write lock released: a woken worker then reads the
jobs without a write transaction (`claim.peek_batch`), and its own transaction does not start by
waiting for the committer's.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import sqlalchemy as sa

from streamcore.outbox.schema import NOTIFY_CHANNEL
from streamcore.sql import SerializedSqliteConnection

__all__ = ["PENDING_KEY", "PgListener", "database_key", "local_hub", "psycopg_dsn"]


logger = logging.getLogger(__name__)

PENDING_KEY = "streamcore_outbox_pending"


def database_key(engine: sa.Engine | sa.Connection) -> str:
    """Identity of a database for in-process wake-ups: the real path of a SQLite file, or the
    URL without the password."""
    url = engine.engine.url if isinstance(engine, sa.Connection) else engine.url
    if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
        return "sqlite:" + os.path.realpath(url.database)
    return url.render_as_string(hide_password=True)


Committed = Mapping[str, int]  # jobs one committed transaction put, per queue


class LocalHub:
    """In-process subscribers per database; `notify` calls each with the jobs a transaction
    committed, per queue."""

    def __init__(self) -> None:
        self._subscribers: dict[str, list[Callable[[Committed], None]]] = {}
        self._lock = threading.Lock()
        self._engines: weakref.WeakSet[sa.Engine] = weakref.WeakSet()

    def subscribe(self, key: str, callback: Callable[[Committed], None]) -> None:
        with self._lock:
            self._subscribers.setdefault(key, []).append(callback)

    def unsubscribe(self, key: str, callback: Callable[[Committed], None]) -> None:
        with self._lock:
            callbacks = self._subscribers.get(key, [])
            if callback in callbacks:
                callbacks.remove(callback)

    def notify(self, key: str, queues: Committed) -> None:
        for callback in list(self._subscribers.get(key, ())):
            callback(queues)

    def watch_commits(self, engine: sa.Engine) -> None:
        """Make commits on `engine` wake the pools of its database (once per engine)."""
        if engine in self._engines:
            return
        with self._lock:
            if engine in self._engines:
                return
            key = database_key(engine)

            def on_commit(conn: sa.Connection) -> None:
                queues = conn.info.pop(PENDING_KEY, None)
                if not queues:
                    return
                driver = conn.connection.dbapi_connection
                if isinstance(driver, SerializedSqliteConnection):
                    driver.after_commit = functools.partial(self.notify, key, queues)
                else:
                    self.notify(key, queues)

            def on_rollback(conn: sa.Connection) -> None:
                conn.info.pop(PENDING_KEY, None)

            sa.event.listen(engine, "commit", on_commit)
            sa.event.listen(engine, "rollback", on_rollback)
            self._engines.add(engine)


local_hub = LocalHub()


class PgListener(threading.Thread):
    """LISTENs on the outbox channel and calls `callback({queue})` per notification; reconnects
    after a lost connection (and then wakes everyone, as notifications may have been missed)."""

    def __init__(self, dsn: str, callback: Callable[[set[str]], None]) -> None:
        super().__init__(name="outbox-listen", daemon=True)
        self.dsn = dsn
        self.callback = callback
        self._stop_event = threading.Event()
        self.ready = threading.Event()

    def stop(self) -> None:
        self._stop_event.set()

    def run(self) -> None:
        import psycopg

        delay = 0.5
        while not self._stop_event.is_set():
            try:
                with psycopg.connect(self.dsn, autocommit=True) as conn:
                    conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                    self.ready.set()
                    self.callback(set())
                    delay = 0.5
                    while not self._stop_event.is_set():
                        for note in conn.notifies(timeout=0.5):
                            self.callback({note.payload})
            except Exception as exc:
                if self._stop_event.is_set():
                    return
                logger.warning("outbox: LISTEN connection lost (%s); reconnecting", exc)
                time.sleep(delay)
                delay = min(delay * 2, 10.0)


def psycopg_dsn(engine: sa.Engine) -> str:
    """A libpq connection string for the engine's database (psycopg, not SQLAlchemy, syntax)."""
    url = engine.url
    parts: dict[str, Any] = {
        "host": url.host,
        "port": url.port,
        "dbname": url.database,
        "user": url.username,
        "password": url.password,
    }
    parts.update(url.query)
    from psycopg.conninfo import make_conninfo

    return make_conninfo(**{k: v for k, v in parts.items() if v is not None})
