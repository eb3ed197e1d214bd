"""`Recovery`: the operator's view across dead letters, group positions and outbox errors, and
the repairs, each checked before it changes anything, each with a dry run, each audited.

    with Recovery(principal="alice") as recovery:
        letters = recovery.dead_letters(DeadLetterFilter(computation="enrich"))
        outcome = recovery.redrive(DeadLetterFilter(streams=("app/dlq-enrich",)),
                                   reason="price feed fixed")
        outcome = recovery.skip("app/orders", "enrich", 0, 42, reason="corrupt order")
        outcome = recovery.reset("app/orders", "enrich", ResetTarget(end=True), reason="...")
        outcome = recovery.outbox_retry("audit/entries", reason="relay fixed")

Every change returns an `Outcome`: the action, whether it was a dry run, a summary, the before /
after rows, and the event id of its audit entry (none for a dry run, which changes nothing and
writes nothing: it opens no outbox database that does not exist yet). Position changes refuse
while the group has live members unless `force`.

Each change and its audit entry commit together where one store holds both: a redrive's entry in
the transaction that marks its ledger rows done, an outbox retry's or purge's in the change's own.
A skip or a reset moves positions in the log, which shares no transaction with the database: its
entry is written first in a transaction committed right after the move (a failure to write it
stops the move; only a crash between the move and that commit leaves a move without its entry).
"""

from __future__ import annotations

import getpass
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from streamcore.audit import publish
from streamcore.codecs import get_codec
from streamcore.config import StreamcoreConfig, load_config
from streamcore.log import LogManager, open_log_manager
from streamcore.outbox import store as outbox_store
from streamcore.outbox.outbox import Outbox
from streamcore.outbox.purge import purge as purge_jobs
from streamcore.outbox.store import FailedJob
from streamcore.recovery.deadletters import (
    DeadLetterEntry,
    DeadLetterFilter,
    Progress,
    scan_dead_letters,
)
from streamcore.recovery.errors import SelectionError
from streamcore.recovery.ledger import RedriveLedger
from streamcore.recovery.positions import (
    PositionPlan,
    apply_plan,
    check_no_live_members,
    plan_reset,
    plan_skip,
)
from streamcore.recovery.redrive import RedriveResult, redrive
from streamcore.recovery.targets import ResetTarget
from streamcore.recovery.trail import audit_entry
from streamcore.sql import default_url

__all__ = ["Outcome", "Recovery"]


@dataclass
class Outcome:
    """What a recovery action did, or would do on a dry run."""

    action: str
    dry_run: bool
    summary: dict[str, Any]
    rows: list[dict[str, Any]] = field(default_factory=list)
    audit_event_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "dry_run": self.dry_run,
            "summary": self.summary,
            "rows": self.rows,
            "audit_event_id": self.audit_event_id,
        }


class Recovery:
    """Recovery over the configuration's logs and outbox database. `manager`: a log manager
    to use (default: one opened from the configuration, closed by `close`); `url`: the outbox
    database (default: the configuration's); `codec`: the Record codec of the dead-letter and
    input streams (default: `codec.default` of the configuration); `principal`: who acts
    (default: the OS user)."""

    def __init__(
        self,
        config: StreamcoreConfig | None = None,
        *,
        manager: LogManager | None = None,
        url: str | None = None,
        codec: str | None = None,
        principal: str | None = None,
    ) -> None:
        self.config = config or load_config()
        self._own_manager = manager is None
        self.manager = manager or open_log_manager(self.config)
        self._url = url
        self.codec = get_codec(codec or self.config.default_codec, config=self.config)
        self.principal = principal or getpass.getuser()

    @cached_property
    def outbox(self) -> Outbox:
        """The outbox database, opened on first use: listing dead letters needs none."""
        outbox = Outbox(self._url or default_url(self.config))
        # Audit entries and outbox actions need the jobs table, which a fresh home lacks.
        outbox.create_schema()
        return outbox

    @cached_property
    def ledger(self) -> RedriveLedger:
        return RedriveLedger(self.outbox.engine)

    def _database_exists(self) -> bool:
        """Whether the outbox database exists: a SQLite file is made by the first connection,
        which a dry run or a read must not make."""
        if "outbox" in self.__dict__:
            return True
        url = sa.engine.make_url(self._url or default_url(self.config))
        if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
            return True
        return Path(url.database).exists()

    def read_ledger(self) -> RedriveLedger | None:
        """The ledger to read only (a dry run): None while the outbox database does not exist,
        as nothing was redriven then; reading creates neither the database nor the table."""
        return self.ledger if self._database_exists() else None

    def close(self) -> None:
        if self._own_manager:
            self.manager.close()
        if "outbox" in self.__dict__:
            self.outbox.close()

    def __enter__(self) -> Recovery:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- dead letters -------------------------------------------------------------------------
    def dead_letters(
        self,
        selection: DeadLetterFilter | None = None,
        *,
        limit: int | None = None,
        progress: Progress | None = None,
    ) -> list[DeadLetterEntry]:
        """The dead letters `selection` matches (all by default), at most `limit`;
        `progress(read, total)` after each record read."""
        found: list[DeadLetterEntry] = []
        scan = scan_dead_letters(self.manager, selection, codec=self.codec, progress=progress)
        for entry in scan:
            if limit is not None and len(found) >= limit:
                break
            found.append(entry)
        return found

    def redrive(
        self,
        selection: DeadLetterFilter,
        *,
        reason: str,
        target: str | None = None,
        dry_run: bool = False,
        progress: Progress | None = None,
    ) -> Outcome:
        """Send the selected dead letters back (see `streamcore.recovery.redrive`)."""
        _check_reason(reason, dry_run)

        def trail(conn: sa.Connection, result: RedriveResult) -> str:
            details = {"selection": selection_details(selection), **result.to_dict()}
            return self.publish_audit(conn, "redrive", reason, details)

        result = redrive(
            self.manager,
            self.read_ledger() if dry_run else self.ledger,
            selection,
            codec=self.codec,
            principal=self.principal,
            reason=reason,
            target=target,
            dry_run=dry_run,
            progress=progress,
            trail=trail,
        )
        rows = [{"target": t, "records": n} for t, n in sorted(result.targets.items())]
        return Outcome("redrive", dry_run, result.to_dict(), rows, result.audit_event_id)

    # -- positions ----------------------------------------------------------------------------
    def skip(
        self,
        stream: str,
        group: str,
        partition: int,
        offset: int,
        *,
        reason: str,
        dry_run: bool = False,
        force: bool = False,
    ) -> Outcome:
        """Move `group` past the poison record at `offset` of `partition` of `stream`."""
        _check_reason(reason, dry_run)
        plan = plan_skip(self.manager, stream, group, partition=partition, offset=offset)
        return self._move("skip", plan, reason, dry_run, force)

    def reset(
        self,
        stream: str,
        group: str,
        target: ResetTarget,
        *,
        reason: str,
        partitions: Sequence[int] | None = None,
        dry_run: bool = False,
        force: bool = False,
    ) -> Outcome:
        """Move `group` on `stream` (`partitions`, default all) to `target`."""
        _check_reason(reason, dry_run)
        plan = plan_reset(
            self.manager, stream, group, target, partitions=partitions, codec=self.codec
        )
        return self._move("reset", plan, reason, dry_run, force)

    def _move(
        self, action: str, plan: PositionPlan, reason: str, dry_run: bool, force: bool
    ) -> Outcome:
        members = self.manager.group_members(plan.group)
        live = [m.member_id for m in members]
        summary = {
            "stream": plan.stream,
            "group": plan.group,
            "move": plan.action,
            "reread": plan.reread,
            "skipped": plan.skipped,
            "live_members": live,
        }
        outcome = Outcome(action, dry_run, summary, plan.rows())
        if dry_run:
            return outcome
        if not force:
            check_no_live_members(plan.group, members)
        details = {**summary, "forced": force, "partitions": plan.rows()}
        with self.outbox.engine.begin() as conn:
            # The entry first: if it cannot be written, nothing moves. It commits right after
            # the move, which the log makes outside this transaction.
            outcome.audit_event_id = self.publish_audit(conn, action, reason, details)
            apply_plan(self.manager, plan)
        return outcome

    # -- outbox -------------------------------------------------------------------------------
    def outbox_errors(self, queue: str, *, limit: int = 100) -> list[FailedJob]:
        """Jobs of `queue` in error, oldest error first (none without a database yet)."""
        if not self._database_exists():
            return []
        return self.outbox.get_errors(queue, limit)

    def outbox_retry(
        self, queue: str, *, reason: str, job_id: str | None = None, dry_run: bool = False
    ) -> Outcome:
        """Send the errors of `queue` (or the one `job_id`) back to the workers."""
        _check_reason(reason, dry_run)
        summary: dict[str, Any] = {"queue": queue, "job_id": job_id}

        def change(conn: Any) -> int:
            return outbox_store.force_retry(conn, queue, job_id)

        outcome = self._outbox_change(
            "outbox-retry", summary, "retried", change, reason, dry_run, wake=True
        )
        if job_id is not None and not summary["retried"]:  # so nothing changed
            raise SelectionError(
                f"outbox queue {queue!r} has no job {job_id!r} in error; list them with "
                f"`streamcore recovery outbox errors {queue}`"
            )
        return outcome

    def outbox_purge(
        self, *, older_than_s: float, reason: str, queue: str | None = None, dry_run: bool = False
    ) -> Outcome:
        """Delete the done jobs (of `queue`, default all) finished over `older_than_s` ago."""
        _check_reason(reason, dry_run)
        summary: dict[str, Any] = {"queue": queue, "older_than_s": older_than_s}

        def change(conn: Any) -> int:
            return purge_jobs(conn, older_than_s, queue)

        return self._outbox_change("outbox-purge", summary, "purged", change, reason, dry_run)

    def _outbox_change(
        self,
        action: str,
        summary: dict[str, Any],
        counted: str,
        change: Any,
        reason: str,
        dry_run: bool,
        *,
        wake: bool = False,
    ) -> Outcome:
        """Run `change(conn)` and its audit entry in one transaction; `wake` the workers after."""
        if dry_run and not self._database_exists():
            summary[counted] = 0  # no database, no job: and a dry run creates none
            return Outcome(action, dry_run, summary)
        # A dry run makes the very change and rolls it back: its count is the real one.
        with self.outbox.engine.connect() as conn:
            transaction = conn.begin()
            try:
                summary[counted] = change(conn)
                outcome = Outcome(action, dry_run, summary)
                if not dry_run and summary[counted]:
                    # In the change's transaction: the entry exists if and only if it happened.
                    outcome.audit_event_id = self.publish_audit(conn, action, reason, summary)
                if dry_run:
                    transaction.rollback()
                else:
                    transaction.commit()
            except BaseException:
                transaction.rollback()
                raise
        if wake and not dry_run and summary[counted]:
            self.outbox.wake()
        return outcome

    def publish_audit(
        self, conn: sa.Connection, action: str, reason: str, details: dict[str, Any]
    ) -> str:
        """Write the audit entry of `action` in the transaction of `conn`, the change's own
        (the Spark redrive of jobs/recovery.py gives the one that marks its rows done); its
        event id."""
        entry = audit_entry(action, principal=self.principal, reason=reason, details=details)
        return publish(conn, entry)


def _check_reason(reason: str, dry_run: bool) -> None:
    if dry_run:
        return
    if not isinstance(reason, str) or not reason.strip():
        raise SelectionError("a recovery action that changes something needs a reason (--reason)")


def selection_details(selection: DeadLetterFilter) -> dict[str, Any]:
    """`selection` as the audit entry's details keep it."""
    return {
        "streams": list(selection.streams),
        "computation": selection.computation,
        "error": selection.error,
        "since_ms": selection.since_ms,
        "until_ms": selection.until_ms,
        "offsets": sorted(selection.offsets),
    }
