"""`KafkaTailer`: a confluent-kafka Consumer behind the LogTailer API.

Kept whole (over 600 lines): it is one class, one state machine over one consumer (the
positions, the fetched buffer, the records put back and the rebalance callbacks that change them
all run on the tailer's thread), and its parts read and write the same fields; split by method
group, every module would reach into the others' state. What is not that state already lives
elsewhere: names and offsets in `client.py`, the undecodable-record errors in
`streamcore.log.cursor.tailer`.

Positions are tracked here, per partition, as the offset after the last record `read()` returned
(what `commit()` commits), so `position()` answers without the broker and a record fetched before
a seek is never returned after it; once every fetched record is taken, they move up to the
consumer's position, which librdkafka moves past transaction markers and the aborted records
read_committed skips (`_past_markers`).

librdkafka fetches ahead in the background; `read()` takes one polled record plus whatever else
is already fetched, and hands them out one by one. `read_arrow()` takes them in bulk instead
(`_take_many`: the same rules, with the positions moved once per run of records of one partition
and the columns built without Python per record), in consumes of 1,000 records turned into lists
at once; `read_columns()` hands those lists over without building Arrow
arrays (the restore's read: `streamcore.log.capabilities.ColumnReader`), and `read_batch()`
without a codec (the stream processor's read) makes them LogRecords in bulk.

`read(0)` returns None only when the broker says no record is waiting at the tailer's positions
(one ListOffsets request when the fetched queue is empty): a record appended before the call is
returned even if its fetch takes a moment, like on the local log. `read(timeout > 0)` trusts the
watermarks of the last fetch instead (no request per idle read of a polling loop), and waits on
(up to the manager's timeout) only when they show records not fetched yet.

A seek past the end positions the consumer at the end and drops the records below the target as
they come (a fetch past the end would make Kafka reset the partition).

A record that cannot become a `LogRecord` (a key that is not UTF-8 from a foreign producer, a value
the codec rejects) is put back: the tailer stays at it and raises `UndecodableRecordError` for it,
after returning the records before it, until `skip_one()`.
"""

from __future__ import annotations

import logging
import operator
import time
from bisect import bisect_left
from collections.abc import Callable, Sequence
from itertools import groupby, islice
from typing import TYPE_CHECKING, Any, cast

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from streamcore.errors import (
    InvalidArgumentError,
    LogClosedError,
    LogError,
    LogNotFoundError,
    PartitionNotFoundError,
    UndecodableRecordError,
)
from streamcore.log.api import LogTailer, RebalanceListener
from streamcore.log.capabilities import RawColumns
from streamcore.log.cursor.tailer import NOTHING_TO_SKIP, key_error, value_error
from streamcore.log.values import LogOffset, LogPartition, LogRecord
from streamcore.names import Name

if TYPE_CHECKING:
    from streamcore.codecs import Codec
    from streamcore.log.kafka.client import KafkaClients

__all__ = ["KafkaTailer", "copartitioned"]

logger = logging.getLogger(__name__)
_BATCH = 1000
# Records one consume of a bulk read takes at most. Each becomes a `Message`, a Python object
# the garbage collector tracks: taken 500 at a time and turned into lists of bytes at once, they
# die before the collector's first generation fills (700 objects by default), so it hardly runs
# (a 1M-key restore: 0.15 s of collections with consumes of 1,000, none with 500), and while they
# are in the CPU's cache. One consume of 65,536 read 1M records at 400k-700k/s here, consumes of
# 500-1,000 at 0.9-1.3M/s.
_CHUNK = 500
# Message's accessors, for `map` over fetched records: a record's (not an error's) topic,
# partition and offset are never None, though the stubs say they may be.
_topic = cast("Callable[[Message], str]", Message.topic)
_partition = cast("Callable[[Message], int]", Message.partition)
_offset = cast("Callable[[Message], int]", Message.offset)
# None for a null value: `_read_columns` replaces those with b"" once the batch is taken.
_value = cast("Callable[[Message], bytes]", Message.value)
_second = operator.itemgetter(1)  # of Message.timestamp(): (type, milliseconds)
_text = cast("Callable[[bytes], str]", bytes.decode)  # of keys `_take_many` checked as UTF-8
_SLICE = 0.05
_IGNORED = {
    KafkaError._PARTITION_EOF,
    KafkaError._TRANSPORT,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError._RESOLVE,
    KafkaError._TIMED_OUT,
}


def _utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def copartitioned(conf: dict[str, Any], group: str) -> dict[str, Any]:
    """The consumer settings of a member subscribed to several topics: the `range` assignor,
    which gives partition p of every topic to the same member when the topics have as many
    partitions and every member subscribes to all of them (a task, as the local and memory
    logs assign them: `streamcore.log.cursor.membership`). Quix Streams does the same for its
    joins. `roundrobin` and `cooperative-sticky` spread each topic on its own, so a configured
    one is replaced, with a warning. Range is eager: every rebalance revokes all partitions and
    may move tasks that stayed put on the cursor backends (not sticky). The consumer protocol
    (`group.protocol = consumer`) would need `group.remote.assignor`, but its consumers cannot
    be made today: the session settings this backend always sets are refused with it."""
    key = "partition.assignment.strategy"
    configured = str(conf.get(key, "range")).replace(" ", "").lower()
    if configured.split(",")[0] != "range":
        logger.warning(
            "group %s subscribes to several logs: %s=range instead of %r, so that partition p "
            "of every log goes to the same member (co-partitioned tasks)",
            group,
            key,
            conf[key],
        )
    return {**conf, key: "range"}


class KafkaTailer(LogTailer[Any]):
    """A static-assignment tailer (`partitions`) or a subscribed group member (`names`)."""

    def __init__(
        self,
        clients: KafkaClients,
        group: str,
        codec: Codec[Any] | None = None,
        *,
        partitions: Sequence[LogPartition] | None = None,
        names: Sequence[Name] | None = None,
        listener: RebalanceListener | None = None,
        on_close: Callable[[KafkaTailer], None] | None = None,
        start: str = "earliest",
    ) -> None:
        self.group = group
        self.start = start  # where a partition without a committed position is read from
        self.codec = codec
        self.listener = listener or RebalanceListener()
        self.group_id = clients.group_id(group)
        self._clients = clients
        self._on_close = on_close
        self._static = names is None
        self._assigned: list[LogPartition] = []
        self._by_key: dict[tuple[str, int], LogPartition] = {}
        self._pos: dict[LogPartition, int] = {}
        self._buffer: list[Any] = []
        self._buf_i = 0
        self._lost = 0
        self._closed = False
        self._closing = False  # inside close(): an assignment that arrives now is refused
        self._undecodable: LogOffset | None = None  # where the last UndecodableRecordError was
        self._failed: LogError | None = None  # raised by the next read (met after records taken)
        conf = self._clients.consumer_config(
            self.group_id, clients.client_id(group), static=names is None
        )
        if names is not None and len(set(names)) > 1:
            conf = copartitioned(conf, group)
        # librdkafka's default: a transaction's records are returned once it commits, an
        # aborted one's never; the end of a partition is its last stable offset.
        self.read_committed = str(conf.get("isolation.level", "read_committed")).lower() != (
            "read_uncommitted"
        )
        strategy = str(conf.get("partition.assignment.strategy", "")).lower()
        protocol = str(conf.get("group.protocol", "classic")).lower()
        self._incremental = "cooperative" in strategy or protocol == "consumer"
        with self._clients.errors(f"cannot create a consumer for group {group!r}"):
            self._consumer = Consumer(conf)
        try:
            if partitions is not None:
                self._start_static(list(partitions))
            else:
                self.names = list(names or ())
                self._consumer.subscribe(
                    [clients.topic(n) for n in self.names],
                    on_assign=self._on_assign,
                    on_revoke=self._on_revoke,
                    on_lost=self._on_lost,
                )
        except BaseException:
            self._consumer.close()
            raise

    def __repr__(self) -> str:
        kind = "static" if self._static else "subscribed"
        return (
            f"KafkaTailer(group={self.group!r}, {kind}, "
            f"assignments=[{', '.join(map(str, self._assigned))}])"
        )

    # -- helpers --------------------------------------------------------------------------------
    def _tp(self, partition: LogPartition, offset: int | None = None) -> TopicPartition:
        topic = self._clients.topic(partition.name)
        if offset is None:
            return TopicPartition(topic, partition.partition)
        return TopicPartition(topic, partition.partition, offset)

    def _log_partition(self, topic: str, partition: int) -> LogPartition:
        found = self._by_key.get((topic, partition))
        if found is not None:
            return found
        name = self._clients.name_of(topic)
        if name is None:
            raise LogError(f"topic {topic} is not a log of prefix {self._clients.topic_prefix!r}")
        return LogPartition(name, partition)

    def _check(self, partition: LogPartition) -> LogPartition:
        if partition not in self._pos:
            raise PartitionNotFoundError(
                f"partition {partition} is not assigned to this tailer (assigned: "
                f"{', '.join(map(str, self._assigned))})"
            )
        return partition

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"tailer of group {self.group!r} is closed; create a new one")

    def _committed(self, partitions: Sequence[LogPartition]) -> list[int | None]:
        if not partitions:
            return []
        tps = [self._tp(p) for p in partitions]
        timeout = self._clients.timeout
        got = self._clients.retry(
            f"cannot read the committed offsets of group {self.group!r}",
            lambda: self._consumer.committed(tps, timeout=timeout),
            tps[0].topic,
        )
        return [tp.offset if tp.offset >= 0 else None for tp in got]

    def _targets(
        self, targets: dict[LogPartition, int | None]
    ) -> tuple[dict[LogPartition, int], dict[LogPartition, int]]:
        """Positions (None = the first retained record) and where librdkafka should fetch from:
        clamped into [low, high] (records below a target past the end are dropped on read)."""
        parts = list(targets)
        marks = self._clients.watermarks([self._tp(p) for p in parts])
        positions, fetch = {}, {}
        for p, (low, high) in zip(parts, marks, strict=True):
            target = targets[p]
            position = low if target is None else target
            positions[p] = position
            fetch[p] = min(max(position, low), high)
        return positions, fetch

    def _start_static(self, partitions: list[LogPartition]) -> None:
        # Warm the consumer's metadata cache: else librdkafka looks the topics up on its next
        # one-second scan, and the first fetch waits for it.
        for topic in dict.fromkeys(self._clients.topic(p.name) for p in partitions):
            with self._clients.errors(f"cannot read the metadata of {topic}", topic):
                self._consumer.list_topics(topic, timeout=self._clients.timeout)
        committed = self._committed(partitions)
        positions, fetch = self._targets(dict(zip(partitions, committed, strict=True)))
        self._add(partitions, positions)
        with self._clients.errors(f"cannot assign partitions to group {self.group!r}"):
            self._consumer.assign([self._tp(p, fetch[p]) for p in partitions])

    def _add(self, partitions: list[LogPartition], positions: dict[LogPartition, int]) -> None:
        for p in partitions:
            if p not in self._pos:
                self._assigned.append(p)
            self._by_key[(self._clients.topic(p.name), p.partition)] = p
            self._pos[p] = positions[p]

    def _remove(self, partitions: list[LogPartition]) -> None:
        gone = set(partitions)
        self._assigned = [p for p in self._assigned if p not in gone]
        for p in gone:
            self._pos.pop(p, None)
            self._by_key.pop((self._clients.topic(p.name), p.partition), None)

    def _place(self, targets: dict[LogPartition, int | None]) -> None:
        """Move the read positions (None = first retained record) and the consumer with them."""
        if not targets:
            return
        positions, fetch = self._targets(targets)
        for p, position in positions.items():
            self._pos[p] = position
        tps = [self._tp(p, fetch[p]) for p in targets]
        try:
            for tp in tps:
                self._consumer.seek(tp)
        except KafkaException as exc:
            if not self._static:
                raise self._clients.translate(exc, f"cannot seek in group {self.group!r}") from exc
            # The fetcher of a just-assigned partition may not take a seek yet: re-assign it.
            with self._clients.errors(f"cannot seek in group {self.group!r}"):
                self._consumer.incremental_unassign([self._tp(p) for p in targets])
                self._consumer.incremental_assign(tps)

    # -- rebalance callbacks (run inside poll, on the tailer's thread) ---------------------------
    def _call_listener(self, what: str, partitions: list[LogPartition]) -> None:
        if not partitions:
            return
        try:
            getattr(self.listener, what)(self, list(partitions))
        except Exception:  # the handover must go on: at-least-once holds either way
            logger.exception("%s listener of group %s failed", what, self.group)

    def _on_assign(self, consumer: Any, tps: list[TopicPartition]) -> None:
        partitions = [self._log_partition(tp.topic, tp.partition) for tp in tps]
        if self._closing:
            # The group assigned while close() leaves it: take nothing (the handle is going,
            # its broker calls fail); the group gives the partitions to the others.
            partitions = []
        new: list[LogPartition] = []  # partitions the group never committed
        if partitions:
            committed = self._committed(partitions)
            new = [p for p, c in zip(partitions, committed, strict=True) if c is None]
            if new and self.start == "latest":
                highs = self._clients.watermarks([self._tp(p) for p in new])
                ends = {p: high for p, (_, high) in zip(new, highs, strict=True)}
                committed = [ends.get(p, c) for p, c in zip(partitions, committed, strict=True)]
            positions, fetch = self._targets(dict(zip(partitions, committed, strict=True)))
            self._add(partitions, positions)
            assigned = [self._tp(p, fetch[p]) for p in partitions]
        else:
            assigned = []
        if self._incremental:
            consumer.incremental_assign(assigned)
        else:
            consumer.assign(assigned)
        if new and self.start == "latest":
            # Committed at once: a rewind, or the next owner, resumes here, not at a later end.
            self._commit({p: positions[p] for p in new})
        self._call_listener("on_assigned", partitions)

    def _on_revoke(self, consumer: Any, tps: list[TopicPartition]) -> None:
        partitions = [self._log_partition(tp.topic, tp.partition) for tp in tps]
        partitions = [p for p in partitions if p in self._pos]
        try:
            self._call_listener("on_revoked", partitions)
            marks = self._marks()
            revoked = {p: marks[p] for p in partitions if p in marks}
            if revoked:
                try:
                    self._commit(revoked)
                except LogError:
                    logger.exception("group %s: marked positions not committed", self.group)
        finally:
            self._drop_marks(partitions)
            self._remove(partitions)
            self._purge(partitions)
            if self._incremental:
                consumer.incremental_unassign(tps)
            else:
                consumer.unassign()

    def _on_lost(self, consumer: Any, tps: list[TopicPartition]) -> None:
        partitions = [self._log_partition(tp.topic, tp.partition) for tp in tps]
        partitions = [p for p in partitions if p in self._pos]
        logger.warning(
            "group %s lost %s (session expired): dropped without commit",
            self.group,
            ", ".join(map(str, partitions)),
        )
        try:
            self._drop_marks(partitions)
            self._call_listener("on_revoked", partitions)
        finally:
            self._remove(partitions)
            self._purge(partitions)
            if self._incremental:
                consumer.incremental_unassign(tps)
            else:
                consumer.unassign()

    # -- reading --------------------------------------------------------------------------------
    @property
    def assignments(self) -> list[LogPartition]:
        return list(self._assigned)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def lost(self) -> int:
        """Records skipped because retention deleted them before this tailer read them."""
        return self._lost

    def _purge(self, partitions: Sequence[LogPartition]) -> None:
        """Forget fetched records of these partitions (after a seek or a revoke)."""
        if self._buf_i >= len(self._buffer):
            return
        keys = {(self._clients.topic(p.name), p.partition) for p in partitions}
        rest = self._buffer[self._buf_i :]
        self._buffer = [m for m in rest if (m.topic(), m.partition()) not in keys]
        self._buf_i = 0

    def _take(self) -> tuple[LogPartition, Any] | None:
        buffer, pos = self._buffer, self._pos
        while self._buf_i < len(buffer):
            msg = buffer[self._buf_i]
            self._buf_i += 1
            partition = self._by_key.get((msg.topic(), msg.partition()))
            if partition is None:
                continue  # revoked or unassigned since it was fetched
            offset = msg.offset()
            expected = pos[partition]
            if offset < expected:
                continue  # below a seek target
            if offset > expected:
                self._lost += self._lost_before(partition, expected, offset)
            pos[partition] = offset + 1
            return partition, msg
        return None

    def _lost_before(self, partition: LogPartition, expected: int, first: int) -> int:
        """How many of the offsets from `expected` to `first` (the next record) retention
        deleted: those below the log start of the last fetch. The others are offsets without a
        record (transaction markers, aborted records read_committed skips, compacted keys),
        not lost records."""
        low, _ = self._consumer.get_watermark_offsets(self._tp(partition), cached=True)
        if low < 0:  # not known yet: count the whole gap, as before a fetch told the start
            return first - expected
        return max(0, min(first, low) - expected)

    def _past_markers(self, parts: list[LogPartition]) -> None:
        """Move the read positions up to the consumer's where it is further: librdkafka moves
        its position past offsets that hold no record for this reader (transaction markers,
        and the aborted records read_committed skips), which "last record + 1" never passes,
        so a reader would wait for them forever. Called only when every fetched record has been
        taken (the consumer's position is then the tailer's plus such offsets). After a seek the
        consumer's position is unknown (negative) until the next fetch: nothing moves."""
        try:
            found = self._consumer.position([self._tp(p) for p in parts])
        except KafkaException:
            return  # a position is an optimisation here: the broker check still follows
        pos = self._pos
        for p, tp in zip(parts, found, strict=True):
            if tp.error is None and tp.offset > pos.get(p, tp.offset):
                pos[p] = tp.offset

    def _skip_stale(self) -> bool:
        """Drop the fetched records `_take` would skip; True if one to take is next."""
        buffer, pos, by_key = self._buffer, self._pos, self._by_key
        while self._buf_i < len(buffer):
            msg = buffer[self._buf_i]
            partition = by_key.get((msg.topic(), msg.partition()))
            if partition is not None and msg.offset() >= pos[partition]:
                return True
            self._buf_i += 1
        return False

    def _poll(self, timeout: float, batch: int = _BATCH) -> bool:
        """Poll librdkafka (one record, waiting up to `timeout`, then up to `batch` more that
        are already fetched); True if records were buffered."""
        consumer = self._consumer
        try:
            first = consumer.poll(max(0.0, timeout))
            if first is None:
                return False
            msgs = [first, *consumer.consume(batch, 0)]
        except KafkaException as exc:
            raise self._clients.translate(exc, f"cannot read group {self.group!r}") from exc
        return self._keep(msgs)

    def _more(self, batch: int) -> bool:
        """Buffer up to `batch` records librdkafka has already fetched, without waiting (and
        without asking the broker whether more are waiting); True if records were buffered."""
        try:
            msgs = self._consumer.consume(batch, 0)
        except KafkaException as exc:
            raise self._clients.translate(exc, f"cannot read group {self.group!r}") from exc
        return self._keep(msgs)

    def _keep(self, msgs: list[Any]) -> bool:
        """Buffer the records of a poll (the buffer was empty); raise on the errors that stop
        the reader, log the others. True if records were buffered."""
        if not msgs:
            return False
        errors = list(map(Message.error, msgs))
        if errors.count(None) == len(errors):  # the usual case, without a loop in Python
            self._buffer, self._buf_i = msgs, 0
            return True
        good = []
        for msg in msgs:
            error = msg.error()
            if error is None:
                good.append(msg)
                continue
            code = error.code()
            if code in _IGNORED:
                logger.debug("group %s: %s", self.group, error.str())
            elif code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.UNKNOWN_TOPIC_ID):
                raise LogNotFoundError(
                    f"group {self.group!r}: topic {msg.topic()} does not exist (any more) in "
                    f"Kafka at {self._clients.bootstrap}; create the log first"
                )
            elif error.fatal():
                raise self._clients.translate(error, f"group {self.group!r} cannot read")
            else:
                logger.warning("group %s: %s", self.group, error.str())
        if not good:
            return False
        self._buffer = good
        self._buf_i = 0
        return True

    def _waiting(self, exact: bool) -> bool:
        """Does the broker hold a record at or after a read position (fetched or not)? The
        positions first move past transaction markers (`_past_markers`). The watermarks of the
        last fetch answer when they show one (read uncommitted), or when not `exact` and they
        are known for every partition and show none; else one ListOffsets request asks the
        broker: for a read_committed reader the end is the last stable offset, which the
        cached high watermark may be past (an open transaction), so it always asks then."""
        parts = list(self._assigned)
        if not parts:
            return False
        self._past_markers(parts)
        known, behind = True, False
        for p in parts:
            low, high = self._consumer.get_watermark_offsets(self._tp(p), cached=True)
            if low < 0 or high < 0:
                known = False
            elif max(self._pos[p], low) < high:
                if not self.read_committed:
                    return True
                behind = True
        if known and not exact and not behind:
            return False
        tps = [self._tp(p) for p in parts]
        from confluent_kafka.admin import OffsetSpec

        highs = self._clients.list_offsets(tps, OffsetSpec.latest(), self.read_committed)
        candidates = [
            (p, tp, high)
            for p, tp, high in zip(parts, tps, highs, strict=True)
            if self._pos.get(p, high) < high
        ]
        if not candidates:
            return False
        lows = self._clients.list_offsets([c[1] for c in candidates], OffsetSpec.earliest())
        return any(
            max(self._pos.get(p, high), low) < high
            for (p, _, high), low in zip(candidates, lows, strict=True)
        )

    def _next(self, timeout: float) -> tuple[LogPartition, Any] | None:
        return self._take() if self._wait(timeout) else None

    def _wait(self, timeout: float, batch: int = _BATCH) -> bool:
        """Wait until a record to take is next in the buffer (polls fetch up to `batch` at a
        time); False on timeout, when the rules of the module doc say nothing is waiting."""
        self.commit_marked_if_due()  # mark mode: on every read, busy or idle
        if self._failed is not None:
            failed, self._failed = self._failed, None
            raise failed
        if self._skip_stale():
            return True
        deadline = time.monotonic() + timeout
        hard: float | None = None
        while True:
            remaining = deadline - time.monotonic()
            if self._poll(remaining, batch):
                if self._skip_stale():
                    return True
                continue
            now = time.monotonic()
            if now < deadline:
                continue
            if not self._waiting(exact=timeout <= 0):
                return False
            if hard is None:
                hard = now + self._clients.timeout
            elif now >= hard:
                logger.warning(
                    "group %s: records are waiting at %s but none was fetched in %g s",
                    self.group,
                    self._clients.bootstrap,
                    self._clients.timeout,
                )
                return False
            deadline = min(now + _SLICE, hard)

    def _put_back(self, partition: LogPartition, msg: Any) -> LogOffset:
        """Undo the `_take` that returned `msg`: the tailer stands at it again."""
        self._buf_i -= 1
        self._pos[partition] = msg.offset()
        self._undecodable = LogOffset(partition, msg.offset())
        return self._undecodable

    def _record(self, partition: LogPartition, msg: Any) -> LogRecord[Any]:
        """The record of a message just taken; put back if it cannot be one."""
        value = msg.value() or b""
        raw_key = msg.key()
        try:
            key = raw_key.decode("utf-8") if raw_key else ""
        except UnicodeDecodeError:
            at = self._put_back(partition, msg)
            raise key_error(at, raw_key, value, msg.timestamp()[1]) from None
        if self.codec is None:
            return LogRecord(value, partition, msg.offset(), msg.timestamp()[1], key)
        try:
            message = self.codec.decode(value)
        except Exception as exc:
            at = self._put_back(partition, msg)
            raise value_error(self.codec, at, key, value, msg.timestamp()[1], exc) from exc
        return LogRecord(message, partition, msg.offset(), msg.timestamp()[1], key)

    def read(self, timeout: float = 0.0) -> LogRecord[Any] | None:
        self._check_open()
        found = self._next(timeout)
        if found is None:
            return None
        return self._record(*found)

    def read_batch(self, max_records: int, timeout: float = 0.0) -> list[LogRecord[Any]]:
        self._check_open()
        if max_records < 1:
            raise InvalidArgumentError(f"max_records must be at least 1, got {max_records}")
        if self.codec is None:
            return self._read_raw_batch(max_records, timeout)
        found = self._next(timeout)
        out = []
        while found is not None:
            try:
                out.append(self._record(*found))
            except UndecodableRecordError:
                if not out:
                    raise
                break  # the next call raises it, at the record put back
            if len(out) >= max_records:
                break
            # What is fetched already is taken straight from the buffer (`_take` skips what
            # `_wait` would); `_next` only once it is used up. `_wait`'s other work cannot
            # change in between: the marks move between reads, `_failed` only in a consume.
            found = self._take() or self._next(0)
        return out

    def _read_raw_batch(self, max_records: int, timeout: float) -> list[LogRecord[Any]]:
        """`read_batch` without a codec (the stream processor's read): the same records,
        positions and errors as taking them one by one, taken from the fetched buffer in runs
        (`_take_many`) and made into LogRecords without a Python call per record in between."""
        if not self._wait(timeout):
            return []
        out: list[LogRecord[Any]] = []
        while True:
            columns = RawColumns()
            parts: list[LogPartition] = []
            taken, keys, bad = self._take_many(max_records - len(out), columns, parts)
            if taken:
                values = list(map(_value, taken))
                if None in values:  # Kafka's null value (a tombstone) reads as b""
                    values = [v or b"" for v in values]
                times = list(map(_second, map(Message.timestamp, taken)))
                del taken  # the messages: before the next consume makes more
                out += map(LogRecord, values, parts, columns.offsets, times, map(_text, keys))
            if bad is not None:
                if not out:
                    at, msg = bad
                    raise key_error(at, msg.key(), msg.value() or b"", msg.timestamp()[1])
                break  # the next call raises it, at the record put back
            if len(out) >= max_records:
                break
            # As `read_batch` with a codec: once the fetched records are used up, wait as
            # `read(0)` does for more (up to the batch).
            try:
                if not self._wait(0):
                    break
            except LogError as exc:  # the records taken go out first; the next read raises
                if not out:
                    raise
                self._failed = exc
                break
        return out

    def read_arrow(self, max_records: int = 65536, timeout: float = 0.0) -> Any:
        """Raw records (no codec) as a pyarrow RecordBatch with columns partition, offset,
        timestamp, key, value; None on timeout. After the first record (waited for as by
        `read`), it takes what librdkafka has already fetched, up to `max_records`, in bulk
        (`read_columns`), and builds the columns from those lists."""
        import pyarrow as pa

        columns = self._read_columns(max_records, timeout, True)
        if columns is None:
            return None
        return pa.RecordBatch.from_arrays(
            [
                pa.array(columns.partitions, pa.int32()),
                pa.array(columns.offsets, pa.int64()),
                pa.array(columns.timestamps, pa.int64()),
                # Checked UTF-8 by `_take_many`: a view, not a cast (a cast checks again).
                pa.array(columns.keys, pa.binary()).view(pa.string()),
                pa.array(columns.values, pa.binary()),
            ],
            names=["partition", "offset", "timestamp", "key", "value"],
        )

    def read_columns(self, max_records: int = 65536, timeout: float = 0.0) -> RawColumns | None:
        """`read_arrow`'s records as Python lists (`RawColumns`: partition numbers, offsets, keys
        as UTF-8-checked bytes, values; b"" for no key or value; no timestamps), for a reader
        that wants Python objects anyway (the restore): no Arrow arrays built to be converted
        back. The same records, positions and errors as `read_arrow`."""
        return self._read_columns(max_records, timeout, False)

    def _read_columns(
        self, max_records: int, timeout: float, timestamps: bool
    ) -> RawColumns | None:
        """Take up to `max_records` records: the first waited for as by `read`, then what
        librdkafka has already fetched, in consumes of `_CHUNK` records, each turned into the
        columns at once so its `Message` objects die young. A static tailer consumes more
        fetched records as long as the batch is not full; a subscribed member stops at the end of
        what its poll brought (a rebalance never lands in the middle of a batch)."""
        self._check_open()
        want = max(1, max_records)
        if not self._wait(timeout, min(want, _CHUNK)):
            return None
        out = RawColumns()
        while True:
            taken, keys, bad = self._take_many(want - len(out.offsets), out)
            out.keys += keys
            out.values += map(_value, taken)
            if timestamps:
                out.timestamps += map(_second, map(Message.timestamp, taken))
            del taken  # the messages: before the next consume makes more
            if bad is not None:
                if not out.offsets:
                    at, msg = bad
                    raise key_error(at, msg.key(), msg.value() or b"", msg.timestamp()[1])
                break  # the next call raises it, at the record put back
            if len(out.offsets) >= want:
                break
            if self._buf_i < len(self._buffer):
                continue
            if not self._static:  # a member's rebalance runs inside consume: not mid-batch
                break
            try:
                if not self._more(min(want - len(out.offsets), _CHUNK)):
                    break
            except LogError as exc:  # the records taken go out first; the next read raises
                self._failed = exc
                break
        if None in out.values:  # Kafka's null value (a tombstone)
            out.values[:] = [v or b"" for v in out.values]
        return out

    def _take_many(
        self, limit: int, out: RawColumns, parts: list[LogPartition] | None = None
    ) -> tuple[list[Any], list[bytes], tuple[LogOffset, Any] | None]:
        """Take up to `limit` records from the buffer as `limit` calls of `_take` would (the
        same records dropped, the same positions and `lost` after), with the positions moved
        once per run of records of one partition. Appends their partition numbers and offsets
        to `out` (and their LogPartitions to `parts`, if given); returns the messages, their
        keys (UTF-8 checked; b"" for no key), and None, or the record put back, as `_put_back`
        does, for a key that is not UTF-8 (`(where, message)`; the records before it are taken,
        the ones after it stay in the buffer)."""
        start = self._buf_i
        window = self._buffer[start : start + limit]
        if not window:
            return [], [], None
        offsets = list(map(_offset, window))
        pos, by_key = self._pos, self._by_key
        # Runs to take: (partition, index in the window of the first, count, position before).
        runs: list[tuple[LogPartition, int, int, int]] = []
        moved: dict[LogPartition, int] = {}  # positions after the runs so far
        groups: Any
        if self._static and len(by_key) == 1:
            # librdkafka delivers only assigned partitions, and a static tailer's assignment
            # never changes: every record is of its one partition (the restore's case).
            groups = [(next(iter(by_key)), window)]
        else:
            topics, numbers = list(map(_topic, window)), list(map(_partition, window))
            if numbers.count(numbers[0]) == len(window) and topics.count(topics[0]) == len(window):
                groups = [((topics[0], numbers[0]), window)]  # one partition: no tuples
            else:
                groups = groupby(zip(topics, numbers, strict=True))
        i = 0
        for tp, group in groups:
            n = len(list(group))
            partition = by_key.get(tp)
            if partition is None:  # revoked or unassigned since it was fetched
                i += n
                continue
            expected = moved.get(partition, pos[partition])
            run = offsets[i : i + n]
            if all(map(operator.lt, run, islice(run, 1, None))):  # as librdkafka delivers
                first = bisect_left(run, expected)  # those below are below a seek target
                if first < n:
                    runs.append((partition, i + first, n - first, expected))
                    expected = run[-1] + 1
            else:  # offsets out of order: one record at a time, as `_take`
                for j in range(i, i + n):
                    if offsets[j] >= expected:
                        runs.append((partition, j, 1, expected))
                        expected = offsets[j] + 1
            moved[partition] = expected
            i += n
        if len(runs) == 1 and runs[0][2] == len(window):  # the usual case: the whole window
            taken = window
        else:
            taken = [m for _, lo, n, _ in runs for m in window[lo : lo + n]]
        raw_keys = list(map(Message.key, taken))
        keys = cast("list[bytes]", raw_keys)
        if None in raw_keys:  # no key reads as ""
            keys = [k or b"" for k in raw_keys]
        cut = len(taken)
        if not b"".join(keys).isascii():  # ASCII is UTF-8; else check key by key
            cut = next((k for k, raw in enumerate(keys) if not _utf8(raw)), cut)
        bad: tuple[LogOffset, Any] | None = None
        self._buf_i = start + len(window)
        kept = 0
        for partition, lo, n, expected in runs:
            count = min(n, cut - kept)
            if count < n:  # the undecodable record: the tailer stands at it
                end = offsets[lo + count]
                self._buf_i = start + lo + count
                self._undecodable = LogOffset(partition, end)
                bad = (self._undecodable, window[lo + count])
            else:
                end = offsets[lo + n - 1] + 1
            if offsets[lo] > expected:
                self._lost += self._lost_before(partition, expected, offsets[lo])
            pos[partition] = end
            out.partitions += [partition.partition] * count
            if parts is not None:
                parts += [partition] * count
            out.offsets += offsets[lo : lo + count]
            kept += count
            if bad is not None:
                break
        return taken[:cut], keys[:cut], bad

    # -- positions and commits ------------------------------------------------------------------
    def position(self, partition: LogPartition) -> int:
        return self._pos[self._check(partition)]

    def positions(self) -> dict[LogPartition, int]:
        """The read position of every assigned partition: what `commit()` would commit, and
        what a transaction sends as the group's offsets (`KafkaTransactions.send_offsets`)."""
        self._check_open()
        return {p: self._pos[p] for p in self._assigned}

    def group_metadata(self) -> Any:
        """The consumer group metadata `send_offsets_to_transaction` needs: the group id and,
        for a subscribed member, its generation and member id, so that the group coordinator
        refuses the offsets of a member the group has moved on from (a zombie)."""
        self._check_open()
        return self._consumer.consumer_group_metadata()

    def skip_one(self) -> LogOffset:
        self._check_open()
        failed = self._undecodable
        if failed is None or self._pos.get(failed.partition) != failed.offset:
            raise LogError(NOTHING_TO_SKIP)
        self._undecodable = None
        # The message stays fetched: `_take` drops it as below the new position.
        self._pos[failed.partition] = failed.offset + 1
        return failed

    def seek(self, offset: LogOffset) -> None:
        self._check_open()
        partition = self._check(offset.partition)
        self._purge([partition])
        self._place({partition: offset.offset})

    def to_start(self) -> None:
        self._check_open()
        self._purge(self._assigned)
        self._place(dict.fromkeys(self._assigned))

    def to_end(self) -> None:
        self._check_open()
        parts = list(self._assigned)
        self._purge(parts)
        from confluent_kafka.admin import OffsetSpec

        tps = [self._tp(p) for p in parts]
        highs = self._clients.list_offsets(tps, OffsetSpec.latest(), self.read_committed)
        self._place(dict(zip(parts, highs, strict=True)))

    def to_last_committed(self) -> None:
        self._check_open()
        parts = list(self._assigned)
        self._purge(parts)
        self._place(dict(zip(parts, self._committed(parts), strict=True)))

    def _commit(self, offsets: dict[LogPartition, int]) -> None:
        if not offsets:
            return
        tps = [self._tp(p, o) for p, o in offsets.items()]

        def call() -> Any:
            return self._consumer.commit(offsets=tps, asynchronous=False)

        result = self._clients.retry(f"group {self.group!r} cannot commit", call, tps[0].topic)
        for tp in result or ():
            if tp.error is not None:
                raise self._clients.translate(tp.error, f"group {self.group!r} cannot commit")

    def commit_offset(self, partition: LogPartition, offset: int) -> None:
        self._check_open()
        self._commit({self._check(partition): offset})

    def commit_marked(self) -> dict[LogPartition, int]:
        """Commit every marked position now, in one request; returns what was committed."""
        marks = self._marks()
        committed = {p: o for p, o in marks.items() if p in self._pos}
        self._commit(committed)
        marks.clear()
        self._last_marked_commit = time.monotonic()
        return committed

    def mark(self, record: LogRecord[Any] | LogOffset) -> None:
        if record.partition not in self._pos:
            return  # revoked since it was read: its new owner reads it again from the commit
        super().mark(record)

    def commit_partition(self, partition: LogPartition) -> LogOffset:
        self._check_open()
        offset = self._pos[self._check(partition)]
        self._commit({partition: offset})
        return LogOffset(partition, offset)

    def commit(self) -> dict[LogPartition, int]:
        self._check_open()
        offsets = {p: self._pos[p] for p in self._assigned}
        self._commit(offsets)
        return offsets

    def reset(self, partition: LogPartition | None = None) -> None:
        self._check_open()
        targets = [self._check(partition)] if partition else list(self._assigned)
        self._purge(targets)
        self._place(dict.fromkeys(targets))
        self._commit({p: self._pos[p] for p in targets})

    def offset_for_timestamp(self, partition: LogPartition, timestamp_ms: int) -> LogOffset | None:
        self._check_open()
        tp = self._tp(self._check(partition), timestamp_ms)
        timeout = self._clients.timeout
        (found,) = self._clients.retry(
            f"cannot look up a timestamp in {partition}",
            lambda: self._consumer.offsets_for_times([tp], timeout=timeout),
            tp.topic,
        )
        if found.error is not None:
            raise self._clients.translate(found.error, f"offset for timestamp in {partition}")
        return None if found.offset < 0 else LogOffset(partition, found.offset)

    def close(self) -> None:
        if self._closed:
            return
        try:
            if self._static:
                try:
                    self.commit_marked()
                except LogError:
                    logger.exception("group %s: marked positions not committed", self.group)
            # A subscribed member revokes (listener, marks) inside close() and leaves the group.
            self._closing = True
            self._consumer.close()
        except KafkaException as exc:
            logger.warning("group %s: consumer close: %s", self.group, exc)
        finally:
            self._closed = True
            self._buffer, self._buf_i = [], 0
            if self._on_close is not None:
                self._on_close(self)
