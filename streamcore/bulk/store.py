"""The command store (Nuxeo's `bulk` KV store) as SQL tables of the outbox database.

`streamcore_bulk_commands` holds one row per command: the command and its full status (their Avro
datums as JSON), the state and submit time for listing, and `exclusive_key`, set to
`<action>:<repository>` while an exclusive action's command is not finished. Its UNIQUE
constraint is the compare-and-set Nuxeo's `exclusive:<action>:<repo>` entry is: of two processes
inserting the same key, the database lets exactly one commit.

`streamcore_bulk_buckets` holds the bucket numbers whose deltas were counted, so a job rerun
after a crash cannot count a bucket twice.

`streamcore_bulk_claims` says which runner (an Airflow DAG run, `<dag id>/<run id>`) runs a
command: its primary key makes the claim a compare-and-set, so of two dispatchers (or a
dispatcher and a person) exactly one claims a command. A DAG run that submits its own command
claims it in the transaction that stores it; `dispatched` marks the claims of the dispatcher.

An exclusive action's key is released when its command completes, or when it is aborted and no
job can still be writing: at once for a command no job has picked up (SCHEDULED: a job's first
change, SCROLLING_RUNNING, comes before any write and it looks at the state before each bucket),
else when the job acknowledges the abort (`BulkService.acknowledge_abort`) after the bucket it
was writing.

Every change of a status runs in one transaction that locks the command's row first (PostgreSQL:
SELECT ... FOR UPDATE; SQLite: BEGIN IMMEDIATE locks the database), so concurrent deltas merge
one after the other.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from streamcore.bulk.errors import CommandNotFoundError, ExclusiveActionError
from streamcore.bulk.model import BulkCommand, BulkStatus, State, iso_ms, now_ms
from streamcore.sql import create_tables

__all__ = [
    "BUCKETS",
    "CLAIMS",
    "COMMANDS",
    "CommandStore",
    "buckets",
    "claims",
    "commands",
    "metadata",
]


COMMANDS = "streamcore_bulk_commands"
BUCKETS = "streamcore_bulk_buckets"
CLAIMS = "streamcore_bulk_claims"

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

claims = sa.Table(
    CLAIMS,
    metadata,
    sa.Column("command_id", sa.String(200), primary_key=True),
    sa.Column("runner", sa.String(600), nullable=False),
    sa.Column("dispatched", sa.Boolean, nullable=False),
    sa.Column("claimed_ms", sa.BigInteger, nullable=False),
)

Change = Callable[[BulkStatus], BulkStatus]
Release = Callable[[BulkStatus, BulkStatus], bool]
"""(before, after) of a change -> whether it frees the command's exclusive key."""


def on_completion(before: BulkStatus, after: BulkStatus) -> bool:
    """The default release: a completed command holds nothing."""
    return after.state is State.COMPLETED


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
        self,
        command: BulkCommand,
        status: BulkStatus,
        exclusive_key: str | None,
        runner: str | None = None,
    ) -> BulkStatus | None:
        """Store a new command, claimed by `runner` if given: None once stored; the stored
        status when the id exists already; `ExclusiveActionError` naming the command that holds
        `exclusive_key`."""
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
                    if runner is not None:
                        conn.execute(_claim(command.id, runner, dispatched=False))
                return None
            except sa.exc.IntegrityError:
                with self.engine.connect() as conn:
                    row = conn.execute(
                        sa.select(commands.c.status).where(commands.c.id == command.id)
                    ).first()
                    if row is not None:
                        return _status(row)
                    holder = conn.execute(
                        sa.select(commands.c.id, commands.c.submit_ms, commands.c.state).where(
                            commands.c.exclusive_key == exclusive_key
                        )
                    ).first()
                if holder is not None:
                    raise _exclusive(command, holder) from None
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
        self,
        command_id: str,
        change: Change,
        *,
        bucket: int | None = None,
        release: Release = on_completion,
    ) -> tuple[BulkStatus, BulkStatus]:
        """In one transaction: the stored status (`before`), `change(before)` stored in its
        place (`after`; its exclusive key released when `release(before, after)`). With
        `bucket`, a bucket already counted changes nothing: (before, before)."""
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
            if release(before, after):
                values["exclusive_key"] = None
            conn.execute(commands.update().where(commands.c.id == command_id).values(**values))
        return before, after

    # -- claims ---------------------------------------------------------------------------------
    def claim(self, command_id: str, runner: str, *, dispatched: bool = False) -> str | None:
        """Claim the command for `runner`: None when this call claimed it, else the runner that
        had it (possibly `runner` itself)."""
        self._ready()
        try:
            with self.engine.begin() as conn:
                if conn.execute(_exists(command_id)).first() is None:
                    raise _not_found(command_id)
                conn.execute(_claim(command_id, runner, dispatched=dispatched))
            return None
        except sa.exc.IntegrityError:
            with self.engine.connect() as conn:
                holder: str = conn.execute(
                    sa.select(claims.c.runner).where(claims.c.command_id == command_id)
                ).scalar_one()
                return holder

    def unclaimed(self) -> builtins.list[tuple[str, BulkStatus]]:
        """(id, status) of the commands no runner claimed that are SCHEDULED or ABORTED,
        oldest submit first."""
        self._ready()
        query = (
            sa.select(commands.c.id, commands.c.status)
            .outerjoin(claims, claims.c.command_id == commands.c.id)
            .where(
                claims.c.command_id.is_(None),
                commands.c.state.in_([State.SCHEDULED.value, State.ABORTED.value]),
            )
            .order_by(commands.c.submit_ms, commands.c.id)
        )
        with self.engine.connect() as conn:
            return [(row.id, _status(row)) for row in conn.execute(query)]

    def stale_dispatches(self, before_ms: int) -> builtins.list[tuple[str, str]]:
        """(id, runner) of the dispatcher's claims made at or before `before_ms` whose command is
        still SCHEDULED, their time set to now (so each is offered once per period). At or
        before: with no grace period, a claim made in this very millisecond is offered too."""
        self._ready()
        with self.engine.begin() as conn:
            rows = conn.execute(
                sa.select(claims.c.command_id, claims.c.runner)
                .join(commands, commands.c.id == claims.c.command_id)
                .where(
                    claims.c.dispatched.is_(True),
                    claims.c.claimed_ms <= before_ms,
                    commands.c.state == State.SCHEDULED.value,
                )
                .order_by(claims.c.claimed_ms)
            ).all()
            if rows:
                conn.execute(
                    claims.update()
                    .where(claims.c.command_id.in_([r.command_id for r in rows]))
                    .values(claimed_ms=now_ms())
                )
        return [(row.command_id, row.runner) for row in rows]


def _exists(command_id: str) -> Any:
    return sa.select(commands.c.id).where(commands.c.id == command_id)


def _claim(command_id: str, runner: str, *, dispatched: bool) -> Any:
    return claims.insert().values(
        command_id=command_id, runner=runner, dispatched=dispatched, claimed_ms=now_ms()
    )


def _exclusive(command: BulkCommand, holder: Any) -> ExclusiveActionError:
    since = f"submitted {iso_ms(holder.submit_ms)}"
    if holder.state == State.ABORTED.value:
        return ExclusiveActionError(
            f"action {command.action} is exclusive and command {holder.id} ({since}) was "
            f"aborted, but its job on {command.repository} has not stopped yet: it finishes its "
            "current bucket, then frees the slot; submit again then. If its job died, rerun it "
            f"(`spark-submit jobs/bulk_action.py --command-id {holder.id}`, or clear its Airflow "
            "task): it acknowledges the abort and frees the slot",
            holder.id,
        )
    return ExclusiveActionError(
        f"action {command.action} is exclusive and command {holder.id} ({since}) still runs on "
        f"{command.repository}; wait for it (`streamcore bulk wait {holder.id}`) or abort it "
        f"(`streamcore bulk abort {holder.id}`)",
        holder.id,
    )


def _not_found(command_id: str) -> CommandNotFoundError:
    return CommandNotFoundError(
        f"no bulk command {command_id!r} in the command store; list the commands with "
        "`streamcore bulk list` (is STREAMCORE_OUTBOX_URL / --home the application's?)"
    )
