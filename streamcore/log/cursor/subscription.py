"""`SubscribedTailer`: a cursor tailer whose partitions come and go with its consumer group's
membership, the protocol of `streamcore.log.cursor.membership` (claims, handover on revoke,
expiry, reset), applied between batches on the tailer's own thread."""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from streamcore.log.api import RebalanceListener
from streamcore.log.cursor.membership import GroupMember, owned_by
from streamcore.log.cursor.tailer import Cursor, CursorTailer, PositionStore
from streamcore.log.values import LogOffset, LogPartition, LogRecord, check_start

if TYPE_CHECKING:
    from streamcore.codecs import Codec

__all__ = ["SubscribedTailer"]

logger = logging.getLogger(__name__)


class SubscribedTailer(CursorTailer):
    """A CursorTailer whose partitions come and go with its group's membership
    (`streamcore.log.cursor.membership`)."""

    def __init__(
        self,
        group: str,
        member: GroupMember,
        partitions: Sequence[LogPartition],
        open_cursor: Callable[[LogPartition], Cursor],
        positions: Callable[[LogPartition], PositionStore],
        codec: Codec[Any] | None = None,
        listener: RebalanceListener | None = None,
        on_close: Callable[[CursorTailer], None] | None = None,
        start: str = "earliest",
    ) -> None:
        super().__init__(group, {}, positions, codec, on_close)
        self.start = check_start(start)
        self.listener = listener or RebalanceListener()
        self.member = member
        self._by_key = {str(p): p for p in partitions}
        self._order = {str(p): i for i, p in enumerate(partitions)}
        self.names = list(dict.fromkeys(p.name for p in partitions))  # the subscribed logs
        self._open_cursor = open_cursor
        member.start()
        # A tailer dropped without close() stops beating, so the others take its partitions.
        self._finalizer = weakref.finalize(self, member.stop)

    # -- assignment -----------------------------------------------------------------------------
    def _before_fill(self) -> None:
        self.member.polled = time.monotonic()  # also while read() waits for records
        if self._assignment_due():
            self._rebalance()

    def _assignment_due(self) -> bool:
        return self.member.due or self.member.stale()

    @property
    def rebalance_pending(self) -> bool:
        return self.member.due

    def _poll(self) -> None:
        """Every read is a poll (see max_poll_interval); partitions taken away are dropped
        before any more of their records is returned, even from a batch already fetched."""
        now = time.monotonic()
        self.member.polled = now
        if self.member.must_rebalance_now(now):
            self._check_open()
            self._rebalance()

    def read(self, timeout: float = 0.0) -> LogRecord[Any] | None:
        # `_poll` inlined: this is the per-record hot path.
        member = self.member
        member.polled = now = time.monotonic()
        if member.lost or member.evicted or now - member.last_ok > member.stale_after:
            self._check_open()
            self._rebalance()
        return CursorTailer.read(self, timeout)

    def read_batch(self, max_records: int, timeout: float = 0.0) -> list[LogRecord[Any]]:
        self._poll()
        return super().read_batch(max_records, timeout)

    def read_arrow(self, max_records: int = 65536, timeout: float = 0.0) -> Any:
        self._check_open()
        self._poll()
        if self._pending_i >= len(self._pending):
            self._before_fill()
        return super().read_arrow(max_records, timeout)

    def _keys(self, partitions: Sequence[LogPartition]) -> list[str]:
        return [str(p) for p in partitions]

    def _set_local(self) -> None:
        self.member.local = frozenset(self._keys(self._partitions))

    def _call(self, what: str, partitions: list[LogPartition]) -> None:
        if not partitions:
            return
        try:
            getattr(self.listener, what)(self, list(partitions))
        except Exception:  # the handover must go on: at-least-once holds either way
            logger.exception("%s listener of group %s failed", what, self.group)

    def _lose(self, state: dict[str, Any]) -> None:
        """Drop partitions the state says this member no longer owns (it was expired, left for
        not polling, or the state was reset): nothing of them is committed, another member may
        be reading them."""
        mine = owned_by(state, self.member.id)
        lost = [p for p in self._partitions if str(p) not in mine]
        if not lost:
            return
        logger.warning(
            "group %s: member %s lost %s (session expired, max_poll_interval exceeded or group "
            "state reset); dropping them without commit and rejoining",
            self.group,
            self.member.id,
            ", ".join(map(str, lost)),
        )
        self._unassign(lost)
        self._set_local()
        self._call("on_revoked", lost)

    def _revoke(self, partitions: list[LogPartition]) -> None:
        """Stop reading partitions this member gives up: listener, commit marks, unassign."""
        self._call("on_revoked", partitions)
        marks = self._marks()
        for partition in partitions:
            if partition in marks:
                self.commit_offset(partition, marks.pop(partition))
        self._unassign(partitions)
        self._set_local()

    def _rebalance(self) -> None:
        self.member.due = self.member.lost = False
        try:
            self._apply_assignment()
        except BaseException:
            self.member.due = True  # try again at the next read
            raise

    def _apply_assignment(self) -> None:
        member = self.member
        member.rejoin()
        state = member.refresh()
        self._lose(state)
        give = member.surplus(state)  # whole tasks: their partitions are revoked together
        if give:
            given = set(give)
            revoked = [p for p in self._partitions if str(p) in given]
            self._revoke(sorted(revoked, key=lambda p: self._order[str(p)]))
            state = member.release(give)
        state = member.claim()
        self._lose(state)
        new = [self._by_key[k] for k in member.partitions if k in owned_by(state, member.id)]
        new = [p for p in new if p not in self._cursors]
        if new:
            self._assign({p: self._open_cursor(p) for p in new})
            self._set_local()
            member.observe(state)
            self._call("on_assigned", new)
        else:
            member.observe(state)

    # -- standby replicas (streamcore.log.cursor.standby) ---------------------------------------
    def standby_tasks(self) -> list[int]:
        """The task numbers (partition numbers) this member should keep a warm copy of, by the
        newest group state (empty unless the group asks for standby replicas)."""
        member = self.member
        return sorted(
            self._by_key[member.tasks[i][0]].partition
            for i in member.standby_tasks(member.store.load())
        )

    def owned_tasks(self) -> set[int]:
        """The task numbers this member owns by the newest state it saw (read by its standby
        thread: a task just claimed is not dropped before the unit takes it over)."""
        owned = self.member.owned
        return {self._by_key[task[0]].partition for task in self.member.tasks if task[0] in owned}

    def set_warm(self, tasks: set[int]) -> None:
        """Report the task numbers whose copy is caught up (published at the next heartbeat);
        when an owner dies, the group leaves its tasks to the member holding them warm."""
        member = self.member
        member.warm = frozenset(
            i for i, task in enumerate(member.tasks) if self._by_key[task[0]].partition in tasks
        )

    # -- commits are fenced by ownership --------------------------------------------------------
    def _owns(self, partition: LogPartition) -> bool:
        if self.member.stale() and not self.member.evicted:  # paused: others may have taken over
            self.member.refresh()
        if str(partition) in self.member.owned:
            return True
        logger.warning(
            "group %s: not committing %s, which member %s no longer owns (it lost it)",
            self.group,
            partition,
            self.member.id,
        )
        return False

    def mark(self, record: LogRecord[Any] | LogOffset) -> None:
        if record.partition not in self._cursors:
            return  # revoked since it was read: its new owner reads it again from the commit
        super().mark(record)

    def commit_offset(self, partition: LogPartition, offset: int) -> None:
        self._check(partition)
        if self._owns(partition):
            super().commit_offset(partition, offset)

    def commit_partition(self, partition: LogPartition) -> LogOffset:
        self._settle()
        offset = self._read_pos[self._check(partition)]
        if self._owns(partition):
            self._positions(partition).commit(self.group, partition.partition, offset)
        return LogOffset(partition, offset)

    # -- closing --------------------------------------------------------------------------------
    def close(self) -> None:
        """Revoke every partition (listener, commit marks), deregister, close."""
        if self._closed:
            return
        self.member.stop()
        try:
            self._lose(self.member.store.load())
            self._revoke(list(self._partitions))
            self.member.leave()
        except Exception:
            logger.exception(
                "group %s: member %s could not leave cleanly", self.group, self.member.id
            )
        self._finalizer.detach()
        super().close()

    def __repr__(self) -> str:
        return (
            f"SubscribedTailer(group={self.group!r}, member={self.member.id!r}, "
            f"assignments=[{', '.join(map(str, self._partitions))}])"
        )
