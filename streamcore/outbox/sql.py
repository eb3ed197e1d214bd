"""Running the hot statements at the driver level.

`put`, claims and `done` run once per job or batch: SQLAlchemy's statement compilation and
caching cost more there than SQLite's work itself. These statements are written once with
`:name` parameters and rewritten for the driver's style (psycopg: `%(name)s`); both drivers
take a dict of parameters. Everything else goes through SQLAlchemy Core as usual.

On SQLite they skip SQLAlchemy's execution layer too (its execution context and result objects
cost about 10 us a statement, more than the INSERT of a job) and run on the driver connection
of the SQLAlchemy connection, in its transaction, wherever nothing could tell the difference:
the connection is one of the outbox's (`streamcore.sql.create_engine`: its transactions start
with BEGIN IMMEDIATE at the driver level already), no listener watches statements or their
errors, and the engine does not log statements. Driver errors are raised as SQLAlchemy raises them
(`sqlalchemy.exc.OperationalError`, ...). Elsewhere the statements go through
`exec_driver_sql`.

A statement that is a transaction of its own (`alone`: a worker's claim, which also records the
jobs of its last batch `done`) runs on PostgreSQL in autocommit on the psycopg connection, under
the same conditions: one round trip instead of three (BEGIN, the statement, COMMIT), and as
atomic as any transaction.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import re
import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any, cast

import sqlalchemy as sa

from streamcore.sql import SerializedSqliteConnection

__all__ = ["Params", "alone", "execute", "in_list", "read", "read_unlocked", "write_locked"]


_NAMED = re.compile(r"(?<![:\w]):(\w+)")

Params = dict[str, Any] | list[dict[str, Any]]


@functools.lru_cache(maxsize=256)
def _for_driver(sql: str, paramstyle: str) -> str:
    if paramstyle == "pyformat":
        return _NAMED.sub(r"%(\1)s", sql.replace("%", "%%"))
    return sql


def _unobserved(conn: sa.Connection) -> bool:
    """No listener watches the statements of `conn` or their errors, and none are logged."""
    dispatch = conn.dispatch
    return not (
        dispatch.before_cursor_execute
        or dispatch.after_cursor_execute
        or conn.dialect.dispatch.handle_error
        or conn.engine.logger.isEnabledFor(logging.INFO)
    )


def _sqlite_driver(conn: sa.Connection) -> SerializedSqliteConnection | None:
    """The driver connection of `conn` when a statement may run on it directly (see above)."""
    driver = conn.connection.dbapi_connection
    if not isinstance(driver, SerializedSqliteConnection) or not _unobserved(conn):
        return None
    return driver


def _on_driver(
    conn: sa.Connection, driver: SerializedSqliteConnection, sql: str, params: Params
) -> sqlite3.Cursor:
    try:
        if isinstance(params, list):
            return driver.executemany(sql, params)
        return driver.execute(sql, params)
    except sqlite3.Error as exc:
        raise sa.exc.DBAPIError.instance(
            sql, params, exc, sqlite3.Error, dialect=conn.dialect
        ) from exc


def execute(conn: sa.Connection, sql: str, params: Params) -> Any:
    """Run `sql` (`:name` parameters) with `params` (a list of them: once for each) in the
    transaction of `conn`; returns a cursor, the driver's or SQLAlchemy's: use `fetchall()`,
    `rowcount` (and `scalar()` on PostgreSQL)."""
    if conn.in_transaction():  # else SQLAlchemy begins one, with the outbox's BEGIN IMMEDIATE
        driver = _sqlite_driver(conn)
        if driver is not None:
            return _on_driver(conn, driver, sql, params)
    return conn.exec_driver_sql(_for_driver(sql, conn.dialect.paramstyle), params)


def alone(conn: sa.Connection, sql: str, params: dict[str, Any]) -> list[Any]:
    """The rows of `sql` run as a transaction of its own on `conn`, which is in none (see the
    module docstring)."""
    if conn.dialect.driver == "psycopg" and not conn.in_transaction() and _unobserved(conn):
        driver: Any = conn.connection.dbapi_connection  # a psycopg.Connection
        dbapi = conn.dialect.loaded_dbapi
        driver.autocommit = True
        try:
            return list(driver.execute(_for_driver(sql, "pyformat"), params).fetchall())
        except dbapi.Error as exc:
            raise sa.exc.DBAPIError.instance(
                sql, params, exc, dbapi.Error, dialect=conn.dialect
            ) from exc
        finally:
            if not driver.closed:  # a broken connection is dropped by its user
                driver.autocommit = False
    with conn.begin():
        return list(
            conn.exec_driver_sql(_for_driver(sql, conn.dialect.paramstyle), params).fetchall()
        )


def read_unlocked(conn: sa.Connection, sql: str, params: dict[str, Any]) -> list[Any] | None:
    """The rows of a query run on the SQLite driver connection of `conn`, which is in no
    transaction: in autocommit the query is its own read transaction, which takes neither the
    process's write lock nor a BEGIN IMMEDIATE (see `read`). None where that cannot be done
    unseen (PostgreSQL, or an observed engine: see the module docstring)."""
    if conn.in_transaction():
        return None
    driver = _sqlite_driver(conn)
    if driver is None:
        return None
    return _on_driver(conn, driver, sql, params).fetchall()


@contextlib.contextmanager
def write_locked(conn: sa.Connection) -> Iterator[bool]:
    """Hold the process's SQLite write lock (`streamcore.sql`) on `conn`, which is in no
    transaction: True inside while it is held, so a read on `conn` (`read_unlocked`) sees what
    a transaction begun there next would, no thread of the process writing in between; the
    transaction uses the lock and gives it back. False (nothing held) where that cannot be done
    unseen: PostgreSQL, an observed engine (see the module docstring)."""
    driver = None if conn.in_transaction() else _sqlite_driver(conn)
    if driver is None:
        yield False
        return
    driver.take_write_lock()
    try:
        yield True
    finally:
        driver.drop_write_lock()


def read(engine: sa.Engine, sql: str, params: dict[str, Any]) -> list[Any]:
    """The rows of one query run outside any write transaction. On SQLite it runs on the
    driver's connection, which is in autocommit mode, so the query is its own read transaction
    (in WAL mode it waits for no writer) instead of an outbox transaction, which always takes
    the process's write lock and BEGIN IMMEDIATE (see `streamcore.sql`). On PostgreSQL a plain
    read; an observed SQLite engine (above) reads in an outbox transaction."""
    with engine.connect() as conn:
        driver = _sqlite_driver(conn)
        if driver is not None:
            return _on_driver(conn, driver, sql, params).fetchall()
        # fetchall() is typed Sequence; it returns a list.
        return cast(
            "list[Any]",
            conn.exec_driver_sql(_for_driver(sql, conn.dialect.paramstyle), params).fetchall(),
        )


def in_list(name: str, values: Sequence[Any], params: dict[str, Any]) -> str:
    """`(:name0, :name1, ...)` for `values`, added to `params`."""
    marks = []
    for n, value in enumerate(values):
        params[f"{name}{n}"] = value
        marks.append(f":{name}{n}")
    return "(" + ", ".join(marks) + ")"
