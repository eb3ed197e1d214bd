"""`BulkService`: submit, abort and follow bulk commands; the Spark job reports through `update`
(docs/bulk.md, "The command store").

The SQL command store is the truth of every command's state; the streams `bulk/command`,
`bulk/status` and `bulk/done` tell the rest of the system, and are appended only after the
transaction that made the change committed, so a stream never says what the store does not.
"""

from __future__ import annotations

import builtins
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from streamcore.bulk.columns import repository_columns
from streamcore.bulk.errors import BulkError, BulkParamsError, NotAbortableError
from streamcore.bulk.messages import (
    COMMAND_STREAM,
    DONE_STREAM,
    STATUS_STREAM,
    STREAM_PARTITIONS,
    command_record,
    status_record,
)
from streamcore.bulk.model import (
    BulkCommand,
    BulkStatus,
    State,
    check_command_id,
    iso_ms,
    now_ms,
)
from streamcore.bulk.query import check_query
from streamcore.bulk.registry import ActionRegistry, actions_for
from streamcore.bulk.store import CommandStore
from streamcore.codecs import get_codec
from streamcore.config import StreamcoreConfig, load_config
from streamcore.errors import ConfigError, LogLockedError
from streamcore.log import LogAppender, LogManager, open_log_manager
from streamcore.record import Record
from streamcore.sql import create_engine, default_url

__all__ = ["BulkService"]


POLL_SECONDS = 0.1  # Nuxeo's BulkService.await polls its KV store every 100 ms
# A dispatched command still SCHEDULED after this long is offered again (see `dispatch`).
RETRY_AFTER_SECONDS = 300.0
LOCK_WAIT_SECONDS = 30.0


class BulkService:
    """Bulk commands of one application: the command store in the outbox database (`url`,
    default `default_url(config)`), the streams in `logs` (default: a log manager opened from
    `config` for each publish, see `_publish`)."""

    def __init__(
        self,
        config: StreamcoreConfig | None = None,
        *,
        url: str | None = None,
        logs: LogManager | None = None,
        registry: ActionRegistry | None = None,
    ) -> None:
        self.config = config or load_config()
        self.registry = registry or actions_for(self.config)
        self.engine = create_engine(url or default_url(self.config))
        self.store = CommandStore(self.engine)
        self._logs = logs
        # Appenders on the given `logs`, kept for the life of the service.
        self._appenders: dict[str, LogAppender[Any]] = {}
        self._streams_ready = False

    # -- submit ---------------------------------------------------------------------------------
    def submit(
        self,
        action: str,
        query: str,
        params: Mapping[str, Any] | None = None,
        *,
        username: str,
        command_id: str | None = None,
        bucket_size: int | None = None,
        batch_size: int | None = None,
        query_limit: int | None = None,
        repository: str = "repository",
        values: Mapping[str, bool | int | float | str] | None = None,
        runner: str | None = None,
    ) -> BulkStatus:
        """Check everything, store the command SCHEDULED, publish it; returns its status. With
        a `command_id` already stored, returns the stored status and does nothing else.
        `values` bind the query's named placeholders (`:retention_days`, a schedule's values):
        the command keeps the query with them bound, as literals. `runner` (a DAG run that
        runs the command itself, `<dag id>/<run id>`) claims it as it is stored; without one the
        dispatcher starts a run for it (`dispatch`)."""
        handler = self.registry.get(action)
        checked = handler.check_params(params)
        if not isinstance(username, str) or not username.strip():
            raise BulkParamsError("a command needs a username: who submits it", "username")
        bucket = handler.bucket_size if bucket_size is None else bucket_size
        batch = batch_size
        if batch is None:  # the action's default, within the bucket given
            batch = min(handler.batch_size, bucket) if _is_int(bucket) else handler.batch_size
        limit = handler.query_limit if query_limit is None else query_limit
        if not _is_int(bucket) or not _is_int(batch) or not 0 < batch <= bucket:
            raise BulkParamsError(
                f"bucket size {bucket!r} and batch size {batch!r}: a bucket holds whole batches, "
                "so give integers with bucket size >= batch size > 0",
                "batch_size",
            )
        if not _is_int(limit) or limit < 0:
            raise BulkParamsError(
                f"query limit {limit!r}: give the most documents to process, or 0 for no limit",
                "query_limit",
            )
        if command_id is not None:
            check_command_id(command_id)
        try:
            columns = repository_columns(repository, self.config)
        except ConfigError as exc:
            raise BulkParamsError(f"repository {repository!r}: {exc}", "repository") from None
        sql = check_query(query, columns, values)
        command = BulkCommand(
            id=command_id or str(uuid.uuid4()),
            action=action,
            query=sql,
            params=checked,
            username=username,
            repository=repository,
            bucket_size=bucket,
            batch_size=batch,
            query_limit=limit,
        )
        status = BulkStatus(
            command_id=command.id,
            action=action,
            username=username,
            state=State.SCHEDULED,
            submit_ms=command.created_ms,
        )
        exclusive_key = f"{action}:{repository}" if handler.exclusive else None
        stored = self.store.insert(command, status, exclusive_key, runner)
        if stored is not None:
            return stored
        self._publish(
            (COMMAND_STREAM, command_record(command)), (STATUS_STREAM, status_record(status))
        )
        return status

    # -- read -----------------------------------------------------------------------------------
    def command(self, command_id: str) -> BulkCommand:
        return self.store.command(check_command_id(command_id))

    def status(self, command_id: str) -> BulkStatus:
        return self.store.status(check_command_id(command_id))

    def list(
        self, *, state: State | str | None = None, action: str | None = None, limit: int = 50
    ) -> list[BulkStatus]:
        """Statuses, newest first, optionally of one state and/or action."""
        if not _is_int(limit) or limit <= 0:
            raise BulkParamsError(f"limit {limit!r}: give a positive number of commands", "limit")
        wanted = None if state is None else _state(state)
        return self.store.list(state=wanted, action=action, limit=limit)

    def wait(
        self,
        command_id: str,
        timeout: float,
        on_status: Callable[[BulkStatus], None] | None = None,
    ) -> BulkStatus:
        """The status once COMPLETED or ABORTED, polled every 100 ms; the last status read when
        `timeout` seconds pass first. `on_status` gets each status read (to show progress)."""
        check_command_id(command_id)
        deadline = time.monotonic() + timeout
        while True:
            status = self.status(command_id)
            if on_status is not None:
                on_status(status)
            if status.state is not None and status.state.terminal:
                return status
            left = deadline - time.monotonic()
            if left <= 0:
                return status
            time.sleep(min(POLL_SECONDS, left))

    # -- change ---------------------------------------------------------------------------------
    def abort(self, command_id: str) -> BulkStatus:
        """Abort the command: its state becomes ABORTED and the job stops at its next bucket. An
        exclusive action's slot is free at once if no job picked the command up (SCHEDULED),
        else once the job acknowledges the abort after the bucket it is writing
        (`acknowledge_abort`). An aborted command is returned as it is; `NotAbortableError` for
        a completed one."""
        check_command_id(command_id)
        delta = BulkStatus(
            command_id=command_id, delta=True, state=State.ABORTED, completed_ms=now_ms()
        )

        def aborted(before: BulkStatus) -> BulkStatus:
            if before.state is State.COMPLETED:
                when = iso_ms(before.completed_ms) if before.completed_ms else "an unknown time"
                raise NotAbortableError(
                    f"command {command_id} completed at {when}; a completed command cannot be "
                    "aborted"
                )
            if before.state is State.ABORTED:
                return before
            return before.merge(delta)

        before, after = self.store.change(command_id, aborted, release=_never_picked_up)
        if before.state is not State.ABORTED:
            self._publish(
                (STATUS_STREAM, status_record(delta)), (DONE_STREAM, status_record(after))
            )
        return after

    def acknowledge_abort(self, command_id: str) -> BulkStatus:
        """What the job calls once it has stopped on an abort (no write of it is under way any
        more): the command's exclusive slot is free. `BulkError` if it is not aborted."""
        check_command_id(command_id)

        def unchanged(before: BulkStatus) -> BulkStatus:
            if before.state is not State.ABORTED:
                state = before.state.value if before.state else "UNKNOWN"
                raise BulkError(
                    f"command {command_id} is not aborted ({state}): there is no abort to "
                    "acknowledge"
                )
            return before

        return self.store.change(command_id, unchanged, release=lambda _before, _after: True)[1]

    # -- dispatch -------------------------------------------------------------------------------
    def claim(self, command_id: str, runner: str) -> None:
        """Claim the command for `runner` (`<dag id>/<run id>`, the run that runs it); again for
        the same runner is fine (a retried task); `BulkError` naming the runner that has it."""
        holder = self.store.claim(check_command_id(command_id), runner)
        if holder not in (None, runner):
            raise BulkError(
                f"command {command_id} has its runner: {holder} runs it, so {runner} does not "
                "(a command runs in one DAG run; see that run, or `streamcore bulk status "
                f"{command_id}`)"
            )

    def dispatch(
        self, runner_for: Callable[[str], str], *, retry_after_s: float = RETRY_AFTER_SECONDS
    ) -> builtins.list[tuple[str, str]]:
        """The (command id, runner) pairs to start now: every command nobody claimed, claimed
        here for `runner_for(id)`, and those the dispatcher claimed `retry_after_s` or more ago
        that are still SCHEDULED (a dispatcher that stopped between its claim and the start;
        the runner, a DAG run id, cannot be created twice). SCHEDULED commands run; ABORTED
        ones that no job ever saw run too, for the job to record their final status."""
        stale = self.store.stale_dispatches(now_ms() - int(retry_after_s * 1000))
        started = []
        for command_id, status in self.store.unclaimed():
            if status.state is State.ABORTED and status.scroll_start_ms is not None:
                continue  # a job ran it: nothing to start
            runner = runner_for(command_id)
            if self.store.claim(command_id, runner, dispatched=True) is None:
                started.append((command_id, runner))
        return [*stale, *started]

    def update(
        self, command_id: str, delta: BulkStatus, *, bucket: int | None = None
    ) -> BulkStatus:
        """Merge `delta` (from the job) into the stored status and publish it; returns the full
        status. With `bucket`, the delta of a bucket already counted is ignored, so a rerun of
        the job after a crash never counts a bucket twice."""
        check_command_id(command_id)
        if delta.command_id != command_id:
            raise BulkError(
                f"the status delta is about command {delta.command_id}, not {command_id}; give "
                "update() the delta of the command it names"
            )
        if bucket is not None and (not _is_int(bucket) or bucket < 0):
            raise BulkParamsError(f"bucket {bucket!r} must be an integer >= 0", "bucket")
        before, after = self.store.change(
            command_id, lambda status: status.merge(delta), bucket=bucket
        )
        if after is before:
            return after
        published = [(STATUS_STREAM, status_record(delta))]
        if after.state is not None and after.state.terminal and not _terminal(before):
            published.append((DONE_STREAM, status_record(after)))
        self._publish(*published)
        return after

    # -- streams --------------------------------------------------------------------------------
    def _publish(self, *items: tuple[str, Record]) -> None:
        """Append `items` (stream, record) in order. Given no `logs`, each publish opens and
        closes its own log manager: a local-log partition has one writer process at a time, and
        the CLI, the DAG and the job all publish on bulk/status, so none may keep it; a
        partition another process is writing to is retried for up to LOCK_WAIT_SECONDS."""
        if self._logs is not None:
            self._append(self._logs, list(items), self._appenders)
            return
        pending = list(items)
        deadline = time.monotonic() + LOCK_WAIT_SECONDS
        pause = 0.01
        while True:
            try:
                with open_log_manager(self.config) as logs:
                    self._append(logs, pending, {})
                return
            except LogLockedError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(pause)
                pause = min(pause * 2, 0.5)

    def _append(
        self,
        logs: LogManager,
        pending: builtins.list[tuple[str, Record]],
        appenders: dict[str, LogAppender[Any]],
    ) -> None:
        """Append and drop the items of `pending` one by one, so a retry appends the rest only."""
        if not self._streams_ready:
            # All three at once: a reader of bulk/done can start before anything finishes.
            for name, partitions in STREAM_PARTITIONS.items():
                logs.create(name, partitions)
            self._streams_ready = True
        while pending:
            stream, record = pending[0]
            appender = appenders.get(stream)
            if appender is None or appender.closed:
                appender = appenders[stream] = logs.appender(stream, get_codec("avro"))
            appender.append(record.key, record)
            pending.pop(0)

    def close(self) -> None:
        for appender in self._appenders.values():
            appender.close()
        self._appenders.clear()
        self.engine.dispose()

    def __enter__(self) -> BulkService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _never_picked_up(before: BulkStatus, after: BulkStatus) -> bool:
    """An abort frees the exclusive slot at once when no job has started the command: the job's
    first change (SCROLLING_RUNNING) precedes its first write, and it reads the state before
    each bucket."""
    return before.state in (None, State.UNKNOWN, State.SCHEDULED)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _terminal(status: BulkStatus) -> bool:
    return status.state is not None and status.state.terminal


def _state(value: State | str) -> State:
    try:
        return State(value)
    except ValueError:
        raise BulkParamsError(
            f"unknown state {value!r}; use one of {', '.join(s.value for s in State)}", "state"
        ) from None
