"""The log API every backend implements: the contracts `LogManager`, `LogAppender`, `LogTailer`
and `RebalanceListener` (the value objects they take and return are in `streamcore.log.values`).

Contracts (Nuxeo Stream semantics, see docs/log.md):
- A log is an array of partitions; each partition is an append-only sequence of records with
  contiguous integer offsets starting at 0.
- The **committed offset** of a (group, partition) is the offset of the *next* record to process.
- Delivery is at-least-once: a consumer that crashes after processing and before `commit` gets the
  uncommitted records again.
- `append(key, message)` puts the record in partition `partition_for_key(key, size)`; records of one
  key therefore keep their order.
- An appender is thread-safe. A tailer is not: use one per thread.
- At most one live tailer per (group, partition) in a process (`TailerConflictError` otherwise).
- Without a codec, messages are `bytes`; with a codec, the appender encodes and the tailer decodes.
- A tailer never moves past a record it did not return: one it cannot decode raises
  `UndecodableRecordError` with the tailer standing at it, until `skip_one()`.
"""

from __future__ import annotations

import abc
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from streamcore.errors import PartitionNotFoundError, TailerConflictError, UnsupportedOperationError
from streamcore.log.values import (
    Latency,
    LiveMember,
    LogDescription,
    LogLag,
    LogOffset,
    LogPartition,
    LogRecord,
)
from streamcore.names import Name

if TYPE_CHECKING:
    from streamcore.codecs import Codec

__all__ = ["LogAppender", "LogManager", "LogTailer", "RebalanceListener"]

M = TypeVar("M")


class LogAppender(abc.ABC, Generic[M]):
    """Appends messages to a log. Thread-safe."""

    name: Name
    codec: Codec[M] | None

    @property
    @abc.abstractmethod
    def size(self) -> int:
        """Number of partitions."""

    @abc.abstractmethod
    def append(self, key: str, message: M) -> LogOffset:
        """Append to the partition of `key`; returns where the record went."""

    @abc.abstractmethod
    def append_to(self, partition: int, key: str, message: M) -> LogOffset:
        """Append to an explicit partition."""

    @abc.abstractmethod
    def append_batch(
        self,
        items: Sequence[tuple[str, M]],
        *,
        partition: int | None = None,
        timestamps: Sequence[int] | None = None,
    ) -> Sequence[LogOffset]:
        """Append many (key, message) pairs: each lands in its key's partition unless
        `partition` is given. `timestamps` (ms, one per item) keep original append times, e.g.
        when copying a log; by default records get the current time.

        All or nothing against bad input: every key, value and timestamp is checked (on the local
        log also every partition's batch encoded and every writer lock taken) before anything is
        written, so such an error leaves the log as it was. Not atomic across partitions against
        a failing write: a `LogWriteError` (local: a full disk) or a broker error (Kafka) on one
        partition leaves what was already written to the others."""

    @abc.abstractmethod
    def wait_for(self, offset: LogOffset, group: str, timeout: float) -> bool:
        """True once `group` has committed past `offset` (within `timeout` seconds)."""

    @abc.abstractmethod
    def close(self) -> None: ...

    @property
    @abc.abstractmethod
    def closed(self) -> bool: ...

    def __enter__(self) -> LogAppender[M]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RebalanceListener:
    """Callbacks of a subscribed tailer when its group's members change (Kafka's
    `ConsumerRebalanceListener`). Both run inside `read()`, on the tailer's thread.

    `on_revoked` runs before the tailer gives partitions up: commit what you processed there (in
    mark mode the marked positions are committed right after it). Another member starts reading
    a partition only after the member that held it released it. `on_assigned` runs once the new
    partitions are readable from their committed positions."""

    def on_revoked(self, tailer: LogTailer[Any], partitions: list[LogPartition]) -> None:
        """Partitions about to be taken away."""

    def on_assigned(self, tailer: LogTailer[Any], partitions: list[LogPartition]) -> None:
        """Partitions just given to this tailer."""


class LogTailer(abc.ABC, Generic[M]):
    """Reads the partitions assigned to it for a consumer group. Not thread-safe.

    Two ways to commit, usable together: explicit `commit()` of the position after the last record
    read, or **mark mode** (Nuclio's Kafka model): `mark(record)` once a record is processed, and
    the marked positions are committed every `commit_interval` seconds (checked on each `read` and
    `mark`), on `commit_marked()`, on revoke and on `close()`. A crash then re-delivers at most the
    records marked or read since the last periodic commit; none is skipped."""

    group: str
    codec: Codec[M] | None
    commit_interval: float = 1.0
    _marked: dict[LogPartition, int]  # marks not committed yet
    _mark_high: dict[LogPartition, int]  # highest mark per partition, committed or not
    _last_marked_commit: float = 0.0

    @abc.abstractmethod
    def commit_offset(self, partition: LogPartition, offset: int) -> None:
        """Commit an explicit position (the offset of the next record to process)."""

    def _marks(self) -> dict[LogPartition, int]:
        try:
            return self._marked
        except AttributeError:
            self._marked = {}
            return self._marked

    def _mark_highs(self) -> dict[LogPartition, int]:
        try:
            return self._mark_high
        except AttributeError:
            self._mark_high = {}
            return self._mark_high

    def mark(self, record: LogRecord[Any] | LogOffset) -> None:
        """Mark a record as processed; its successor becomes the partition's marked position.
        Marks only move forward, also across commits: marking an older record is a no-op."""
        high = self._mark_highs()
        offset = record.offset + 1
        if offset > high.get(record.partition, -1):
            high[record.partition] = offset
            self._marks()[record.partition] = offset
        self.commit_marked_if_due()

    def commit_marked(self) -> dict[LogPartition, int]:
        """Commit every marked position now; returns what was committed."""
        marks = self._marks()
        committed = dict(marks)
        for partition, offset in committed.items():
            self.commit_offset(partition, offset)
        marks.clear()
        self._last_marked_commit = time.monotonic()
        return committed

    def commit_marked_if_due(self) -> None:
        """Commit the marked positions if `commit_interval` passed since the last such commit
        (or, before the first one, since the first mark)."""
        if not self._marks():
            return
        if not self._last_marked_commit:
            self._last_marked_commit = time.monotonic()
        elif time.monotonic() - self._last_marked_commit >= self.commit_interval:
            self.commit_marked()

    def _drop_marks(self, partitions: Iterable[LogPartition]) -> None:
        marks, high = self._marks(), self._mark_highs()
        for partition in partitions:
            marks.pop(partition, None)
            high.pop(partition, None)

    @property
    @abc.abstractmethod
    def assignments(self) -> list[LogPartition]: ...

    @property
    def rebalance_pending(self) -> bool:
        """True when the group has changed the assignment and this tailer applies it at its
        next read: long work in an assignment callback (a state restore) may stop early and let
        that read run. False for a static assignment, and on Kafka, whose rebalance runs inside
        the consumer's poll (the group waits for the callback, up to `max.poll.interval.ms`)."""
        return False

    @abc.abstractmethod
    def read(self, timeout: float = 0.0) -> LogRecord[M] | None:
        """The next record of any assigned partition, or None if none arrives within `timeout` s.

        A record that cannot be returned (the codec rejects its value, its key is not UTF-8)
        raises `UndecodableRecordError`, and the tailer stays at it: every later read raises the
        same until `skip_one()` or a seek moves past it."""

    def read_batch(self, max_records: int, timeout: float = 0.0) -> list[LogRecord[M]]:
        """Up to `max_records` records; waits at most `timeout` s for the first one.

        The batch stops before a record that cannot be returned: the records before it come
        back, and the next call raises `UndecodableRecordError` for it (see `read`)."""
        first = self.read(timeout)
        if first is None:
            return []
        out = [first]
        while len(out) < max_records:
            rec = self.read(0)
            if rec is None:
                break
            out.append(rec)
        return out

    def __iter__(self) -> Iterator[LogRecord[M]]:
        """Records until the assigned partitions are exhausted (does not wait)."""
        while (rec := self.read(0)) is not None:
            yield rec

    @abc.abstractmethod
    def read_arrow(self, max_records: int = 65536, timeout: float = 0.0) -> Any:
        """Up to `max_records` raw records of one partition as a pyarrow RecordBatch with columns
        partition, offset, timestamp (ms), key, value (no codec applied), or None if none arrives
        within `timeout` s. Moves the read position like `read`."""

    @abc.abstractmethod
    def skip_one(self) -> LogOffset:
        """Move past the record the last `UndecodableRecordError` was about, if the tailer still
        stands at it, and return its offset; `LogError` otherwise. Committing afterwards
        commits past it: save `error.key` / `error.value` first if it must not be lost."""

    @abc.abstractmethod
    def commit(self) -> dict[LogPartition, int]:
        """Commit, for every assigned partition, the position after the last record read."""

    @abc.abstractmethod
    def commit_partition(self, partition: LogPartition) -> LogOffset:
        """Commit one partition; returns the committed (next-to-read) offset."""

    @abc.abstractmethod
    def seek(self, offset: LogOffset) -> None:
        """Next read of that partition returns the record at `offset`."""

    @abc.abstractmethod
    def to_start(self) -> None: ...

    @abc.abstractmethod
    def to_end(self) -> None: ...

    @abc.abstractmethod
    def to_last_committed(self) -> None: ...

    @abc.abstractmethod
    def position(self, partition: LogPartition) -> int:
        """The offset the next read of `partition` returns."""

    @abc.abstractmethod
    def offset_for_timestamp(self, partition: LogPartition, timestamp_ms: int) -> LogOffset | None:
        """Earliest offset whose append timestamp is >= `timestamp_ms`; None if there is none."""

    @abc.abstractmethod
    def reset(self, partition: LogPartition | None = None) -> None:
        """Move the committed position (of one or all partitions) back to the beginning."""

    @abc.abstractmethod
    def close(self) -> None: ...

    @property
    @abc.abstractmethod
    def closed(self) -> bool: ...

    def __enter__(self) -> LogTailer[M]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LogManager(abc.ABC):
    """Creates, lists and deletes logs, and hands out appenders and tailers."""

    @abc.abstractmethod
    def exists(self, name: str | Name) -> bool: ...

    @abc.abstractmethod
    def create(self, name: str | Name, partitions: int | None = None, **options: Any) -> bool:
        """Create the log if missing; True if it was created, False if it existed."""

    @abc.abstractmethod
    def size(self, name: str | Name) -> int:
        """Number of partitions."""

    @abc.abstractmethod
    def incarnation(self, name: str | Name) -> str | None:
        """An opaque id of this incarnation of the log: the same for as long as the log exists
        (across managers and processes), a new one once it is deleted and created again under
        the same name. Offsets and positions cannot tell a recreated log from the old one; this
        can. Kafka: the topic id; local and memory logs: a random id made by `create`. None when
        the backend cannot tell (a local log created before its metadata kept one): treat it as
        unknown, not as a match. Raises `LogNotFoundError` if the log does not exist."""

    @abc.abstractmethod
    def delete(self, name: str | Name) -> bool: ...

    @abc.abstractmethod
    def list_logs(self) -> list[Name]: ...

    @abc.abstractmethod
    def list_groups(self, name: str | Name) -> list[str]: ...

    @abc.abstractmethod
    def appender(self, name: str | Name, codec: Codec[Any] | None = None) -> LogAppender[Any]: ...

    @abc.abstractmethod
    def tailer(
        self,
        group: str,
        source: str | Name | LogPartition | Sequence[LogPartition],
        codec: Codec[Any] | None = None,
    ) -> LogTailer[Any]:
        """A tailer with a static assignment: the given partitions (all of a log for a name)."""

    def resolve_partitions(
        self, source: str | Name | LogPartition | Sequence[LogPartition]
    ) -> list[LogPartition]:
        """The partitions a tailer `source` names (every partition for a log name), checked to
        exist."""
        if isinstance(source, LogPartition):
            partitions = [source]
        elif isinstance(source, str | Name):
            name = Name.of(source)
            partitions = [LogPartition(name, p) for p in range(self.size(name))]
        else:
            partitions = list(source)
        sizes: dict[Name, int] = {}
        for p in partitions:
            if p.name not in sizes:
                sizes[p.name] = self.size(p.name)
            if not 0 <= p.partition < sizes[p.name]:
                raise PartitionNotFoundError(f"{p.name} has no partition {p.partition}")
        return partitions

    @staticmethod
    def _ensure_no_live_tailer(
        tailers: dict[tuple[str, LogPartition], Any], group: str, partitions: list[LogPartition]
    ) -> None:
        """One live tailer per (group, partition) in a process (call under the manager's lock)."""
        for p in partitions:
            if (group, p) in tailers:
                raise TailerConflictError(
                    f"a tailer of group {group!r} already reads {p} in this process; close it "
                    "first (one live tailer per group and partition)"
                )

    @staticmethod
    def _forget_tailer(tailers: dict[tuple[str, LogPartition], Any], tailer: Any) -> None:
        """Drop a closed tailer from the registry (call under the manager's lock)."""
        for key in [k for k, v in tailers.items() if v is tailer]:
            del tailers[key]

    def subscribe(
        self,
        group: str,
        names: Sequence[str | Name],
        listener: RebalanceListener | None = None,
        codec: Codec[Any] | None = None,
        *,
        start: str = "earliest",
    ) -> LogTailer[Any]:
        """A tailer whose partitions are shared out among every subscribed member of `group`
        (in this and other processes) and move when members join or leave. Don't mix with
        `tailer()` for the same group. `start` is where the group reads a partition it has no
        committed position on: "earliest" (its first retained record) or "latest" (its end
        when first assigned, committed at once, so a rewind or the next owner resumes there:
        records appended before are never read by the group)."""
        raise UnsupportedOperationError(f"{type(self).__name__} does not support subscribe yet")

    @abc.abstractmethod
    def group_members(self, group: str) -> list[LiveMember]:
        """The live members of consumer group `group` (subscribed consumers with a live
        session), sorted by member id; empty when none. Static-assignment tailers (`tailer(...)`)
        are not members: they have no session, so a group read only that way has none.

        A tool that must not move a group's positions under its consumers checks this first.
        What "live" means per backend:

        - local: members of every group state file of `group` (one per set of subscribed logs,
          from any process sharing the log folder) whose last heartbeat is within their session
          timeout, the same rule that expires members. Read only: nothing is written or tidied,
          so a member that died but was not expired by the others yet is not listed. `logs` are
          the logs of its subscription, `host` its host name.
        - memory: the same over the states of this manager's subscriptions.
        - kafka: the broker's view (`describe_consumer_groups`) of a group that is Stable or
          rebalancing; an Empty, Dead or unknown group has none. A member stays listed until the
          broker ends its session (`session.timeout.ms`) or it leaves (`close()`). `host` is the
          client address as the broker sees it, `logs` the logs of its current assignment
          (topics of this manager's prefix; empty during a rebalance)."""

    @abc.abstractmethod
    def end_offsets(self, name: str | Name) -> list[int]:
        """Per partition, the offset the next appended record will get."""

    @abc.abstractmethod
    def start_offsets(self, name: str | Name) -> list[int]:
        """Per partition, the oldest offset still retained."""

    @abc.abstractmethod
    def committed(self, name: str | Name, group: str) -> list[int | None]:
        """Per partition, the committed offset of `group` (None = never committed)."""

    def lag_per_partition(self, name: str | Name, group: str) -> list[LogLag]:
        starts = self.start_offsets(name)
        ends = self.end_offsets(name)
        out = []
        for start, end, pos in zip(starts, ends, self.committed(name, group), strict=True):
            if pos is None:
                pos = start
            lost = max(0, start - pos)
            out.append(LogLag.of(max(pos, start), end, lost))
        return out

    def lag(self, name: str | Name, group: str) -> LogLag:
        return LogLag.aggregate(self.lag_per_partition(name, group))

    @abc.abstractmethod
    def commit_position(self, partition: LogPartition, group: str, offset: int) -> None:
        """Set `group`'s committed position on `partition` to `offset` (the next record to
        process) without a tailer. Kafka: the group must have no live member."""

    @abc.abstractmethod
    def record_at(self, partition: LogPartition, offset: int) -> tuple[str, bytes, int] | None:
        """(key, raw bytes, timestamp) of one record, or None if not retained."""

    @abc.abstractmethod
    def describe(self, name: str | Name) -> LogDescription:
        """How another process opens log `name` (a `LogDescription` of this backend); raises
        `LogNotFoundError` if it does not exist, `ConfigError` if the backend cannot be opened
        from elsewhere (memory)."""

    def latency_per_partition(
        self,
        name: str | Name,
        group: str,
        codec: Codec[Any] | None = None,
        now_ms: int | None = None,
    ) -> list[Latency]:
        """Latency per partition. With a Record codec the timestamp is the record's watermark,
        else the append timestamp."""
        import time

        name = Name.of(name)
        now = now_ms if now_ms is not None else time.time_ns() // 1_000_000
        out = []
        for p, lag in enumerate(self.lag_per_partition(name, group)):
            lower, key = 0, None
            if lag.pos > 0:
                found = self.record_at(LogPartition(name, p), lag.pos - 1)
                if found is not None:
                    key, raw, lower = found
                    if codec is not None:
                        watermark = getattr(codec.decode(raw), "watermark", None)
                        if watermark:
                            lower = watermark >> 17
            out.append(Latency(lower, now, lag, key))
        return out

    def latency(self, name: str | Name, group: str, codec: Codec[Any] | None = None) -> Latency:
        return Latency.aggregate(self.latency_per_partition(name, group, codec))

    @abc.abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> LogManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
