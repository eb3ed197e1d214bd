"""The command store (Nuxeo's `bulk` KV store) as SQL tables of the outbox database.

`streamcore_bulk_commands` holds one row per command: the command and its full status (their Avro
datums as JSON), the state and submit time for listing, and `exclusive_key`, set to
`<action>:<repository>` while an exclusive action's command is not finished. Its UNIQUE
constraint is the compare-and-set Nuxeo's `exclusive:<action>:<repo>` entry is: of two processes
inserting the same key, the database lets exactly one commit.

`streamcore_bulk_buckets` holds the bucket numbers whose deltas were counted, so a job rerun
after a crash cannot count a bucket twice.

Every change of a status runs in one transaction that locks the command's row first (PostgreSQL:
SELECT ... FOR UPDATE; SQLite: BEGIN IMMEDIATE locks the database), so concurrent deltas merge
one after the other.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from streamcore.bulk.errors import CommandNotFoundError, ExclusiveActionError
from streamcore.bulk.model import BulkCommand, BulkStatus, State, iso_ms, now_ms
from streamcore.outbox.schema import create_tables

COMMANDS = "streamcore_bulk_commands"
BUCKETS = "streamcore_bulk_buckets"

metadata = sa.MetaData()
commands = sa.Table(
    COMMANDS,
    metadata,
    sa.Column("id", sa.String(200), primary_key=True),
    sa.Column("action", sa.String(200), nullable=False),
    sa.Column("username", sa.String(200), nullable=False),
    sa.Column("repository", sa.String(200), nullable=False),
    sa.Column("state", sa.String(32), nullable=False),
    sa.Column("exclusive_key", sa.String(420), unique=True),
    sa.Column("command", sa.Text, nullable=False),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("submit_ms", sa.BigInteger, nullable=False),
    sa.Column("updated_ms", sa.BigInteger, nullable=False),
)
sa.Index(f"{COMMANDS}_submit", commands.c.submit_ms)
buckets = sa.Table(
    BUCKETS,
    metadata,
    sa.Column("command_id", sa.String(200), primary_key=True),
    sa.Column("bucket", sa.BigInteger, primary_key=True),
    sa.Column("counted_ms", sa.BigInteger, nullable=False),
)

Change = Callable[[BulkStatus], BulkStatus]


def _dump(datum: dict[str, Any]) -> str:
    return json.dumps(datum, separators=(",", ":"), sort_keys=True)


def _status(row: Any) -> BulkStatus:
    return BulkStatus.from_datum(json.loads(row.status))


class CommandStore:
    """Commands and statuses in the tables above, on `engine` (SQLite or PostgreSQL)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._created = False

    def _ready(self) -> None:
        """Create the tables on first use (idempotent; PostgreSQL serialises concurrent
        creators with an advisory lock)."""
        if self._created:
            return
        with self.engine.begin() as conn:
            create_tables(conn, metadata, COMMANDS)
        self._created = True

    def insert(
        self, command: BulkCommand, status: BulkStatus, exclusive_key: str | None
    ) -> BulkStatus | None:
        """Store a new command: None once stored; the stored status when the id exists already;
        `ExclusiveActionError` naming the command that holds `exclusive_key`."""
        self._ready()
        # Two attempts: the holder of the key found by the first may finish before we look it up.
        for _ in range(2):
            try:
                with self.engine.begin() as conn:
                    row = conn.execute(
                        sa.select(commands.c.status).where(commands.c.id == command.id)
                    ).first()
                    if row is not None:
                        return _status(row)
                    conn.execute(
                        commands.insert().values(
                            id=command.id,
                            action=command.action,
                            username=command.username,
                            repository=command.repository,
                            state=(status.state or State.SCHEDULED).value,
                            exclusive_key=exclusive_key,
                            command=_dump(command.to_datum()),
                            status=_dump(status.to_datum()),
                            submit_ms=status.submit_ms or command.created_ms,
                            updated_ms=now_ms(),
                        )
                    )
                return None
            except sa.exc.IntegrityError:
                with self.engine.connect() as conn:
                    row = conn.execute(
                        sa.select(commands.c.status).where(commands.c.id == command.id)
                    ).first()
                    if row is not None:
                        return _status(row)
                    holder = conn.execute(
                        sa.select(commands.c.id, commands.c.submit_ms).where(
                            commands.c.exclusive_key == exclusive_key
                        )
                    ).first()
                if holder is not None:
                    raise ExclusiveActionError(
                        f"action {command.action} is exclusive and command {holder.id} (submitted "
                        f"{iso_ms(holder.submit_ms)}) still runs on {command.repository}; wait for "
                        f"it (`streamcore bulk wait {holder.id}`) or abort it "
                        f"(`streamcore bulk abort {holder.id}`)",
                        holder.id,
                    ) from None
        raise ExclusiveActionError(
            f"action {command.action} on {command.repository}: the exclusive slot kept changing "
            "hands; submit again",
            "",
        )

    def command(self, command_id: str) -> BulkCommand:
        row = self._row(command_id, commands.c.command)
        return BulkCommand.from_datum(json.loads(row.command))

    def status(self, command_id: str) -> BulkStatus:
        return _status(self._row(command_id, commands.c.status))

    def _row(self, command_id: str, column: Any) -> Any:
        self._ready()
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(column).where(commands.c.id == command_id)).first()
        if row is None:
            raise _not_found(command_id)
        return row

    def list(
        self, *, state: State | None = None, action: str | None = None, limit: int = 50
    ) -> list[BulkStatus]:
        """Statuses, newest submit first."""
        self._ready()
        query = sa.select(commands.c.status).order_by(
            commands.c.submit_ms.desc(), commands.c.id.desc()
        )
        if state is not None:
            query = query.where(commands.c.state == state.value)
        if action is not None:
            query = query.where(commands.c.action == action)
        with self.engine.connect() as conn:
            return [_status(row) for row in conn.execute(query.limit(limit))]

    def change(
        self, command_id: str, change: Change, *, bucket: int | None = None
    ) -> tuple[BulkStatus, BulkStatus]:
        """In one transaction: the stored status (`before`), `change(before)` stored in its
        place (`after`; its exclusive key released once terminal). With `bucket`, a bucket
        already counted changes nothing: (before, before)."""
        self._ready()
        with self.engine.begin() as conn:
            row = conn.execute(
                sa.select(commands.c.status).where(commands.c.id == command_id).with_for_update()
            ).first()
            if row is None:
                raise _not_found(command_id)
            before = _status(row)
            if bucket is not None:
                counted = conn.execute(
                    sa.select(buckets.c.bucket).where(
                        buckets.c.command_id == command_id, buckets.c.bucket == bucket
                    )
                ).first()
                if counted is not None:
                    return before, before
                conn.execute(
                    buckets.insert().values(
                        command_id=command_id, bucket=bucket, counted_ms=now_ms()
                    )
                )
            after = change(before)
            values: dict[str, Any] = {
                "status": _dump(after.to_datum()),
                "state": (after.state or State.UNKNOWN).value,
                "updated_ms": now_ms(),
            }
            if after.state is not None and after.state.terminal:
                values["exclusive_key"] = None
            conn.execute(commands.update().where(commands.c.id == command_id).values(**values))
        return before, after


def _not_found(command_id: str) -> CommandNotFoundError:
    return CommandNotFoundError(
        f"no bulk command {command_id!r} in the command store; list the commands with "
        "`streamcore bulk list` (is STREAMCORE_OUTBOX_URL / --home the application's?)"
    )
