"""The jobs table and its indexes: the outbox's own table in the database of `streamcore.sql`.

One table holds every queue. `seq` orders jobs (FIFO per queue, and the relay's per-key order);
`(queue, id)` is the user's identity of a job. `lock_token` is the compare-and-swap guard: a
worker may only finish a job whose token is still the one it claimed with, so a job the hung
detector handed to another worker cannot be finished twice. Times are epoch milliseconds (UTC).
"""

from __future__ import annotations

import logging
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from streamcore.sql import create_tables

__all__ = [
    "DONE",
    "ERROR",
    "INIT",
    "IS_DONE",
    "NOTIFY_CHANNEL",
    "PROCESSING",
    "STATUSES",
    "TABLE",
    "create_schema",
    "jobs",
    "metadata",
    "missing_columns",
]


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
    sa.Column("context", sa.Text),  # the logging context at put (streamcore.outbox.log_context)
    sa.UniqueConstraint("queue", "id", name=f"{TABLE}_queue_id"),
)
# `status = 'done'` with the literal in the SQL: a partial index on it serves only a query that
# says so in its text (SQLite; PostgreSQL in a generic plan), not one with a bound parameter.
IS_DONE = jobs.c.status == sa.literal_column(f"'{DONE}'")
_HAS_DEPENDENCY = jobs.c.depends_id.is_not(None)
# Claims, the retry poller and the hung detector scan (queue, status) in seq order; purge and
# the processing-time stats scan done jobs by time (`IS_DONE`). The last two indexes are partial:
# a job enters `_done` once, when done, instead of at each change of status, and `_depends`
# only with a dependency; that was about 16 % of the CPU time of a put, claim and done of
# SQLite (bench/RESULTS.md). Tables made before keep their full indexes of the same names,
# which serve the same queries.
sa.Index(f"{TABLE}_claim", jobs.c.queue, jobs.c.status, jobs.c.seq)


def _partial_index(name: str, where: Any, *columns: Any) -> sa.Index:
    return sa.Index(f"{TABLE}_{name}", *columns, sqlite_where=where, postgresql_where=where)


_partial_index("done", IS_DONE, jobs.c.status, jobs.c.done_ms)
_partial_index("depends", _HAS_DEPENDENCY, jobs.c.depends_queue, jobs.c.depends_id)


def create_schema(engine: Engine) -> None:
    """Create the jobs table and its indexes if missing (idempotent; safe from many processes:
    PostgreSQL serialises concurrent creators with an advisory lock)."""
    with engine.begin() as conn:
        create_tables(conn, metadata, TABLE)
        _migrate(conn)


def missing_columns(conn: sa.Connection) -> list[sa.Column[Any]]:
    """The columns of the jobs table that a table made by an older version lacks."""
    present = {c["name"] for c in sa.inspect(conn).get_columns(TABLE)}
    return [column for column in jobs.columns if column.name not in present]


def _migrate(conn: sa.Connection) -> None:
    """Add columns a table made by an older version lacks (they are all nullable)."""
    for column in missing_columns(conn):
        kind = column.type.compile(dialect=conn.dialect)
        conn.execute(sa.text(f'ALTER TABLE {TABLE} ADD COLUMN "{column.name}" {kind}'))
        logger.info("outbox: added column %s to %s", column.name, TABLE)
