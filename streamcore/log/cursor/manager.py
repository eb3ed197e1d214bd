"""`CursorLogManager`: what the cursor backends (local and memory) do the same way.

A cursor backend stores each partition where a cursor can read it (`streamcore.log.cursor.tailer`)
and keeps committed positions and group states itself, so one template serves both: the create
checks, `tailer()` (a `CursorTailer` over one cursor per partition), `subscribe()` (a
`SubscribedTailer` whose group state the backend stores), `group_members`, the committed
positions, and closing. A backend gives the storage through a few methods:

- `_default_partitions()`, `_prepare_create(name, partitions, options)` (check the options, before
  the lock) and `_create(name, partitions, prepared)` (under the lock, the log being absent);
- `_open_cursor(partition)`, `_positions(name)` (a `PositionStore`), `_group_store(group, logs,
  history)` (a `GroupStore`) and `_group_states(group)` (every state of `group`, read only);
- `_close_backend()` for what it holds besides tailers.
"""

from __future__ import annotations

import abc
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from streamcore.errors import InvalidArgumentError, LogClosedError, LogExistsError
from streamcore.log.api import LogManager, RebalanceListener
from streamcore.log.cursor.membership import (
    GroupMember,
    GroupStore,
    live_members,
)
from streamcore.log.cursor.subscription import SubscribedTailer
from streamcore.log.cursor.tailer import Cursor, CursorTailer, PositionStore
from streamcore.log.registry import check_partitions
from streamcore.log.tuning import GroupTuning
from streamcore.log.values import LiveMember, LogPartition, check_start
from streamcore.names import Name

__all__ = ["CursorLogManager"]


class CursorLogManager(LogManager):
    """The template of the local and memory managers (see the module docstring). `kind` names
    the backend in messages."""

    kind = "cursor"

    def __init__(self, tuning: GroupTuning | None = None) -> None:
        self._tailers: dict[tuple[str, LogPartition], CursorTailer] = {}
        self._subscriptions: weakref.WeakSet[SubscribedTailer] = weakref.WeakSet()
        # `[groups]` (streamcore.log.tuning); the first three are subscribe()'s defaults, which
        # tests shorten on the manager.
        self.tuning = tuning or GroupTuning()
        self.heartbeat_interval = self.tuning.heartbeat_interval
        self.session_timeout = self.tuning.session_timeout
        self.max_poll_interval = self.tuning.max_poll_interval
        self._lock = threading.RLock()
        self._closed = False

    # -- what a backend gives ---------------------------------------------------------------
    @abc.abstractmethod
    def _default_partitions(self) -> int:
        """The partition count of a log created without one."""

    def _prepare_create(self, name: Name, partitions: int, options: dict[str, Any]) -> Any:
        """Check the `create` options (before the lock: nothing is written); what `_create`
        needs."""
        return None

    @abc.abstractmethod
    def _create(self, name: Name, partitions: int, prepared: Any) -> bool:
        """Create log `name`, which did not exist (under the manager's lock); False if another
        process sharing the storage created it first."""

    @abc.abstractmethod
    def _open_cursor(self, partition: LogPartition) -> Cursor:
        """A new cursor on `partition`, at its start."""

    @abc.abstractmethod
    def _positions(self, name: Name) -> PositionStore:
        """The committed positions of log `name`; `LogNotFoundError` if it does not exist."""

    @abc.abstractmethod
    def _group_store(self, group: str, logs: list[Name], history: Callable[[], bool]) -> GroupStore:
        """The state of `group` subscribed to `logs`; `history()` says whether the group has
        committed positions on them (a missing state then means a deleted one)."""

    @abc.abstractmethod
    def _group_states(self, group: str) -> list[dict[str, Any]]:
        """The newest state of each subscription of `group` (read only)."""

    def _close_backend(self) -> None:
        """Release what the backend holds besides tailers (under the lock, once)."""

    # -- logs -------------------------------------------------------------------------------
    def create(self, name: str | Name, partitions: int | None = None, **options: Any) -> bool:
        """Create the log if missing; True if it was created, False if it existed (with as
        many partitions, if a count is given: `LogExistsError` otherwise)."""
        name = Name.of(name)
        explicit = partitions is not None
        count = self._default_partitions() if partitions is None else int(partitions)
        check_partitions(name, count)
        prepared = self._prepare_create(name, count, options)
        with self._lock:
            if not self.exists(name) and self._create(name, count, prepared):
                return True
            existing = self.size(name)
            if explicit and existing != count:
                raise LogExistsError(
                    f"log {name} exists with {existing} partitions, not {count}; delete it "
                    "first or use its current size"
                )
            return False

    def committed(self, name: str | Name, group: str) -> list[int | None]:
        name = Name.of(name)
        store = self._positions(name)
        return [store.committed(group, p) for p in range(self.size(name))]

    def commit_position(self, partition: LogPartition, group: str, offset: int) -> None:
        """Set a group's committed position directly (`streamcore position`, the Delta sink)."""
        self._positions(partition.name).commit(group, partition.partition, offset)

    # -- tailers ----------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"the {self.kind} log manager is closed")

    def tailer(
        self,
        group: str,
        source: str | Name | LogPartition | Sequence[LogPartition],
        codec: Any = None,
    ) -> CursorTailer:
        partitions = self.resolve_partitions(source)
        with self._lock:
            self._check_open()
            self._ensure_no_live_tailer(self._tailers, group, partitions)
            cursors = {p: self._open_cursor(p) for p in partitions}
            stores = {name: self._positions(name) for name in {p.name for p in partitions}}
            tailer = CursorTailer(
                group, cursors, lambda p: stores[p.name], codec, on_close=self._tailer_closed
            )
            self._tune(tailer)
            for p in partitions:
                self._tailers[(group, p)] = tailer
        return tailer

    def subscribe(
        self,
        group: str,
        names: Sequence[str | Name],
        listener: RebalanceListener | None = None,
        codec: Any = None,
        *,
        heartbeat_interval: float | None = None,
        session_timeout: float | None = None,
        max_poll_interval: float | None = None,
        standby_replicas: int = 0,
        location: str | None = None,
        start: str = "earliest",
    ) -> SubscribedTailer:
        """Join `group` as a member sharing the partitions of `names` with the other members
        (of this manager's logs, in this process and, for the local log, in others: see
        `streamcore.log.cursor.membership`). Partitions are assigned by the first `read()`, by
        task: partition p of every log in `names` goes to the same member, and moves with the
        others of its task.
        The heartbeat interval, session timeout and max poll interval default to the
        manager's `heartbeat_interval` (3 s), `session_timeout` (10 s) and `max_poll_interval`
        (300 s: a member that does not call `read()` for that long leaves the group).
        `standby_replicas` and `location` (where the member's state lives) place warm copies of
        the tasks and prefer them when an owner dies (`streamcore.log.cursor.standby`).
        `start` ("earliest" or "latest") is where the group reads a partition it has no
        committed position on; "latest" commits the partition's end when first assigned."""
        check_start(start)
        logs = list(dict.fromkeys(Name.of(n) for n in names))
        if not logs:
            raise InvalidArgumentError("subscribe needs at least one log name")
        partitions = [LogPartition(n, p) for n in logs for p in range(self.size(n))]
        tasks: dict[int, list[str]] = {}  # task p: partition p of every log (membership's doc)
        for partition in partitions:
            tasks.setdefault(partition.partition, []).append(str(partition))
        with self._lock:
            self._check_open()
            stores = {name: self._positions(name) for name in logs}

            def history() -> bool:  # committed positions: the group ran before
                return any(
                    stores[p.name].committed(group, p.partition) is not None for p in partitions
                )

            member = GroupMember(
                self._group_store(group, logs, history),
                [str(p) for p in partitions],
                tasks=[tasks[p] for p in sorted(tasks)],
                heartbeat_interval=heartbeat_interval or self.heartbeat_interval,
                session_timeout=session_timeout or self.session_timeout,
                max_poll_interval=max_poll_interval or self.max_poll_interval,
                standby_replicas=standby_replicas,
                location=location,
                tuning=self.tuning,
            )
            tailer = SubscribedTailer(
                group,
                member,
                partitions,
                self._open_cursor,
                lambda p: stores[p.name],
                codec,
                listener,
                start=start,
            )
            self._tune(tailer)
            self._subscriptions.add(tailer)
        return tailer

    def _tune(self, tailer: CursorTailer) -> None:
        tailer.poll_interval_min = self.tuning.poll_interval_min
        tailer.poll_interval_max = self.tuning.poll_interval_max

    def subscribe_with_standby(
        self,
        group: str,
        names: Sequence[str | Name],
        listener: RebalanceListener | None,
        *,
        standby_replicas: int,
        location: str,
        start: str = "earliest",
    ) -> SubscribedTailer:
        """`subscribe` with standby replicas (`streamcore.log.capabilities.StandbyGroups`)."""
        return self.subscribe(
            group,
            names,
            listener,
            standby_replicas=standby_replicas,
            location=location,
            start=start,
        )

    def group_members(self, group: str) -> list[LiveMember]:
        """Members of `group` whose heartbeat is within their session, over every state of the
        group (one per set of subscribed logs); read only."""
        now = time.time()
        found = {
            m.member_id: m for state in self._group_states(group) for m in live_members(state, now)
        }
        return [found[mid] for mid in sorted(found)]

    def _in_use(self, name: Name) -> bool:
        """Whether a tailer of this manager reads log `name`."""
        busy = any(k[1].name == name for k in self._tailers)
        return busy or any(not t.closed and name in t.names for t in self._subscriptions)

    def _tailer_closed(self, tailer: CursorTailer) -> None:
        with self._lock:
            self._forget_tailer(self._tailers, tailer)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            for tailer in list(self._tailers.values()) + list(self._subscriptions):
                tailer.close()
            self._close_backend()
            self._closed = True
