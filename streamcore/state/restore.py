"""The restore: a task's store rebuilt from its changelog partition, in large batches, bounded in
time, and never applying a change whose inputs will be processed again (docs/state.md,
"Restore").

The promise. After `restore(...)` returns, the store holds, for every key, the value of the last
changelog record of that key produced by input records at or below `committed` (the task's
committed input positions): changes of input records beyond `committed`, which the processor
re-delivers and processes again, are not in it. So a crash never counts an input twice in the
state (outputs stay at-least-once; the state is exactly-once). How:

- A record's positions (`streamcore.state.changelog`) beyond `committed` on any partition make
  it **void**: it is not applied and its key is remembered.
- At the end, for each such key, a **compensation** record is appended with the key's restored
  value (or a delete) and positions = `committed`, then the store's checkpoint is set past it.
  The compensation comes after the void record in the changelog, so every later restore keeps
  the promise: once `committed` has moved past the void record (its inputs were processed
  again), a full restore from the changelog's start applies it, then the compensation, then the
  records of the reprocessing; key compaction keeps the latest of them.
- While void keys wait for their compensation, the checkpoints written between batches point
  back at the first void record, so a restore interrupted before the end (a crash, a rebalance)
  reads the void records again and compensates them then. Replaying records already applied
  is harmless: the latest record of each key wins either way.

Where it starts: the store's checkpoint, when there is one, it decodes, it is of the changelog's
current incarnation, its offset is within the changelog, and its positions are not ahead of
`committed` (a store flushed before a crash that lost the input commit holds changes of
re-delivered records). Otherwise the store is cleared and the restore reads from the changelog's
start. A checkpoint below the start (records purged or truncated) rebuilds from the start with a
warning, or raises `ChangelogTruncatedError` with `on_truncated="fail"`; records purged *during*
the restore are met the same way.

Why it never hangs: the end offset is captured once at the start, and the restore ends when the
tailer's **position** reaches it (never "last record's offset + 1": compaction gaps, purges and
transaction markers leave offsets no record has). No position progress for `stall_timeout`
seconds raises `RestoreStalledError`; `keep_going()` answering False between batches raises
`RestoreAbandonedError` with the store at a consistent checkpoint.

Limits (the promise holds under these):
- One writer per changelog partition: the task's owner. A zombie owner appending during the
  restore can land records between the captured end and the compensation.
- Compaction must not run over a void record before its compensation exists: it would drop the
  key's older value, which the void record seems to supersede, and a full restore would then
  compensate with "absent". Kafka changelogs are created with `min.compaction.lag.ms` (7 days);
  on the local log, run the retention job's `compact` with `--min-lag` longer than a restart.
- `committed` must name every input partition of the task: a partition it does not name is not
  compared (so dropping an input from a topology does not void the state).
- Committed positions that move backwards (a group reset) void nothing retroactively: reset
  the state with the positions.

A standby replica follows the changelog with `follow`: the same read loop, but it holds void
records back instead of compensating them (only the owner writes the changelog).

Kept whole (over 600 lines): `restore` and `follow` are one read loop with two endings
(compensate, or hold the void records back); split, the loop's state would cross modules.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any, Literal

from streamcore.errors import (
    ChangelogTruncatedError,
    CorruptCheckpointError,
    InvalidArgumentError,
    RestoreAbandonedError,
    RestoreStalledError,
    StateError,
)
from streamcore.log.api import LogManager, LogTailer
from streamcore.log.values import LogOffset, LogPartition
from streamcore.names import Name
from streamcore.state.changelog import (
    DELETE_PREFIX,
    PUT_MAGIC,
    ChangelogWriter,
    Positions,
    StoreCheckpoint,
    decode_delete,
    decode_positions,
)
from streamcore.state.engine import StoreEngine
from streamcore.state.restore_read import read_lists, run_end

__all__ = [
    "RestoreProgress",
    "RestoreResult",
    "RestoreSettings",
    "StateRestoreListener",
    "follow",
    "restore",
]

logger = logging.getLogger(__name__)

LOG_EVERY = 5.0  # seconds between two progress lines of one restore


class StateRestoreListener:
    """Progress callbacks of a restore (Kafka Streams' `StateRestoreListener`), on the restoring
    thread. The defaults do nothing."""

    def on_restore_start(self, changelog: LogPartition, store: str, start: int, end: int) -> None:
        """The restore of `store` reads `changelog` from `start` to the captured `end`."""

    def on_batch_restored(
        self, changelog: LogPartition, store: str, batch_end: int, count: int
    ) -> None:
        """A batch of `count` records is in the store; the position is `batch_end`."""

    def on_restore_end(self, changelog: LogPartition, store: str, total: int) -> None:
        """The store is restored; `total` records were read."""


@dataclass(frozen=True)
class RestoreSettings:
    """`batch_size`: records per engine write (read in one or several reads).
    `stall_timeout`: seconds without position progress before `RestoreStalledError`.
    `on_truncated`: what to do when the changelog lost records the store needs ("rebuild" from
    its start with a warning, or "fail" with `ChangelogTruncatedError`)."""

    batch_size: int = 10_000
    stall_timeout: float = 60.0
    on_truncated: Literal["rebuild", "fail"] = "rebuild"

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.stall_timeout <= 0:
            raise InvalidArgumentError(
                f"restore settings: batch_size must be >= 1 and stall_timeout > 0, got "
                f"{self.batch_size} and {self.stall_timeout}"
            )
        if self.on_truncated not in ("rebuild", "fail"):
            raise InvalidArgumentError(
                f'restore settings: on_truncated must be "rebuild" or "fail", got '
                f"{self.on_truncated!r}"
            )


@dataclass
class RestoreProgress:
    """A restore's counters, updated in place between batches (a metrics collector may read them
    from another thread: each field is one attribute write)."""

    changelog: LogPartition
    store: str
    start: int = 0
    end: int = 0
    position: int = 0
    restored: int = 0  # records applied
    skipped: int = 0  # void records (inputs beyond the committed positions)
    compensated: int = 0  # compensation records appended
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None  # set with `done`
    done: bool = False

    @property
    def rate(self) -> float:
        """Records read per second so far (over the whole restore once it is done)."""
        elapsed = (self.finished or time.monotonic()) - self.started
        return (self.restored + self.skipped) / elapsed if elapsed > 0 else 0.0

    @property
    def remaining(self) -> int:
        """Offsets left to the captured end."""
        return max(0, self.end - self.position)

    @property
    def eta(self) -> float | None:
        """Seconds left at the current rate (None before the first batch)."""
        rate = self.rate
        return self.remaining / rate if rate > 0 else None


@dataclass(frozen=True)
class RestoreResult:
    """What a restore did: records applied, void records skipped, compensations appended, the
    offsets read (`start` to `end`, the end captured at the start), its duration, and whether it
    rebuilt the store from the changelog's start (`full`)."""

    restored: int
    skipped: int
    compensated: int
    start: int
    end: int
    seconds: float
    full: bool


class _Truncated(StateError):
    """The changelog lost records the restore needs (internal signal: `ChangelogTruncatedError`
    or a rebuild, by the setting)."""


def _void(positions: Mapping[LogPartition, int], committed: Mapping[LogPartition, int]) -> bool:
    """Whether `positions` are beyond `committed` on a partition `committed` names."""
    for partition, offset in positions.items():
        done = committed.get(partition)
        if done is not None and offset > done:
            return True
    return False


def _start_point(
    engine: StoreEngine,
    incarnation: str | None,
    log_start: int,
    log_end: int,
    committed: Mapping[LogPartition, int],
) -> tuple[int | None, str]:
    """(offset to restore from, "") from a usable checkpoint, or (None, why not)."""
    raw = engine.checkpoint()
    if raw is None:
        return None, "the store has no checkpoint"
    try:
        checkpoint = StoreCheckpoint.decode(raw)
    except CorruptCheckpointError as exc:
        return None, str(exc)
    if incarnation is None or checkpoint.incarnation != incarnation:
        return None, (
            f"its checkpoint is of changelog incarnation {checkpoint.incarnation}, the changelog "
            f"is at {incarnation} (recreated, or of unknown incarnation)"
        )
    if _void(checkpoint.positions, committed):
        return None, (
            "its checkpoint is ahead of the committed input positions (flushed before a crash "
            "that lost the input commit): it holds changes of records that are re-delivered"
        )
    if checkpoint.offset > log_end:
        return None, (
            f"its checkpoint offset {checkpoint.offset} is beyond the changelog's end {log_end}"
        )
    if checkpoint.offset < log_start:
        raise _Truncated(
            f"its checkpoint offset {checkpoint.offset} is below the changelog's start "
            f"{log_start} (records purged or truncated)"
        )
    return checkpoint.offset, ""


class _Restore:
    """One restore's state (see `restore`)."""

    def __init__(
        self,
        manager: LogManager,
        changelog: LogPartition,
        store: str,
        engine: StoreEngine,
        committed: Positions,
        writer: ChangelogWriter | None,
        settings: RestoreSettings,
        listener: StateRestoreListener,
        keep_going: Callable[[], bool],
        progress: RestoreProgress,
    ) -> None:
        self.manager = manager
        self.changelog = changelog
        self.store = store
        self.engine = engine
        self.committed = dict(committed)
        self.writer = writer
        self.settings = settings
        self.listener = listener
        self.keep_going = keep_going
        self.progress = progress
        self.incarnation = manager.incarnation(changelog.name)
        self.void_keys: set[bytes] = set()
        self.first_void: int | None = None  # offset of the first void record not compensated
        self.headers: dict[bytes, bool] = {}  # put header -> void
        self.deletes: dict[bytes, bool] = {}  # delete positions -> void
        self.label = f"store {store!r} of changelog {changelog}"

    # -- the start --------------------------------------------------------------------------
    def _bounds(self) -> tuple[int, int]:
        name, p = self.changelog.name, self.changelog.partition
        return self.manager.start_offsets(name)[p], self.manager.end_offsets(name)[p]

    def _log_start(self) -> int:
        return self.manager.start_offsets(self.changelog.name)[self.changelog.partition]

    def _truncated(self, why: str) -> None:
        """Records the restore needs are gone: fail, or rebuild (by the setting)."""
        if self.settings.on_truncated == "fail":
            raise ChangelogTruncatedError(
                f"cannot restore {self.label}: {why}. Set on_truncated='rebuild' to restore what "
                "the changelog still holds, or reset the computation's state"
            )
        logger.warning("%s: %s; rebuilding from the changelog's start", self.label, why)

    def _checkpoint(self, position: int) -> bytes:
        offset = position if self.first_void is None else self.first_void
        return StoreCheckpoint(self.incarnation, offset, self.committed).encode()

    def run(self) -> RestoreResult:
        started = time.monotonic()
        log_start, end = self._bounds()
        try:
            start, why = _start_point(self.engine, self.incarnation, log_start, end, self.committed)
        except _Truncated as exc:
            self._truncated(str(exc))
            start, why = None, ""
        full = start is None
        if start is None:
            if why and why != "the store has no checkpoint":
                logger.warning("%s: %s; rebuilding from the changelog's start", self.label, why)
            self.engine.clear()
            start = log_start
        progress = self.progress
        progress.start, progress.end, progress.position = start, end, start
        progress.started = time.monotonic()
        self.listener.on_restore_start(self.changelog, self.store, start, end)
        if start < end:
            full = self._read(start, end) or full
        if self.writer is not None:
            self._compensate(progress.position)
        elif start < end or full:  # a standby's pass that read nothing leaves the store as it is
            self._hold(progress.position)
        progress.finished = time.monotonic()
        progress.done = True
        total = progress.restored + progress.skipped
        self.listener.on_restore_end(self.changelog, self.store, total)
        seconds = time.monotonic() - started
        # A standby follows in passes a second apart: only a rebuild is worth a line then.
        log = logger.info if self.writer is not None or full else logger.debug
        log(
            "%s restored: %d records applied, %d void skipped, %d compensated, offsets %d..%d, "
            "%.1f s%s",
            self.label,
            progress.restored,
            progress.skipped,
            progress.compensated,
            start,
            end,
            seconds,
            " (full rebuild)" if full else "",
        )
        return RestoreResult(
            progress.restored,
            progress.skipped,
            progress.compensated,
            start,
            end,
            seconds,
            full,
        )

    # -- reading ----------------------------------------------------------------------------
    def _read(self, start: int, end: int) -> bool:
        """Read from `start` until the position reaches `end`; True if a purge during the
        restore made it rebuild."""
        settings, progress, changelog = self.settings, self.progress, self.changelog
        rebuilt = False
        # A group of its own that never commits: the restore leaves no trace in the log.
        group = f"{changelog.name.urn}-restore"
        tailer: LogTailer[Any] = self.manager.tailer(group, changelog)
        try:
            tailer.seek(LogOffset(changelog, start))
            position = start
            wait = min(0.5, settings.stall_timeout / 10)
            last_move = last_log = time.monotonic()
            while position < end:
                if not self.keep_going():
                    raise RestoreAbandonedError(
                        f"restore of {self.label} abandoned at offset {position} of {end} (the "
                        "task was given up); the store is at a consistent checkpoint"
                    )
                # Reads until a batch is full: the local log returns one stored batch (one
                # checkpoint's append) per read, and an engine write per append would be slow.
                changes: dict[bytes, bytes | None] = {}
                rows, new_position, timeout, purged = 0, position, wait, 0
                while rows < settings.batch_size and new_position < end:
                    read = read_lists(tailer, settings.batch_size - rows, timeout)
                    timeout = 0.0
                    count = 0 if read is None else len(read[0])
                    first = read[2](0) if read is not None and count else new_position
                    if count == 0 or first > new_position:  # a gap: compaction's or a purge's?
                        log_start = self._log_start()
                        if log_start > new_position:
                            purged = log_start
                            break
                    if read is not None and count:
                        self._collect(*read, changes)
                        rows += count
                    new_position = tailer.position(changelog)
                    if not count:
                        break
                if purged:
                    self._truncated(
                        f"the changelog was purged during the restore: its start moved to "
                        f"{purged}, past the restore's position {new_position}"
                    )
                    self._rebuild()
                    rebuilt = True
                    tailer.seek(LogOffset(changelog, purged))
                    position = progress.position = purged
                    last_move = time.monotonic()
                    continue
                if rows:
                    self.engine.write(changes, self._checkpoint(new_position))
                now = time.monotonic()
                if new_position > position:
                    position = progress.position = new_position
                    last_move = now
                    if rows:
                        self.listener.on_batch_restored(self.changelog, self.store, position, rows)
                elif now - last_move >= settings.stall_timeout:
                    raise RestoreStalledError(
                        f"restore of {self.label} stalled: no progress for "
                        f"{settings.stall_timeout:g} s at position {position}, end {end} "
                        f"(partition {changelog.partition} of {changelog.name}); check that the "
                        "log is reachable and that nothing deletes or rewrites it"
                    )
                if now - last_log >= LOG_EVERY:
                    last_log = now
                    eta = progress.eta
                    logger.info(
                        "restoring %s: %d of %d offsets, %.0f records/s, ETA %s",
                        self.label,
                        position - progress.start,
                        end - progress.start,
                        progress.rate,
                        "?" if eta is None else f"{eta:.0f} s",
                    )
        finally:
            tailer.close()
        return rebuilt

    def _rebuild(self) -> None:
        self.engine.clear()
        self.void_keys.clear()
        self.first_void = None

    def _collect(
        self,
        keys: list[bytes],
        values: list[bytes],
        offset_at: Callable[[int], int],
        changes: dict[bytes, bytes | None],
    ) -> None:
        """Add one read's non-void changes to `changes` (the next engine write): its keys, its
        values and the offset of its i-th record (`read_lists`).

        The puts of one append share their header (`streamcore.state.changelog`): its positions
        are decoded once per append (and once per distinct header per restore), the run of
        records behind it is found by `run_end` and applied with one dict update, so there is no
        Python bytecode per record, only C-level slices, comparisons and dict entries. (A run
        found by Arrow's `starts_with` was as fast for large appends and three times slower for
        small ones, its cost being per call.) Deletes take the record-by-record path."""
        count = len(keys)
        void_keys = self.void_keys
        skipped = 0
        first_void = -1
        i = 0
        while i < count:
            value = values[i]
            if value.startswith(PUT_MAGIC):
                size = 4 + int.from_bytes(value[2:4], "big")
                header = value[:size]
                void = self.headers.get(header)
                if void is None:
                    void = self.headers[header] = _void(
                        self._positions(header[4:], offset_at, i), self.committed
                    )
                end = run_end(values, i + 1, header)
                if void:
                    void_keys.update(keys[i:end])
                    skipped += end - i
                    if first_void < 0:
                        first_void = i
                else:
                    payloads = map(itemgetter(slice(size, None)), values[i:end])
                    changes.update(zip(keys[i:end], payloads, strict=True))
                i = end
                continue
            if value.startswith(DELETE_PREFIX):
                blob = self._delete_positions(value, offset_at, i)
                void = self.deletes.get(blob)
                if void is None:
                    void = self.deletes[blob] = _void(
                        self._positions(blob, offset_at, i), self.committed
                    )
            elif not value:  # a tombstone without positions (Kafka's null): always applied
                void = False
            else:
                raise StateError(
                    f"{self.label}: the record at offset {offset_at(i)} is not a "
                    "changelog record (unknown format); is this log a changelog?"
                )
            if void:
                void_keys.add(keys[i])
                skipped += 1
                if first_void < 0:
                    first_void = i
            else:
                changes[keys[i]] = None
            i += 1
        if first_void >= 0 and self.first_void is None:
            self.first_void = offset_at(first_void)
        self.progress.restored += count - skipped
        self.progress.skipped += skipped

    def _positions(
        self, blob: bytes, offset_at: Callable[[int], int], i: int
    ) -> dict[LogPartition, int]:
        positions = decode_positions(blob)
        if positions is None:
            raise StateError(
                f"{self.label}: the record at offset {offset_at(i)} has unreadable "
                f"input positions: {blob[:120]!r}"
            )
        return positions

    def _delete_positions(self, value: bytes, offset_at: Callable[[int], int], i: int) -> bytes:
        try:
            return decode_delete(value)
        except Exception as exc:  # the Record decoder's errors: any of several
            raise StateError(
                f"{self.label}: the delete at offset {offset_at(i)} is not a Record "
                f"envelope ({type(exc).__name__}: {exc})"
            ) from None

    # -- the end ----------------------------------------------------------------------------
    def _hold(self, position: int) -> None:
        """A standby's end: no compensation (only the owner appends to the changelog); the
        checkpoint stays at the first void record, read again by the next pass or restore."""
        self.engine.write({}, self._checkpoint(position))
        self.void_keys.clear()
        self.first_void = None

    def _compensate(self, position: int) -> None:
        """Append the restored value of every void key with the committed positions, then set
        the checkpoint past them (and past the void records)."""
        assert self.writer is not None  # a restore's, never a standby's (see `_hold`)
        if self.void_keys:
            get = self.engine.get
            compensations = {key: get(key) for key in sorted(self.void_keys)}
            position = self.writer.append(self.changelog.partition, compensations, self.committed)
            self.progress.compensated = len(compensations)
            logger.warning(
                "%s: %d records produced by inputs beyond the committed positions were not "
                "applied (their inputs are processed again); %d keys compensated",
                self.label,
                self.progress.skipped,
                len(compensations),
            )
        self.void_keys.clear()
        self.first_void = None
        self.engine.write({}, self._checkpoint(position))
        self.progress.position = max(self.progress.position, position)


def _run(
    manager: LogManager,
    changelog: LogPartition,
    store: str,
    engine: StoreEngine,
    committed: Positions,
    writer: ChangelogWriter | None,
    settings: RestoreSettings | None,
    listener: StateRestoreListener | None,
    keep_going: Callable[[], bool],
    progress: RestoreProgress | None,
) -> RestoreResult:
    """`restore` (with a writer) or `follow` (without), with their defaults."""
    return _Restore(
        manager,
        changelog,
        store,
        engine,
        committed,
        writer,
        settings or RestoreSettings(),
        listener or StateRestoreListener(),
        keep_going,
        progress or RestoreProgress(changelog, store),
    ).run()


def restore(
    manager: LogManager,
    changelog: LogPartition,
    store: str,
    engine: StoreEngine,
    committed: Positions,
    writer: ChangelogWriter,
    *,
    settings: RestoreSettings | None = None,
    listener: StateRestoreListener | None = None,
    keep_going: Callable[[], bool] = lambda: True,
    progress: RestoreProgress | None = None,
) -> RestoreResult:
    """Restore `engine` (store `store`) from partition `changelog` of its changelog, consistent
    with the task's `committed` input positions; `writer` appends the compensations. The
    promise, where it starts and its limits: the module doc. `progress` (made here when not
    given) holds the counters while it runs.

    Raises `RestoreStalledError` (no progress for `settings.stall_timeout`),
    `RestoreAbandonedError` (`keep_going()` answered False; the store is at a consistent
    checkpoint), `ChangelogTruncatedError` (records needed are gone and `on_truncated` is
    "fail"), `StateError` (a record that is not a changelog record)."""
    if Name.of(writer.name) != changelog.name:
        raise StateError(
            f"the writer appends to {writer.name}, not to the changelog {changelog.name} restored"
        )
    return _run(
        manager,
        changelog,
        store,
        engine,
        committed,
        writer,
        settings,
        listener,
        keep_going,
        progress,
    )


def follow(
    manager: LogManager,
    changelog: LogPartition,
    store: str,
    engine: StoreEngine,
    committed: Positions,
    *,
    settings: RestoreSettings | None = None,
    keep_going: Callable[[], bool] = lambda: True,
    progress: RestoreProgress | None = None,
) -> RestoreResult:
    """One pass of a standby replica: bring `engine` up to the changelog's current end as
    `restore` does, except that records produced by inputs beyond `committed` are neither
    applied nor compensated (only the task's owner appends to its changelog). The store's
    checkpoint stays at the first of them, so the next pass, or the new owner's `restore` after a
    failover, reads them again with the committed positions of that time: a failover restores
    only the changelog's tail. Raises what `restore` raises."""
    # No writer: the void records are held back (`_hold`), never compensated.
    return _run(
        manager, changelog, store, engine, committed, None, settings, None, keep_going, progress
    )
