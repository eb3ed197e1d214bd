"""`ComputationRunner`: runs one concurrency unit of a computation, one `step` at a time.

The threaded `StreamProcessor` calls `step` in a loop on the unit's thread; the
`TopologyTestDriver` calls it from its single thread with a virtual clock. Both share everything
below: timers, reading, failure policy, dead-lettering and checkpoints.

A step fires the due timers, then reads a batch (`tailer.read_batch`) and hands each record to
the computation. Checkpoint requests are coalesced: a checkpoint covers exactly the records up to
the last one that asked, and is taken at the end of the batch (or at once for POISON_PILL,
termination requests and timers). Whatever asked, a checkpoint never commits a partition past a
record the computation still holds (`Computation.held_records`, e.g. a batch not processed
yet): that partition's commit stops at the held record and is completed by a later checkpoint.
A checkpoint appends the buffered produced records (and dead-letter records) with `append_batch`,
then commits the input positions, so a crash between the two re-delivers records whose output was
already appended: at-least-once.

A computation with several inputs reads through a `StreamSynchronizer`
(`streamcore.computation.stream_time`): a read batch is buffered per partition, and each task's
records are handed to `_process` smallest timestamp first (KIP-28), so a processed batch may
interleave partitions; each partition's order is kept, and while records are buffered a
checkpoint commits the positions of the processed records, never the read position. With one
input nothing is buffered. Each record moves its task's stream time; stream-time timers fire right
after the record that reaches them, as part of its processing.

A rebalance that takes partitions away rewinds the unit to its last checkpoint: uncommitted
output is dropped, the tailer goes back to the committed positions and `init` runs again with a
clean context, so no state built from records of a lost partition is ever committed.

Kept whole (over 600 lines): `ComputationRunner` is one state machine over one unit's mutable
state (the window of uncommitted records, the buffered output, the due timers, the held records,
the failure policy's attempts). Step, checkpoint, rewind and fallback each read and change all of
it, and the at-least-once argument above holds only when they are read together; `UnitContext`
and the two stream classes are the computation's view of that same state.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from streamcore.collector import collector_paused
from streamcore.computation.computation import BatchFunction, Computation
from streamcore.computation.context import ComputationContext
from streamcore.computation.dlq import dead_letter_record
from streamcore.computation.filters import RecordFilter
from streamcore.computation.policy import ComputationPolicy
from streamcore.computation.stats import RUNNING, STOPPED, TERMINATED, SkipBudget, UnitStats
from streamcore.computation.stream_time import (
    UNKNOWN,
    StreamSynchronizer,
    TimestampExtractor,
    TimestampFunction,
    WatermarkTimestamp,
)
from streamcore.errors import (
    ArgumentTypeError,
    CheckpointError,
    CodecError,
    RestoreAbandonedError,
    TopologyError,
    UndecodableRecordError,
)
from streamcore.log import LogAppender, LogOffset, LogRecord, LogTailer, RebalanceListener
from streamcore.names import Name
from streamcore.record import Flag, Record

if TYPE_CHECKING:
    from streamcore.computation.exactly_once import UnitTransactions
    from streamcore.computation.task_stores import TaskStores
    from streamcore.state.store import KeyValueStore

__all__ = ["ComputationRunner", "InputStream", "OutputStream"]

logger = logging.getLogger(__name__)

_ASK, _HALT = 1, 2
_DEFAULT_FLAGS = int(Flag.DEFAULT)
_SPECIAL = int(Flag.POISON_PILL | Flag.COMMIT)
# Uncommitted batches kept before their positions are folded into a dict: none. A batch kept
# until the checkpoint (a second of records) outlives two collections of the garbage collector
# and reaches its oldest generation, which it then walks in every full collection: in the
# windowed count of bench/window_bench.py, 0.25 s of collections a run more than folding each
# batch at once (a loop over its records).
_WINDOW_BATCHES = 0


class InputStream:
    """How a unit reads one input stream: its logical name, Record codec and read filter."""

    __slots__ = ("decode", "filter", "logical", "urn")

    def __init__(
        self, urn: str, logical: str, codec: Any, record_filter: RecordFilter | None
    ) -> None:
        self.urn = urn
        self.logical = logical
        self.decode: Callable[[bytes], Record] = codec.decode
        self.filter = record_filter


class OutputStream:
    """Where a unit appends one output (or dead-letter) stream, with its append filter."""

    __slots__ = ("appender", "buffer", "filter", "urn")

    def __init__(
        self, urn: str, appender: LogAppender[Any], record_filter: RecordFilter | None
    ) -> None:
        self.urn = urn
        self.appender = appender
        self.filter = record_filter
        self.buffer: list[tuple[str, Record]] = []


class UnitContext(ComputationContext):
    """The context a runner gives its computation (see `ComputationContext`)."""

    def __init__(self, runner: ComputationRunner, outputs: Mapping[str, OutputStream]) -> None:
        self._runner = runner
        self._buffers = {name: out.buffer for name, out in outputs.items()}
        self._journal: list[list[tuple[str, Record]]] = []  # which buffer each record went to
        self._signal = 0
        self._record: LogRecord[Any] | None = None
        self._timestamp = UNKNOWN  # the extractor's timestamp of `_record`
        self._in_timer = False
        self._timer_task: int | None = None  # the task of the stream-time timer running

    def produce_record(
        self, output_stream: str, record_or_key: Record | str, data: bytes | None = None
    ) -> None:
        try:
            buffer = self._buffers[output_stream]
        except KeyError:
            raise TopologyError(
                f"computation {self._runner.name!r} has no output stream {output_stream!r}; use "
                f"one of {', '.join(sorted(self._buffers))}"
            ) from None
        if type(record_or_key) is str:
            record = Record(record_or_key, b"" if data is None else data)
        elif isinstance(record_or_key, Record):
            record = record_or_key
        else:
            raise ArgumentTypeError(
                f"produce_record takes a Record or a str key (with data), got "
                f"{type(record_or_key).__name__}"
            )
        buffer.append((record.key, record))
        self._journal.append(buffer)

    def set_timer(self, key: str, timestamp_ms: int) -> None:
        runner = self._runner
        runner.timers[key] = timestamp_ms
        if timestamp_ms < runner.next_timer:
            runner.next_timer = timestamp_ms

    def set_stream_timer(self, key: str, timestamp_ms: int, task: int | None = None) -> None:
        runner = self._runner
        if task is None:
            task = self._task()
            if task is None:
                raise TopologyError(
                    f"computation {runner.name!r}: set_stream_timer({key!r}) outside a record "
                    f"or a stream-time timer: name the task (one of {list(self.tasks)})"
                )
        runner.stream_timers.setdefault(task, {})[key] = timestamp_ms
        if timestamp_ms < runner.next_stream_timer:
            runner.next_stream_timer = timestamp_ms

    @property
    def stream_time_ms(self) -> int:
        task = self._task()
        return UNKNOWN if task is None else self._runner.stream_times.get(task, UNKNOWN)

    def stream_time_of(self, task: int) -> int:
        return self._runner.stream_times.get(task, UNKNOWN)

    @property
    def task_id(self) -> int | None:
        return self._task()

    @property
    def record_times(self) -> tuple[int, int, int] | None:
        record = self._record
        if record is None or self._in_timer:
            return None
        task = record.partition.partition
        return task, self._timestamp, self._runner.stream_times.get(task, UNKNOWN)

    @property
    def record_timestamp_ms(self) -> int:
        return UNKNOWN if self._record is None or self._in_timer else self._timestamp

    def count_late_record(self) -> None:
        self._runner.stats.late += 1

    def _task(self) -> int | None:
        """The task of the record being processed, or of the stream-time timer running."""
        if self._in_timer:
            return self._timer_task
        record = self._record
        return None if record is None else record.partition.partition

    def ask_for_checkpoint(self) -> None:
        self._signal |= _ASK

    def cancel_ask_for_checkpoint(self) -> None:
        self._signal &= ~_ASK

    def set_source_low_watermark(self, watermark: int) -> None:
        self._runner.source_low_watermark = watermark

    def ask_for_termination(self) -> None:
        self._signal |= _HALT

    def now_ms(self) -> int:
        return self._runner.clock_ms()

    def get_state_store(self, name: str, task: int | None = None) -> KeyValueStore[Any]:
        stores = self._runner.stores
        if stores is None:
            return super().get_state_store(name, task)
        if task is None:
            task = self._task()
        return stores.store(name, task)

    @property
    def tasks(self) -> tuple[int, ...]:
        stores = self._runner.stores
        return () if stores is None else tuple(sorted(stores.tasks))

    @property
    def last_offset(self) -> LogOffset | None:
        record = self._record
        return None if record is None else LogOffset(record.partition, record.offset)

    @property
    def policy(self) -> ComputationPolicy:
        return self._runner.policy

    @property
    def computation_name(self) -> str:
        return self._runner.name

    def _rollback(self, mark: int) -> None:
        """Drop the records produced since the journal had `mark` entries."""
        journal = self._journal
        while len(journal) > mark:
            journal.pop().pop()

    def _clear(self) -> None:
        for buffer in self._buffers.values():
            buffer.clear()
        self._journal.clear()
        self._signal = 0


class ComputationRunner(RebalanceListener):
    """One concurrency unit of a computation (see the module doc). Not thread-safe except
    `request_stop`, `low_watermark` and the `stats` it updates."""

    def __init__(
        self,
        computation: Computation,
        *,
        unit: int,
        policy: ComputationPolicy,
        inputs: Mapping[str, InputStream],
        outputs: Mapping[str, OutputStream],
        dlq: OutputStream | None,
        clock_ms: Callable[[], int],
        sleep: Callable[[float], bool],
        skip_budget: SkipBudget,
        read_batch: int = 500,
        checkpoint_retries: int = 3,
        checkpoint_pause: float = 10.0,
        checkpoint_interval: float = 0.0,
        stores: TaskStores | None = None,
        timestamp_extractor: TimestampExtractor | None = None,
        max_task_idle_ms: int = 0,
        transactions: UnitTransactions | None = None,
    ) -> None:
        self.computation = computation
        self.stores = stores
        self.transactions = transactions  # exactly-once: each checkpoint is a transaction
        self.name = computation.metadata.name
        self.unit = unit
        self.policy = policy
        self.clock_ms = clock_ms
        self.sleep = sleep  # False when the unit was asked to stop while sleeping
        self.stats = UnitStats(self.name, unit)
        self.tailer: LogTailer[Any] | None = None
        self.timers: dict[str, int] = {}
        self.next_timer: float = math.inf
        self.source_low_watermark = 0
        self._inputs = {Name.of(urn): stream for urn, stream in inputs.items()}
        # Stream time (streamcore.computation.stream_time): per task, the largest timestamp
        # processed, and the stream-time timers per task.
        self.stream_times: dict[int, int] = {}
        self.stream_timers: dict[int, dict[str, int]] = {}
        self.next_stream_timer: float = math.inf
        extractor = timestamp_extractor or WatermarkTimestamp()
        timestamps: dict[Any, TimestampFunction] = {
            name: extractor.bind(computation, stream.logical)
            for name, stream in self._inputs.items()
        }
        # None: the watermark, read inline (the single-input hot path makes no call for it)
        self._timestamps = None if type(extractor) is WatermarkTimestamp else timestamps
        self._sync: StreamSynchronizer | None = None
        if len(self._inputs) > 1:  # a task reads several partitions: synchronize them
            decoders = {name: stream.decode for name, stream in self._inputs.items()}
            self._sync = StreamSynchronizer(decoders, timestamps, max_task_idle_ms)
        # The computation's batch function for its one input, read unfiltered with watermark time.
        self._batched: tuple[InputStream, BatchFunction] | None = None
        if len(self._inputs) == 1 and self._timestamps is None:
            (only,) = self._inputs.values()
            batched = computation.batch_function(only.logical) if only.filter is None else None
            if batched is not None:
                self._batched = (only, batched)
        self._outputs = outputs
        self._dlq = dlq
        self._skip_budget = skip_budget
        self._read_size = read_batch
        self._checkpoint_retries = checkpoint_retries
        self._checkpoint_pause = checkpoint_pause
        self._checkpoint_interval = checkpoint_interval
        # A checkpoint asked for through the end of the window, put off by the interval.
        self._deferred = False
        self._last_checkpoint_ms = clock_ms()
        names: dict[str, OutputStream] = {}
        for logical, out in outputs.items():
            names[logical] = names[out.urn] = out
        self.context = UnitContext(self, names)
        if stores is not None:
            stores.journal = self.context._journal  # store writes are undone with the outputs
        self._window: list[list[LogRecord[Any]]] = []  # read batches not committed yet
        self._window_positions: dict[Any, int] = {}
        self._window_oldest: LogRecord[Any] | None = None  # first record of the folded batches
        self._touched: set[Any] = set()  # partitions read since the last checkpoint
        self._committed_watermark = 0
        self._held_watermark = 0  # lowest of the records held at the last checkpoint
        self._rewind = False
        self._stop_requested = False

    # -- lifecycle ------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self.stats.state == RUNNING and not self._stop_requested

    def open(self, tailer: LogTailer[Any] | None) -> None:
        self.tailer = tailer
        if self.stores is not None and tailer is not None:
            self.stores.sync(tailer.assignments)  # a static assignment: no callback comes
        self.computation.init(self.context)

    def request_stop(self) -> None:
        """Stop after the current batch (thread-safe)."""
        self._stop_requested = True

    def close(self) -> None:
        """Destroy the computation and close the tailer (nothing uncommitted is committed)."""
        if self.stats.state == RUNNING:
            self.stats.state = STOPPED
        try:
            self.computation.destroy()
        except Exception:
            logger.exception("destroy() of computation %s failed", self.name)
        if self.stores is not None:
            self.stores.close()
        if self.transactions is not None:
            self.transactions.close()
        if self.tailer is not None:
            self.tailer.close()

    def process_detached(self, batch: list[LogRecord[Any]]) -> tuple[int, bool]:
        """Process `batch` on a runner without a tailer (a worker of `streamcore.computation.pool`)
        and append its outputs at once. Returns how many of its first records are done (processed,
        outputs appended; 0 when the runner failed or was stopped in a retry: those records are
        processed again) and whether one asked for a checkpoint."""
        stats = self.stats
        checkpoints, processed = stats.checkpoints, stats.processed
        self._process(batch)
        asked = stats.checkpoints != checkpoints or self._deferred
        if stats.state == RUNNING:
            return (len(batch) if self._checkpoint(None) else 0), asked
        if stats.state == STOPPED and not self._stop_requested:  # a poison pill or termination
            return stats.processed - processed, asked  # request: checkpointed through it
        return 0, asked

    # -- rebalance --------------------------------------------------------------------------------
    def on_revoked(self, tailer: LogTailer[Any], partitions: list[Any]) -> None:
        self._rewind = True
        stores = self.stores
        if stores is not None:
            # Close the stores of the tasks that leave now, so their new owner can open them.
            stores.discard()
            stores.sync([p for p in tailer.assignments if p not in partitions])

    def on_assigned(self, tailer: LogTailer[Any], partitions: list[Any]) -> None:
        if self.stores is not None:
            self._restore(tailer)  # restored before a record of them is read

    def _restore(self, tailer: LogTailer[Any]) -> None:
        """Open and restore the stores of the assigned tasks. A restore given up for a rebalance
        (or a stop) rewinds the unit: what was read is dropped, the next read applies the
        rebalance, and the rewind restores again, from where the store's checkpoint is."""
        try:
            self.stores.sync(tailer.assignments)  # type: ignore[union-attr]
        except RestoreAbandonedError as given_up:
            logger.info("computation %s unit %d: %s", self.name, self.unit, given_up)
            self._rewind = True

    def _do_rewind(self) -> None:
        """Back to the last checkpoint after partitions were taken away (see the module doc)."""
        self._rewind = False
        if self.tailer is None or self.tailer.closed:
            return
        logger.info(
            "computation %s unit %d: partitions moved; restarting from the last checkpoint on %s",
            self.name,
            self.unit,
            ", ".join(map(str, self.tailer.assignments)) or "no partition",
        )
        self.context._clear()
        if self.stores is not None:
            self.stores.discard()
        self._window.clear()
        self._window_positions.clear()
        self._window_oldest = None
        self._touched.clear()
        self._held_watermark = 0
        self._deferred = False
        if self._sync is not None:
            self._sync.clear()
        # Stream time never goes back for a task kept; timers are set again by init.
        kept = {p.partition for p in self.tailer.assignments}
        self.stream_times = {t: v for t, v in self.stream_times.items() if t in kept}
        self.stream_timers.clear()
        self.next_stream_timer = math.inf
        self.tailer.to_last_committed()
        if self.stores is not None:
            self._restore(self.tailer)
        self.computation.init(self.context)

    # -- the step -------------------------------------------------------------------------------
    def step(self, timeout: float = 0.0) -> int:
        """Fire due timers, then read and process one batch (waiting up to `timeout` s for it).
        Returns the number of records and timers handled.

        The cyclic garbage collector is paused during a step (`collector_paused`): what a step
        reads, decodes and keeps for its checkpoint lives until the step ends, and collections
        in its middle only promoted it (27-32 full collections in the million-record windowed
        count of bench/window_bench.py, 0-3 paused)."""
        with collector_paused():
            return self._step(timeout)

    def _step(self, timeout: float) -> int:
        done = 0
        if self.next_timer <= self.clock_ms():
            done = self._fire_timers()
        tailer = self.tailer
        if tailer is None or self.stats.state != RUNNING:
            return done
        sync = self._sync
        if sync is not None and sync.buffered:  # a task waits: read no longer than its wait
            wait = sync.wait_ms(self.clock_ms())
            if wait is not None:
                timeout = min(timeout, wait / 1000.0)
        try:
            batch = tailer.read_batch(self._read_size, timeout)
        except UndecodableRecordError as failure:  # not even a LogRecord: a key that is not UTF-8
            if not self._rewind:
                self._unreadable(tailer, failure)
            batch = []
        if self._rewind:
            self._do_rewind()
            return done
        if not batch and self._deferred:  # caught up: the put-off checkpoint is due now
            self._checkpoint(None)
        if sync is not None:
            done += len(batch)  # read into the buffers: something happened
            sync.add(batch)
            if not sync.buffered:
                return done
            batch, decoded = sync.release(tailer.assignments, self.clock_ms())
            if batch:
                self._process(batch, decoded)
                done += len(batch)
            return done
        if batch:
            self._process(batch)
            done += len(batch)
        return done

    def _process(
        self, batch: list[LogRecord[Any]], decoded: Sequence[Record | CodecError] | None = None
    ) -> None:
        """Process `batch` in its order; `decoded`: its Records, decoded already (by the stream
        synchronizer), else each is decoded here."""
        started = time.perf_counter()
        failed_at, failure = -1, None  # a failure of the batch function: its record, its error
        if self._batched is not None and decoded is None and self.next_stream_timer == math.inf:
            rest = self._process_batched(batch, *self._batched, started)
            if rest is None:
                return
            decoded, failed_at, failure = rest
        context = self.context
        process = self.computation.process_record
        journal = context._journal
        inputs = self._inputs
        touched = self._touched
        partition = None
        stream: InputStream = None  # type: ignore[assignment]
        decode: Callable[[bytes], Record] = None  # type: ignore[assignment]
        logical = ""
        read_filter: RecordFilter | None = None
        asked = asked_mark = -1
        halted = False
        index = -1
        times = self.stream_times
        timestamps = self._timestamps
        timestamp_of: TimestampFunction | None = None
        task = -1
        now = UNKNOWN  # the stream time of `task`
        take = None if decoded is None else _taker(decoded)
        batch_mark = len(journal)
        for rec in batch:
            index += 1
            if rec.partition is not partition:  # batches come in runs of one partition
                partition = rec.partition
                touched.add(partition)
                stream = inputs[partition.name]
                decode, logical, read_filter = stream.decode, stream.logical, stream.filter
                if take is not None:
                    decode = take
                if timestamps is not None:
                    timestamp_of = timestamps[partition.name]
                task = partition.partition
                now = times.get(task, UNKNOWN)
            try:
                record = decode(rec.message)
            except CodecError as exc:
                if not self._undecodable(rec, exc):
                    break
                context._signal &= ~_ASK  # dead-lettered or skipped: checkpoint up to here
                asked, asked_mark = index, len(journal)
                continue
            if read_filter is not None:
                kept = read_filter.after_read(record, LogOffset(partition, rec.offset))
                if kept is None:
                    continue
                record = kept
            if timestamp_of is None:
                ts = record.watermark >> 17
            else:
                try:
                    ts = timestamp_of(record, rec)
                except Exception as exc:  # no usable timestamp: the policy, without retries
                    context._record = rec
                    if not self._fallback(exc, 1, rec, record):
                        break
                    context._signal &= ~_ASK
                    asked, asked_mark = index, len(journal)
                    continue
            if ts > now:
                times[task] = now = ts
            context._record = rec
            context._timestamp = ts
            mark = len(journal)
            try:
                if index == failed_at and failure is not None:
                    raise failure  # its first attempt, made by the batch function
                process(context, logical, record)
            except Exception as exc:
                if not self._recover(exc, mark, rec, stream, record):
                    break
            if now >= self.next_stream_timer and not self._fire_stream_timers(task, now):
                break
            if record.flags != _DEFAULT_FLAGS and record.flags & _SPECIAL:
                context._signal |= _ASK
                if record.flags & Flag.POISON_PILL:
                    context._signal |= _HALT
            if context._signal:
                if context._signal & _ASK:
                    asked, asked_mark = index, len(journal)
                if context._signal & _HALT:
                    halted = True
                    context._signal = 0
                    break
                context._signal = 0
        self._end_batch(batch, index + 1, asked, asked_mark, halted, batch_mark, started)

    def _process_batched(
        self,
        batch: list[LogRecord[Any]],
        stream: InputStream,
        batched: BatchFunction,
        started: float,
    ) -> tuple[Sequence[Record | CodecError] | None, int, Exception | None] | None:
        """Process `batch` through the computation's batch function, with the bookkeeping
        `_process` does per record (stream time, the checkpoint asked after every record).
        When it has to go record by record instead (a record does not decode, carries a control
        flag or fails), it changes nothing and returns what `_process` needs for that: the
        Records decoded (None: decode them again), the index of the record that failed in the
        batch function (-1: none) and its failure. `batch` is not empty (`_step` skips empty
        reads)."""
        decode = stream.decode
        try:
            records = [decode(rec.message) for rec in batch]
        except CodecError:
            return None, -1, None
        for record in records:
            if record.flags != _DEFAULT_FLAGS and record.flags & _SPECIAL:
                return records, -1, None
        produced, failed = batched(records)
        if failed is not None:
            return records, failed[0], failed[1]
        context = self.context
        touched, times = self._touched, self.stream_times
        partition = None
        task = ts = now = UNKNOWN
        for rec, record in zip(batch, records, strict=True):
            if rec.partition is not partition:
                partition = rec.partition
                touched.add(partition)
                task = partition.partition
                now = times.get(task, UNKNOWN)
            ts = record.watermark >> 17
            if ts > now:
                times[task] = now = ts
        context._record, context._timestamp = batch[-1], ts
        journal = context._journal
        batch_mark = len(journal)
        buffers = context._buffers
        for output, pairs in produced:
            buffer = buffers[output]
            buffer += pairs
            journal += [buffer] * len(pairs)
        self._end_batch(batch, len(batch), len(batch) - 1, len(journal), False, batch_mark, started)
        return None

    def _end_batch(
        self,
        batch: list[LogRecord[Any]],
        count: int,
        asked: int,
        asked_mark: int,
        halted: bool,
        batch_mark: int,
        started: float,
    ) -> None:
        """Count the first `count` records of `batch` as processed, then checkpoint (up to the
        record `asked` for one, the journal then `asked_mark` long), keep the batch in the
        window, or stop (`halted`)."""
        context = self.context
        stats = self.stats
        stats.processed += count
        stats.observe_batch(time.perf_counter() - started, count)
        stats.last_activity = time.monotonic()
        if stats.state != RUNNING:
            if asked >= 0:  # keep what was done before the failure: checkpoint up to the ask
                context._rollback(asked_mark)
                self._checkpoint(batch, asked, asked_mark)
            return
        if asked >= 0:
            if asked == len(batch) - 1 and not halted and self._put_off():
                self._add_to_window(batch)
                self._deferred = True
            else:
                self._checkpoint(batch, asked, asked_mark)
        elif self._deferred:  # the put-off ask covers the window, not this batch
            self._checkpoint(batch, -1, batch_mark)
        else:
            self._add_to_window(batch if not halted else batch[:count])
        if halted:
            logger.info("computation %s unit %d stops as asked", self.name, self.unit)
            stats.state = STOPPED

    def _fire_timers(self) -> int:
        now = self.clock_ms()
        context = self.context
        due = sorted((ts, key) for key, ts in self.timers.items() if ts <= now)
        fired = 0
        for ts, key in due:
            if self.timers.get(key) != ts:
                continue  # replaced by an earlier timer callback
            del self.timers[key]
            mark = len(context._journal)
            fired += 1
            context._in_timer = True
            try:
                self.computation.process_timer(context, key, ts)
            except Exception as exc:
                if not self._recover(exc, mark, None, None, None, timer=(key, ts)):
                    break
            finally:
                context._in_timer = False
            if context._signal & _HALT:
                break
        self.next_timer = min(self.timers.values(), default=math.inf)
        self.stats.timers += fired
        signal, context._signal = context._signal, 0
        if self.stats.state != RUNNING:
            return fired
        if signal & _ASK:
            self._checkpoint(None)
        if signal & _HALT:
            self.stats.state = STOPPED
        return fired

    def _fire_stream_timers(self, task: int, now: int) -> bool:
        """Fire the stream-time timers of `task` due at its stream time `now`, after the record
        that moved it there (their effects count as that record's). False when the unit
        terminated or stopped."""
        timers = self.stream_timers.get(task)
        if timers:
            context = self.context
            due = sorted((ts, key) for key, ts in timers.items() if ts <= now)
            context._in_timer, context._timer_task = True, task
            try:
                for ts, key in due:
                    if timers.get(key) != ts:
                        continue  # replaced by an earlier timer callback
                    del timers[key]
                    self.stats.timers += 1
                    mark = len(context._journal)
                    try:
                        self.computation.process_timer(context, key, ts)
                    except Exception as exc:
                        if not self._recover(exc, mark, None, None, None, timer=(key, ts)):
                            return False
                    if context._signal & _HALT:
                        break
            finally:
                context._in_timer, context._timer_task = False, None
        self.next_stream_timer = min(
            (ts for pending in self.stream_timers.values() for ts in pending.values()),
            default=math.inf,
        )
        return True

    # -- failures -------------------------------------------------------------------------------
    def _recover(
        self,
        failure: Exception,
        mark: int,
        rec: LogRecord[Any] | None,
        stream: InputStream | None,
        record: Record | None,
        timer: tuple[str, int] | None = None,
    ) -> bool:
        """Retry with backoff, then apply the policy's fallback. True to go on with the next
        record, False when the unit terminated or was stopped while waiting."""
        context = self.context
        policy = self.policy
        attempts = 1
        first_failed_at = self.clock_ms()
        context._rollback(mark)
        context._signal = 0
        while attempts <= policy.max_retries:
            delay = policy.retry_delay(attempts)
            logger.warning(
                "computation %s: %s failed (attempt %d): %s: %s; retrying in %.3g s",
                self.name,
                _what(rec, timer),
                attempts,
                type(failure).__name__,
                failure,
                delay,
            )
            if not self.sleep(delay):
                logger.warning(
                    "computation %s: stopped while retrying %s", self.name, _what(rec, timer)
                )
                self.stats.state = STOPPED
                return False
            self.stats.retried += 1
            attempts += 1
            try:
                self.computation.process_retry(context, failure)
                if timer is not None:
                    self.computation.process_timer(context, timer[0], timer[1])
                else:
                    self.computation.process_record(context, stream.logical, record)  # type: ignore[union-attr,arg-type]
                return True
            except Exception as exc:
                failure = exc
                context._rollback(mark)
                context._signal = 0
        return self._fallback(failure, attempts, rec, record, timer, first_failed_at)

    def _fallback(
        self,
        failure: BaseException,
        attempts: int,
        rec: LogRecord[Any] | None,
        record: Record | None,
        timer: tuple[str, int] | None = None,
        first_failed_at: int | None = None,
        undecodable: bool = False,
    ) -> bool:
        stats = self.stats
        stats.failed += 1
        items: list[tuple[Record, LogOffset | None]] = []
        if record is not None:
            items.append((record, None if rec is None else LogOffset(rec.partition, rec.offset)))
        if not undecodable:
            try:
                others = self.computation.process_failure(self.context, failure)
                items += [(o, None) if isinstance(o, Record) else o for o in others]
            except Exception:
                logger.exception("process_failure() of computation %s failed", self.name)
            if record is not None and _holds(self.computation, record):
                del items[0]  # kept by the computation for later: the failure was not this record's
        fallback = self.policy.fallback
        if fallback == "skip_first":
            fallback = "skip" if self._skip_budget.take() else "terminate"
        what = _what(rec, timer)
        if fallback != "terminate":
            self.context._signal |= _ASK  # like Nuxeo: the skipped record is checkpointed
        if fallback == "dead_letter" and self._dlq is not None:
            now = self.clock_ms()
            buffer = self._dlq.buffer
            for item, origin in items:
                buffer.append(
                    (
                        item.key,
                        dead_letter_record(
                            item,
                            computation=self.name,
                            stream="" if origin is None else origin.partition.name.urn,
                            partition=-1 if origin is None else origin.partition.partition,
                            offset=-1 if origin is None else origin.offset,
                            failure=failure,
                            attempts=attempts,
                            failed_at=now,
                            first_failed_at=first_failed_at,
                            undecodable=undecodable,
                        ),
                    )
                )
            stats.dead_lettered += len(items)
            logger.error(
                "computation %s: %s failed after %d attempts (%s: %s); %d record(s) sent to the "
                "dead-letter stream %s",
                self.name,
                what,
                attempts,
                type(failure).__name__,
                failure,
                len(items),
                self._dlq.urn,
            )
            return True
        if fallback in ("skip", "dead_letter"):
            stats.skipped += len(items)
            logger.error(
                "computation %s: %s failed after %d attempts (%s: %s); skipping %d record(s)",
                self.name,
                what,
                attempts,
                type(failure).__name__,
                failure,
                len(items),
            )
            return True
        self.terminate(failure, f"{what} failed after {attempts} attempts")
        return False

    def _undecodable(self, rec: LogRecord[Any], failure: CodecError) -> bool:
        """A record whose bytes are not a Record: no retry (decoding again fails again)."""
        record = Record(rec.key, bytes(rec.message))
        return self._fallback(failure, 1, rec, record, undecodable=True)

    def _unreadable(self, tailer: LogTailer[Any], failure: UndecodableRecordError) -> None:
        """A record the tailer cannot return takes the undecodable path too, then the tailer
        skips it under a checkpoint, as for an undecodable record that ends a batch."""
        at = failure.offset
        key = failure.key.decode("utf-8", "backslashreplace")
        self._touched.add(at.partition)
        rec = LogRecord(failure.value, at.partition, at.offset, failure.timestamp, key)
        if self._undecodable(rec, failure):
            tailer.skip_one()
            self.context._signal = 0
            self._checkpoint(None)

    def terminate(self, failure: BaseException, what: str) -> None:
        """End the unit after a failure it cannot recover from (nothing more is committed)."""
        stats = self.stats
        stats.state = TERMINATED
        stats.failure = f"{what}: {type(failure).__name__}: {failure}"
        stats.failure_time = time.time()
        logger.error(
            "Terminate computation %s unit %d due to previous failure: %s. Nothing after its last "
            "checkpoint is committed; fix the cause and restart within the stream retention.",
            self.name,
            self.unit,
            stats.failure,
            exc_info=failure,
        )

    # -- checkpoints ----------------------------------------------------------------------------
    def _add_to_window(self, batch: list[LogRecord[Any]]) -> None:
        window = self._window
        window.append(batch)
        if len(window) > _WINDOW_BATCHES:  # keep their positions only
            if self._window_oldest is None:
                self._window_oldest = _first_of(window)
            _fold_positions(window, self._window_positions)
            window.clear()

    def _put_off(self) -> bool:
        """True when a checkpoint asked for now waits for `checkpoint_interval`."""
        interval = self._checkpoint_interval
        return interval > 0 and self.clock_ms() - self._last_checkpoint_ms < interval * 1000

    def _checkpoint(
        self, batch: list[LogRecord[Any]] | None, upto: int = -1, mark: int = -1
    ) -> bool:
        """Append what was produced, then commit positions: of everything read so far when
        `batch` is None or was processed up to its end, else of the window plus
        `batch[: upto + 1]` (`mark`: the journal's length after `batch[upto]`; the store writes
        after it stay buffered); never past a record the computation holds."""
        tailer = self.tailer
        full = batch is None or upto >= len(batch) - 1
        first = self._first_uncommitted() or (batch[0] if batch else None)
        held, held_watermark = _held(self.computation.held_records())
        positions: dict[Any, int] | None = None
        # Records read but still in the stream synchronizer's buffers are not processed: the
        # read position is past them, so commit the positions of the processed records only.
        buffered = self._sync is not None and self._sync.buffered > 0
        if not full or buffered:
            positions = dict(self._window_positions)
            _fold_positions(self._window, positions)
            if batch:
                _fold_positions([batch[: upto + 1]], positions)
        elif held and tailer is not None:
            assigned = set(tailer.assignments)
            positions = {p: tailer.position(p) for p in self._touched if p in assigned}
        pending: dict[Any, int] = {}  # where a held partition is to be committed once released
        if positions is not None:
            for partition, offset in held.items():
                if positions.get(partition, offset) > offset:
                    pending[partition] = positions[partition]
                    positions[partition] = offset
        low = self._held_watermark
        if not low:
            low = self._watermark_of(first) if first is not None else self._committed_watermark
        # Taken before the outputs are appended: appending them empties the journal.
        tail = None if full or mark < 0 else self.context._journal[mark:]
        for attempt in range(self._checkpoint_retries + 1):
            try:
                if self.transactions is not None:
                    self.transactions.checkpoint(self, low, positions, tail)
                    break
                self._append_outputs(low)
                if self.stores is not None and tailer is not None:
                    self.stores.checkpoint(self._commit_positions(tailer, positions), tail)
                if tailer is not None:
                    if positions is None:
                        self._commit_touched(tailer)
                    else:
                        assigned = set(tailer.assignments)
                        for partition, offset in positions.items():
                            if partition in assigned:
                                tailer.commit_offset(partition, offset)
                break
            except Exception as exc:
                self.stats.checkpoint_failures += 1
                if self.transactions is not None:  # aborted: process again, or stop
                    return self.transactions.failed(self, exc)
                if attempt >= self._checkpoint_retries:
                    self.terminate(
                        CheckpointError(f"{type(exc).__name__}: {exc}"),
                        f"checkpoint failed {attempt + 1} times",
                    )
                    return False
                logger.warning(
                    "computation %s unit %d: checkpoint failed (%s: %s); retry %d/%d in %.3g s",
                    self.name,
                    self.unit,
                    type(exc).__name__,
                    exc,
                    attempt + 1,
                    self._checkpoint_retries,
                    self._checkpoint_pause,
                )
                if not self.sleep(self._checkpoint_pause):
                    self.stats.state = STOPPED
                    return False
        self.stats.checkpoints += 1
        self._deferred = False
        self._last_checkpoint_ms = self.clock_ms()
        self._committed_watermark = low
        self._held_watermark = held_watermark
        self._window.clear()
        self._window_positions.clear()
        self._window_positions.update(pending)
        self._window_oldest = None
        self._touched.clear()
        self._touched.update(pending)
        if not full:
            rest = batch[upto + 1 :]  # type: ignore[index]
            self._window.append(rest)
            self._touched.update(_partitions_of(rest))
        return True

    def _commit_positions(
        self, tailer: LogTailer[Any], positions: dict[Any, int] | None
    ) -> dict[Any, int]:
        """The positions the checkpoint is about to commit (those of `positions`, else of the
        partitions read since the last checkpoint)."""
        assigned = set(tailer.assignments)
        if positions is None:
            return {p: tailer.position(p) for p in self._touched if p in assigned}
        return {p: offset for p, offset in positions.items() if p in assigned}

    def _commit_touched(self, tailer: LogTailer[Any]) -> None:
        """Commit the read position of the partitions read since the last checkpoint (all of
        them in one call when that is every assigned partition)."""
        assigned = tailer.assignments
        touched = self._touched
        if len(touched) >= len(assigned):
            tailer.commit()
            return
        for partition in assigned:
            if partition in touched:
                tailer.commit_partition(partition)

    def _append_outputs(self, low_watermark: int) -> None:
        """Append every buffered record; each stream's buffer is emptied once appended, so a
        retried checkpoint does not append it twice."""
        outputs = list(self._outputs.values())
        if self._dlq is not None:
            outputs.append(self._dlq)
        for out in outputs:
            items = out.buffer
            if not items:
                continue
            record_filter = out.filter
            if record_filter is not None:
                kept = []
                for _, record in items:
                    filtered = record_filter.before_append(record)
                    if filtered is not None:
                        kept.append((filtered.key, filtered))
                items = kept
            # A record produced without a watermark gets the low watermark, in a copy: the
            # computation's Record is never changed under it.
            items = [
                (key, record if record.watermark else record.with_watermark(low_watermark))
                for key, record in items
            ]
            if items:
                out.appender.append_batch(items)
                self.stats.last_activity = time.monotonic()
            self.stats.produced += len(items)
            out.buffer.clear()
        self.context._journal.clear()

    def _first_uncommitted(self) -> LogRecord[Any] | None:
        oldest = self._window_oldest
        return oldest if oldest is not None else _first_of(self._window)

    def _watermark_of(self, rec: LogRecord[Any]) -> int:
        try:
            return self._inputs[rec.partition.name].decode(rec.message).watermark
        except CodecError:
            return self._committed_watermark

    def low_watermark(self) -> int:
        """The watermark of the oldest record read and not committed, else of the last
        committed one (or what a source set)."""
        if self.tailer is None:
            return self.source_low_watermark
        if self._held_watermark:  # held at the last checkpoint: older than the window
            low = self._held_watermark
        else:
            first = self._first_uncommitted()
            low = self._watermark_of(first) if first is not None else self._committed_watermark
        sync = self._sync
        if sync is not None and sync.buffered:  # read, not processed yet: not committed either
            buffered = sync.low_watermark()
            if buffered and (not low or buffered < low):
                low = buffered
        return low


def _taker(decoded: Sequence[Record | CodecError]) -> Callable[[bytes], Record]:
    """A decode function that returns the Records decoded already, in order (raising the
    CodecError of a record that did not decode)."""
    pending = iter(decoded)

    def take(_message: bytes) -> Record:
        item = next(pending)
        if isinstance(item, CodecError):
            raise item
        return item

    return take


def _holds(computation: Computation, record: Record) -> bool:
    return any(held is record for held, _ in computation.held_records())


def _held(
    held: Iterable[tuple[Record, LogOffset | None]],
) -> tuple[dict[Any, int], int]:
    """The offset of the first held record per partition, and the lowest watermark of the held
    records (0 when none)."""
    offsets: dict[Any, int] = {}
    low = 0
    for record, origin in held:
        if origin is not None:
            partition, offset = origin
            if offset < offsets.get(partition, offset + 1):
                offsets[partition] = offset
        if record.watermark and (not low or record.watermark < low):
            low = record.watermark
    return offsets, low


def _first_of(batches: list[list[LogRecord[Any]]]) -> LogRecord[Any] | None:
    for batch in batches:
        if batch:
            return batch[0]
    return None


def _fold_positions(batches: list[list[LogRecord[Any]]], into: dict[Any, int]) -> None:
    """Record, per partition, the position after the last record of `batches` (read order)."""
    for batch in batches:
        previous = None
        for rec in batch:
            if previous is not None and rec.partition is not previous.partition:
                into[previous.partition] = previous.offset + 1
            previous = rec
        if previous is not None:
            into[previous.partition] = previous.offset + 1


def _partitions_of(batch: list[LogRecord[Any]]) -> list[Any]:
    """The partitions of a batch's records (which come in runs of one partition)."""
    out: list[Any] = []
    last = None
    for rec in batch:
        if rec.partition is not last:
            last = rec.partition
            out.append(last)
    return out


def _what(rec: LogRecord[Any] | None, timer: tuple[str, int] | None) -> str:
    if timer is not None:
        return f"timer {timer[0]!r}@{timer[1]}"
    if rec is not None:
        return f"record {rec.key!r} at {LogOffset(rec.partition, rec.offset)}"
    return "record"
