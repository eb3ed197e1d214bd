"""The redrive ledger: which dead letters were sent back, as an SQL table of the outbox database.

`streamcore_recovery_redrives` has one row per redriven dead letter, keyed by where it lies
(dead-letter stream, partition, offset). A redrive writes its rows `pending` with the end offsets
of the target stream *before* appending, then appends, then marks them `done` with the offsets
the records got, in the transaction that writes the redrive's audit entry (`finish(..., trail=)`:
the rows are done if and only if the entry exists). A rerun skips `done` rows. A `pending` row is
a redrive that stopped between the two writes: the rerun looks for the record in the target
stream from the recorded end offsets on; found, the row becomes `done`, otherwise the record is
appended again. So a record is redriven once, whatever crashes.

A redrive claims its dead-letter streams first (`claim`), for as long as it reads and writes
their rows: a second run of the same streams is refused (`LedgerBusyError`) instead of taking a
`pending` row of the first, still appending, for one a crash left. The claim is a lock the
database session holds (PostgreSQL: an advisory lock; SQLite: an `flock` on a file beside the
database), so it goes with the process that holds it, crash included. Reading the rows writes
nothing: a missing table is an empty ledger.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from streamcore.names import Name
from streamcore.recovery.errors import LedgerBusyError, RecoveryError
from streamcore.sql import create_tables

__all__ = ["LedgerRow", "RedriveLedger"]

T = TypeVar("T")

REDRIVES = "streamcore_recovery_redrives"
PENDING, DONE = "pending", "done"

metadata = sa.MetaData()
redrives = sa.Table(
    REDRIVES,
    metadata,
    sa.Column("dlq", sa.String(300), primary_key=True),
    sa.Column("dlq_partition", sa.Integer, primary_key=True),
    sa.Column("dlq_offset", sa.BigInteger, primary_key=True),
    sa.Column("target", sa.String(300), nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("target_ends", sa.Text, nullable=False),
    sa.Column("target_partition", sa.Integer),
    sa.Column("target_offset", sa.BigInteger),
    sa.Column("redriven_ms", sa.BigInteger, nullable=False),
    sa.Column("principal", sa.String(200), nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
)


@dataclass(frozen=True, slots=True)
class LedgerRow:
    """A dead letter's redrive: to `target`, `pending` or `done`; `target_ends` are the target's
    end offsets before the append; `target_partition` / `target_offset` where it landed."""

    dlq: str
    partition: int
    offset: int
    target: str
    state: str
    target_ends: tuple[int, ...]
    target_partition: int | None
    target_offset: int | None
    redriven_ms: int
    principal: str
    reason: str


class RedriveLedger:
    """The ledger on `engine` (SQLite or PostgreSQL); the table is created on first use."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._created = False
        self._claimed: set[str] = set()

    def _ready(self) -> None:
        if self._created:
            return
        with self.engine.begin() as conn:
            create_tables(conn, metadata, REDRIVES)
        self._created = True

    def _exists(self) -> bool:
        if not self._created:
            with self.engine.connect() as conn:
                self._created = sa.inspect(conn).has_table(REDRIVES)
        return self._created

    @contextmanager
    def claim(self, dlqs: Iterable[str]) -> Iterator[None]:
        """Hold the claim of each dead-letter stream of `dlqs` for the block: read the rows,
        append and finish under it. Raises `LedgerBusyError` (claiming nothing) when another
        run holds one. Re-entrant: the streams this ledger claims already are not claimed
        again."""
        self._ready()
        with ExitStack() as held:
            for dlq in sorted(set(dlqs) - self._claimed):
                held.enter_context(self._lock(dlq))
                self._claimed.add(dlq)
                held.callback(self._claimed.discard, dlq)
            yield

    @contextmanager
    def _lock(self, dlq: str) -> Iterator[None]:
        if self.engine.dialect.name == "postgresql":
            with self._advisory_lock(dlq):
                yield
            return
        database = self.engine.url.database
        if not database or database == ":memory:":
            raise RecoveryError(
                "the redrive ledger needs a database file or PostgreSQL, not an in-memory "
                "SQLite database: give the outbox URL of a file (sqlite:///path/outbox.db)"
            )
        folder = Path(f"{database}.locks")
        folder.mkdir(exist_ok=True)
        path = folder / f"redrive-{Name.of(dlq).id}"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise _busy(dlq, f"the lock file {path}") from None
            yield
        finally:
            os.close(fd)  # releases the flock

    @contextmanager
    def _advisory_lock(self, dlq: str) -> Iterator[None]:
        key = {"k": f"streamcore_recovery_redrive:{dlq}"}
        # A session lock on a connection of its own, outside any transaction: it lasts until
        # unlocked, or until the session ends with the process.
        conn = self.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        try:
            got = conn.execute(sa.text("SELECT pg_try_advisory_lock(hashtext(:k))"), key)
            if not got.scalar():
                raise _busy(dlq, "a PostgreSQL advisory lock")
            try:
                yield
            finally:
                conn.execute(sa.text("SELECT pg_advisory_unlock(hashtext(:k))"), key)
        finally:
            conn.close()

    def rows(
        self, dlq: str, positions: Iterable[tuple[int, int]] | None = None
    ) -> dict[tuple[int, int], LedgerRow]:
        """The ledger rows of these `(partition, offset)` of `dlq` that exist (all of `dlq`'s
        rows when `positions` is None: one query, for selections of millions)."""
        if not self._exists():  # nothing redriven yet; reading creates no table (a dry run)
            return {}
        if positions is None:
            with self.engine.connect() as conn:
                query = sa.select(redrives).where(redrives.c.dlq == dlq)
                return {(r.dlq_partition, r.dlq_offset): _row(r) for r in conn.execute(query)}
        wanted = set(positions)
        if not wanted:
            return {}
        found: dict[tuple[int, int], LedgerRow] = {}
        with self.engine.connect() as conn:
            for part in {p for p, _ in wanted}:
                offsets = sorted(o for p, o in wanted if p == part)
                for chunk in range(0, len(offsets), 500):
                    query = sa.select(redrives).where(
                        redrives.c.dlq == dlq,
                        redrives.c.dlq_partition == part,
                        redrives.c.dlq_offset.in_(offsets[chunk : chunk + 500]),
                    )
                    for row in conn.execute(query):
                        found[(row.dlq_partition, row.dlq_offset)] = _row(row)
        return found

    def begin(
        self, rows: Sequence[LedgerRow], replacing: Collection[tuple[str, int, int]] = ()
    ) -> None:
        """Store `rows` as `pending`, in one transaction, before their records are appended;
        `replacing`: the `(dlq, partition, offset)` among them whose pending row exists (a
        redrive that stopped before its append), replaced. Under the `claim` of their streams:
        only then is a pending row known to be no other run's."""
        self._ready()
        if not rows:
            return
        unclaimed = sorted({row.dlq for row in rows} - self._claimed)
        if unclaimed:
            raise RecoveryError(
                f"redrive rows of {', '.join(unclaimed)} written without the ledger's claim: "
                "call RedriveLedger.begin inside `with ledger.claim(dlqs):`"
            )
        # One statement each, many parameter sets: a million rows in seconds, not minutes.
        with self.engine.begin() as conn:
            if replacing:
                keys = [{"k_dlq": d, "k_partition": p, "k_offset": o} for d, p, o in replacing]
                conn.execute(
                    redrives.delete().where(
                        (redrives.c.dlq == sa.bindparam("k_dlq"))
                        & (redrives.c.dlq_partition == sa.bindparam("k_partition"))
                        & (redrives.c.dlq_offset == sa.bindparam("k_offset"))
                        & (redrives.c.state == PENDING)
                    ),
                    keys,
                )
            conn.execute(redrives.insert(), [_values(row, PENDING) for row in rows])

    def finish(
        self,
        landed: Iterable[tuple[str, int, int, int | None, int | None]],
        trail: Callable[[sa.Connection], T] | None = None,
    ) -> T | None:
        """Mark `(dlq, partition, offset, target_partition, target_offset)` done; the target
        position is None when the writer does not learn it (a Spark redrive). `trail(conn)`
        (the audit entry of the redrive) runs in the same transaction, so the rows are done if
        and only if it succeeded; returns what it returns."""
        self._ready()
        params = [
            {"k_dlq": d, "k_partition": p, "k_offset": o, "t_partition": tp, "t_offset": to}
            for d, p, o, tp, to in landed
        ]
        if not params:
            return None
        with self.engine.begin() as conn:
            conn.execute(
                redrives.update()
                .where(
                    (redrives.c.dlq == sa.bindparam("k_dlq"))
                    & (redrives.c.dlq_partition == sa.bindparam("k_partition"))
                    & (redrives.c.dlq_offset == sa.bindparam("k_offset"))
                )
                .values(
                    state=DONE,
                    target_partition=sa.bindparam("t_partition"),
                    target_offset=sa.bindparam("t_offset"),
                ),
                params,
            )
            return None if trail is None else trail(conn)


def _busy(dlq: str, lock: str) -> LedgerBusyError:
    return LedgerBusyError(
        f"another redrive of {dlq} is running (it holds the ledger's claim on the stream: "
        f"{lock}); this one changed nothing. Run it again once the other has finished: it "
        "skips what the other redrove"
    )


def _values(row: LedgerRow, state: str) -> dict[str, object]:
    return {
        "dlq": row.dlq,
        "dlq_partition": row.partition,
        "dlq_offset": row.offset,
        "target": row.target,
        "state": state,
        "target_ends": json.dumps(list(row.target_ends)),
        "target_partition": row.target_partition,
        "target_offset": row.target_offset,
        "redriven_ms": row.redriven_ms,
        "principal": row.principal,
        "reason": row.reason,
    }


def _row(row: sa.Row[Any]) -> LedgerRow:
    return LedgerRow(
        row.dlq,
        row.dlq_partition,
        row.dlq_offset,
        row.target,
        row.state,
        tuple(json.loads(row.target_ends)),
        row.target_partition,
        row.target_offset,
        row.redriven_ms,
        row.principal,
        row.reason,
    )
