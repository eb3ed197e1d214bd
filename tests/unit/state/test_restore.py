"""The restore of a state store from its changelog (streamcore.state.restore): where it starts,
that it ends on the reader's position (compaction gaps, purges), that changes of inputs beyond
the committed positions are never applied (and stay so on every later restore), and that it is
bounded (stall, abandon). Each test is bounded by the restore's `stall_timeout`; none sleeps."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from log_fixtures import make_config

from streamcore.errors import (
    ChangelogTruncatedError,
    RestoreAbandonedError,
    RestoreStalledError,
    StateError,
)
from streamcore.log import LogManager, LogPartition
from streamcore.log.config import ARCHIVER
from streamcore.log.local.manager import LocalLogManager
from streamcore.log.memory import MemoryLogManager
from streamcore.names import Name
from streamcore.state.changelog import (
    ChangelogWriter,
    StoreCheckpoint,
    changelog_name,
    ensure_changelog,
)
from streamcore.state.engines.memory import MemoryEngine
from streamcore.state.restore import (
    RestoreProgress,
    RestoreSettings,
    StateRestoreListener,
    follow,
    restore,
)

ORDERS = LogPartition(Name.of("test/orders"), 1)
NAME = changelog_name("test/count", "counts")
TASK = 1
CHANGELOG = LogPartition(Name.of(NAME), TASK)
# Every restore here would raise RestoreStalledError after this long without progress.
SETTINGS = RestoreSettings(batch_size=7, stall_timeout=10.0)
HOUR = 3_600_000

Changes = Mapping[bytes, bytes | None]


def at(offset: int) -> dict[LogPartition, int]:
    """Positions: input partition ORDERS processed up to `offset`."""
    return {ORDERS: offset}


class Events(StateRestoreListener):
    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def on_restore_start(self, changelog: LogPartition, store: str, start: int, end: int) -> None:
        self.events.append(("start", changelog, store, start, end))

    def on_batch_restored(
        self, changelog: LogPartition, store: str, batch_end: int, count: int
    ) -> None:
        self.events.append(("batch", batch_end, count))

    def on_restore_end(self, changelog: LogPartition, store: str, total: int) -> None:
        self.events.append(("end", total))


def state(engine: MemoryEngine) -> dict[bytes, bytes]:
    return dict(engine.items())


def checkpoint(engine: MemoryEngine) -> StoreCheckpoint:
    raw = engine.checkpoint()
    assert raw is not None
    return StoreCheckpoint.decode(raw)


def replay(*appends: Changes) -> dict[bytes, bytes]:
    """What applying `appends` in order gives."""
    out: dict[bytes, bytes] = {}
    for changes in appends:
        for key, value in changes.items():
            if value is None:
                out.pop(key, None)
            else:
                out[key] = value
    return out


def counts(first: int, last: int) -> list[dict[bytes, bytes | None]]:
    """Appends `first`..`last`-1: append i sets k{i%5} and k{i%7} and deletes k{(i+3)%5}
    when it differs from both."""
    out: list[dict[bytes, bytes | None]] = []
    for i in range(first, last):
        changes: dict[bytes, bytes | None] = {b"k%d" % (i % 7): b"seven-%d" % i}
        changes[b"k%d" % (i % 5)] = b"five-%d" % i
        gone = b"k%d" % ((i + 3) % 5)
        if gone not in changes:
            changes[gone] = None
        out.append(changes)
    return out


@pytest.fixture
def writer(manager: LogManager) -> Any:
    ensure_changelog(manager, NAME, 2)
    with ChangelogWriter(manager, NAME) as w:
        yield w


def run(
    manager: LogManager,
    engine: MemoryEngine,
    committed: Mapping[LogPartition, int],
    writer: ChangelogWriter,
    **kwargs: Any,
) -> Any:
    kwargs.setdefault("settings", SETTINGS)
    return restore(manager, CHANGELOG, "counts", engine, committed, writer, **kwargs)


# -- full and incremental restores -------------------------------------------------------------
def test_a_full_restore_reads_to_the_end_captured_in_batches(
    manager: LogManager, writer: ChangelogWriter
) -> None:
    appends = counts(0, 12)
    for i, changes in enumerate(appends):
        end = writer.append(TASK, changes, at(i + 1))
    writer.append(0, {b"other-task": b"x"}, at(99))  # task 0's partition: not this store's
    engine, events, progress = MemoryEngine(), Events(), RestoreProgress(CHANGELOG, "counts")
    result = run(manager, engine, at(12), writer, listener=events, progress=progress)
    assert state(engine) == replay(*appends)
    assert (result.start, result.end, result.full) == (0, end, True)
    assert (result.restored, result.skipped, result.compensated) == (end, 0, 0)
    assert checkpoint(engine) == StoreCheckpoint(manager.incarnation(NAME), end, at(12))
    assert events.events[0] == ("start", CHANGELOG, "counts", 0, end)
    assert events.events[-1] == ("end", end)
    batches = [e for e in events.events if e[0] == "batch"]
    assert len(batches) > 1 and batches[-1][1] == end  # in batches, ending at the end
    assert sum(e[2] for e in batches) == end
    assert progress.done and progress.position == end and progress.remaining == 0


def test_a_restore_starts_at_the_stores_checkpoint(
    manager: LogManager, writer: ChangelogWriter
) -> None:
    first, second = counts(0, 6), counts(6, 10)
    for i, changes in enumerate(first):
        middle = writer.append(TASK, changes, at(i + 1))
    engine = MemoryEngine()
    run(manager, engine, at(6), writer)
    for i, changes in enumerate(second):
        end = writer.append(TASK, changes, at(7 + i))
    result = run(manager, engine, at(10), writer)
    assert (result.start, result.end, result.full) == (middle, end, False)
    assert result.restored == end - middle  # only the records after the checkpoint
    assert state(engine) == replay(*first, *second)
    again = run(manager, engine, at(10), writer)  # nothing new: nothing read
    assert (again.start, again.end, again.restored) == (end, end, 0)


def test_an_empty_changelog_restores_an_empty_store(
    manager: LogManager, writer: ChangelogWriter
) -> None:
    engine = MemoryEngine()
    engine.write({b"stale": b"1"}, None)  # data without a checkpoint: not trusted
    result = run(manager, engine, at(0), writer)
    assert (result.start, result.end, result.full, result.restored) == (0, 0, True, 0)
    assert state(engine) == {} and checkpoint(engine).offset == 0


@pytest.mark.parametrize(
    "stored",
    [
        b"not json",
        StoreCheckpoint("another-incarnation", 3, at(1)).encode(),
        StoreCheckpoint(None, 3, at(1)).encode(),  # unknown incarnation: not a match
        # a store flushed before a crash that lost the input commit (positions ahead)
        "ahead",
        "beyond-end",
    ],
    ids=["corrupt", "other-incarnation", "unknown-incarnation", "ahead", "beyond-end"],
)
def test_a_checkpoint_that_cannot_be_trusted_rebuilds_the_store_with_a_warning(
    manager: LogManager, writer: ChangelogWriter, stored: Any, caplog: pytest.LogCaptureFixture
) -> None:
    appends = counts(0, 5)
    for i, changes in enumerate(appends):
        end = writer.append(TASK, changes, at(i + 1))
    incarnation = manager.incarnation(NAME)
    if stored == "ahead":
        stored = StoreCheckpoint(incarnation, end, at(9)).encode()
    elif stored == "beyond-end":
        stored = StoreCheckpoint(incarnation, end + 5, at(5)).encode()
    engine = MemoryEngine()
    engine.write({b"stale": b"1", b"k0": b"wrong"}, stored)
    with caplog.at_level(logging.WARNING, logger="streamcore.state.restore"):
        result = run(manager, engine, at(5), writer)
    assert result.full and result.start == 0
    assert state(engine) == replay(*appends)
    assert "rebuilding from the changelog's start" in caplog.text


def test_a_recreated_changelog_rebuilds_the_store(manager: LogManager) -> None:
    ensure_changelog(manager, NAME, 2)
    with ChangelogWriter(manager, NAME) as writer:
        writer.append(TASK, {b"old": b"1"}, at(1))
        engine = MemoryEngine()
        run(manager, engine, at(1), writer)
    manager.delete(NAME)
    ensure_changelog(manager, NAME, 2)
    with ChangelogWriter(manager, NAME) as writer:
        writer.append(TASK, {b"new": b"2"}, at(1))
        result = run(manager, engine, at(1), writer)
    assert result.full and state(engine) == {b"new": b"2"}


# -- never counting twice ----------------------------------------------------------------------
def test_changes_of_inputs_beyond_the_committed_positions_are_skipped_and_compensated(
    manager: LogManager, writer: ChangelogWriter
) -> None:
    committed = {b"a": b"1", b"b": b"1", b"c": b"1"}
    writer.append(TASK, committed, at(10))  # checkpointed and committed at 10
    # Processed up to 20 and appended, then a crash before the input commit: void.
    void = {b"a": b"2", b"b": None, b"new": b"2"}
    void_end = writer.append(TASK, void, at(20))
    engine = MemoryEngine()
    result = run(manager, engine, at(10), writer)
    assert state(engine) == committed  # the void changes are not in the store
    assert (result.restored, result.skipped, result.compensated) == (3, 3, 3)
    end = manager.end_offsets(NAME)[TASK]
    assert end == void_end + 3  # one compensation per void key
    assert checkpoint(engine) == StoreCheckpoint(manager.incarnation(NAME), end, at(10))
    # The inputs 10..20 are processed again, now from the right state.
    redone = {b"a": b"2", b"new": b"7"}
    writer.append(TASK, redone, at(20))
    # Later, on a new machine, a full restore with the input committed at 20: the void records
    # are within the committed positions now and are applied, but the compensations after them
    # undo them, and the reprocessing's records come last.
    fresh = MemoryEngine()
    later = run(manager, fresh, at(20), writer)
    assert later.full and later.skipped == 0 and later.compensated == 0
    assert (
        state(fresh)
        == replay(committed, redone)
        == {
            b"a": b"2",
            b"b": b"1",  # deleted by a void record only: the compensation brings it back
            b"c": b"1",
            b"new": b"7",
        }
    )


def test_a_standby_follows_without_writing_and_holds_back_uncommitted_changes(
    manager: LogManager, writer: ChangelogWriter
) -> None:
    committed = {b"a": b"1", b"b": b"1"}
    writer.append(TASK, committed, at(10))
    pending = {b"a": b"2", b"c": b"2"}  # appended, inputs not committed yet (or never)
    pending_at = writer.append(TASK, pending, at(20)) - len(pending)
    end = manager.end_offsets(NAME)[TASK]
    copy = MemoryEngine()
    result = follow(manager, CHANGELOG, "counts", copy, at(10), settings=SETTINGS)
    assert state(copy) == committed
    assert (result.restored, result.skipped, result.compensated) == (2, 2, 0)
    assert manager.end_offsets(NAME)[TASK] == end  # a standby never appends
    # Its checkpoint waits at the first held-back record, read again by the next pass.
    assert checkpoint(copy) == StoreCheckpoint(manager.incarnation(NAME), pending_at, at(10))
    # The owner commits its inputs: the next pass applies them.
    again = follow(manager, CHANGELOG, "counts", copy, at(20), settings=SETTINGS)
    assert state(copy) == replay(committed, pending)
    assert (again.start, again.restored, again.full) == (pending_at, 2, False)
    # The owner died before committing instead: the new owner's restore from the copy reads
    # only the tail and compensates, as a restore from the start would.
    taken = MemoryEngine()
    follow(manager, CHANGELOG, "counts", taken, at(10), settings=SETTINGS)
    takeover = run(manager, taken, at(10), writer)
    assert (takeover.start, takeover.full, takeover.compensated) == (pending_at, False, 2)
    assert state(taken) == committed


@pytest.mark.parametrize("void_at", [1, 63, 64, 65, 2999, 3000])
def test_one_void_record_in_the_middle_of_a_large_read_is_skipped_alone(
    manager: LogManager, writer: ChangelogWriter, void_at: int
) -> None:
    # One read holds runs of puts with the same header (the restore finds a run's end by
    # comparing the records' heads in windows that double from 64) around one void put: the
    # records on each side of it are applied, it alone is skipped and compensated.
    before = {b"a%05d" % i: b"1" for i in range(void_at)}
    after = {b"b%05d" % i: b"1" for i in range(3000)}
    writer.append(TASK, before, at(10))
    writer.append(TASK, {b"void": b"2", b"a00000": b"2"}, at(20))  # a crash lost its commit
    writer.append(TASK, after, at(10))  # the same header as the first append
    engine = MemoryEngine()
    result = run(manager, engine, at(10), writer, settings=RestoreSettings(stall_timeout=10.0))
    assert state(engine) == {**before, **after}
    assert (result.restored, result.skipped, result.compensated) == (void_at + 3000, 2, 2)


def test_a_restore_interrupted_before_its_compensations_compensates_on_the_next_one(
    manager: LogManager, writer: ChangelogWriter
) -> None:
    void_at = writer.append(TASK, {b"a": b"1"}, at(10))  # the first void record's offset
    writer.append(TASK, {b"a": b"void", b"b": b"void"}, at(20))
    for i in range(5):  # records after the void ones, so there is more than one batch
        writer.append(TASK, {b"k%d" % i: b"x"}, at(10))
    progress = RestoreProgress(CHANGELOG, "counts")
    engine = MemoryEngine()
    settings = RestoreSettings(batch_size=3, stall_timeout=10.0)
    with pytest.raises(RestoreAbandonedError, match=r"abandoned at offset [3-5] of 8"):
        run(  # given up once the void records are read, before their compensation
            manager,
            engine,
            at(10),
            writer,
            settings=settings,
            keep_going=lambda: progress.skipped == 0,
            progress=progress,
        )
    # The checkpoint points back at the first void record, not compensated yet.
    assert checkpoint(engine).offset == void_at
    result = run(manager, engine, at(10), writer, settings=settings)
    assert result.start == void_at and result.compensated == 2
    assert state(engine) == {b"a": b"1", **{b"k%d" % i: b"x" for i in range(5)}}
    fresh = MemoryEngine()
    run(manager, fresh, at(20), writer)  # the input now committed past the void records
    assert state(fresh) == state(engine)


# -- never hanging -----------------------------------------------------------------------------
def test_a_compacted_changelog_with_gaps_restores_to_its_end(tmp_path: Path) -> None:
    manager = LocalLogManager(tmp_path / "log", config=make_config(tmp_path))
    manager.create(NAME, 2, segment_bytes=512, retention="0")
    with ChangelogWriter(manager, NAME) as writer:
        appends = counts(0, 60)
        for i, changes in enumerate(appends):
            end = writer.append(TASK, changes, at(i + 1))
        manager.commit_position(CHANGELOG, ARCHIVER, end)  # the archiver holds nothing back
        later = time.time_ns() // 1_000_000 + HOUR
        [_, compacted] = manager.compact(NAME, now_ms=later, delete_retention_ms=0)
        assert compacted.removed > 100 and compacted.tombstones > 0  # gaps, deletes gone
        engine = MemoryEngine()
        result = run(manager, engine, at(60), writer)
        assert result.end == end and result.restored < end  # fewer records than offsets
        assert state(engine) == replay(*appends)
        assert checkpoint(engine).offset == end
    manager.close()


@pytest.fixture
def expiring(tmp_path: Path) -> Any:
    """A local changelog of 512-byte segments with a one-hour retention, 40 appends on task 1."""
    manager = LocalLogManager(tmp_path / "log", config=make_config(tmp_path))
    manager.create(NAME, 2, segment_bytes=512, retention="1h")
    writer = ChangelogWriter(manager, NAME)
    for i, changes in enumerate(counts(0, 40)):
        writer.append(TASK, changes, at(i + 1))
    yield manager, writer
    writer.close()
    manager.close()


def purge(manager: LocalLogManager) -> int:
    """Purge every sealed segment (an hour later); the new start offset of the task."""
    manager.purge(NAME, now_ms=time.time_ns() // 1_000_000 + 2 * HOUR, force=True)
    return manager.start_offsets(NAME)[TASK]


def fresh_restore(manager: LogManager, writer: ChangelogWriter) -> dict[bytes, bytes]:
    engine = MemoryEngine()
    run(manager, engine, at(40), writer)
    return state(engine)


def test_a_changelog_purged_during_the_restore_rebuilds_from_its_new_start(
    expiring: Any, caplog: pytest.LogCaptureFixture
) -> None:
    manager, writer = expiring

    class PurgeAfterFirstBatch(StateRestoreListener):
        start: int | None = None

        def on_batch_restored(self, *args: Any) -> None:
            if self.start is None:
                self.start = purge(manager)

    listener = PurgeAfterFirstBatch()
    engine = MemoryEngine()
    with caplog.at_level(logging.WARNING, logger="streamcore.state.restore"):
        result = run(manager, engine, at(40), writer, listener=listener)
    assert listener.start is not None and listener.start > SETTINGS.batch_size
    assert "purged during the restore" in caplog.text
    assert result.full
    assert state(engine) == fresh_restore(manager, writer)  # what the changelog still holds


def test_a_changelog_purged_during_the_restore_fails_it_when_so_set(expiring: Any) -> None:
    manager, writer = expiring

    class PurgeOnce(StateRestoreListener):
        def on_batch_restored(self, *args: Any) -> None:
            purge(manager)

    settings = RestoreSettings(batch_size=7, stall_timeout=10.0, on_truncated="fail")
    with pytest.raises(ChangelogTruncatedError, match="purged during the restore"):
        run(manager, MemoryEngine(), at(40), writer, listener=PurgeOnce(), settings=settings)


def test_a_checkpoint_below_the_changelogs_start_rebuilds_or_fails(
    expiring: Any, caplog: pytest.LogCaptureFixture
) -> None:
    manager, writer = expiring
    engine = MemoryEngine()
    run(manager, engine, at(40), writer)
    engine.write({}, StoreCheckpoint(manager.incarnation(NAME), 2, at(40)).encode())
    start = purge(manager)
    assert start > 2
    fail = RestoreSettings(stall_timeout=10.0, on_truncated="fail")
    with pytest.raises(ChangelogTruncatedError, match=f"below the changelog's start {start}"):
        run(manager, engine, at(40), writer, settings=fail)
    with caplog.at_level(logging.WARNING, logger="streamcore.state.restore"):
        result = run(manager, engine, at(40), writer)
    assert result.full and result.start == start
    assert "below the changelog's start" in caplog.text


class _StuckTailer:
    """A tailer that never gets anywhere (a fake, for this one test: no real backend can be
    made to stop short of its end on demand)."""

    def __init__(self, start: int) -> None:
        self.start = start
        self.reads = 0
        self.closed = False

    def seek(self, offset: Any) -> None:
        self.start = offset.offset

    def read_arrow(self, max_records: int, timeout: float) -> None:
        self.reads += 1
        return None

    def position(self, partition: LogPartition) -> int:
        return self.start

    def close(self) -> None:
        self.closed = True


class _StuckManager(MemoryLogManager):
    def __init__(self) -> None:
        super().__init__()
        self.stuck = _StuckTailer(0)

    def tailer(self, group: str, source: Any, codec: Any = None) -> Any:
        return self.stuck


def test_a_restore_without_progress_fails_within_its_stall_timeout() -> None:
    manager = _StuckManager()
    ensure_changelog(manager, NAME, 2)
    with ChangelogWriter(manager, NAME) as writer:
        writer.append(TASK, {b"a": b"1", b"b": b"2"}, at(1))
        settings = RestoreSettings(stall_timeout=0.3)
        began = time.monotonic()
        with pytest.raises(RestoreStalledError) as caught:
            run(manager, MemoryEngine(), at(1), writer, settings=settings)
        assert time.monotonic() - began < 5.0
    message = str(caught.value)
    assert "test-count-counts-changelog-01" in message and "position 0, end 2" in message
    assert f"partition {TASK} of {NAME}" in message and caught.value.retryable
    assert manager.stuck.reads >= 2 and manager.stuck.closed


class _MarkerTailer:
    """A real memory tailer whose position, once past the last record, also moves past a
    trailing offset that holds no record, as a Kafka consumer's does past a transaction marker
    (a fake for this one test: our logs write no markers)."""

    def __init__(self, tailer: Any, manager: MemoryLogManager) -> None:
        self.tailer, self.manager = tailer, manager

    def seek(self, offset: Any) -> None:
        self.tailer.seek(offset)

    def read_arrow(self, max_records: int, timeout: float) -> Any:
        return self.tailer.read_arrow(max_records, timeout)

    def position(self, partition: LogPartition) -> int:
        position = self.tailer.position(partition)
        last = MemoryLogManager.end_offsets(self.manager, partition.name)[partition.partition]
        return position + 1 if position == last else position

    def close(self) -> None:
        self.tailer.close()


class _MarkerManager(MemoryLogManager):
    """Every partition ends with one offset that has no record (a trailing marker)."""

    def end_offsets(self, name: Any) -> list[int]:
        return [end + 1 for end in super().end_offsets(name)]

    def tailer(self, group: str, source: Any, codec: Any = None) -> Any:
        return _MarkerTailer(super().tailer(group, source, codec), self)


def test_a_restore_ends_on_the_position_past_a_trailing_offset_without_record() -> None:
    manager = _MarkerManager()
    ensure_changelog(manager, NAME, 2)
    with ChangelogWriter(manager, NAME) as writer:
        appends = counts(0, 4)
        for i, changes in enumerate(appends):
            writer.append(TASK, changes, at(i + 1))
        engine = MemoryEngine()
        began = time.monotonic()
        result = run(manager, engine, at(4), writer)
    # "last record's offset + 1" never reaches this end: the position does, at once.
    assert time.monotonic() - began < SETTINGS.stall_timeout
    assert result.end == result.restored + 1
    assert state(engine) == replay(*appends) and checkpoint(engine).offset == result.end


def test_an_abandoned_restore_leaves_the_store_at_a_consistent_checkpoint(
    manager: LogManager, writer: ChangelogWriter
) -> None:
    appends = counts(0, 10)
    for i, changes in enumerate(appends):
        writer.append(TASK, changes, at(i + 1))
    calls = 0

    def keep_going() -> bool:
        nonlocal calls
        calls += 1
        return calls <= 2  # two batches, then the task is given up

    engine = MemoryEngine()
    with pytest.raises(RestoreAbandonedError) as caught:
        run(manager, engine, at(10), writer, keep_going=keep_going)
    assert caught.value.retryable
    offset = checkpoint(engine).offset
    assert 0 < offset < manager.end_offsets(NAME)[TASK]
    # The store holds exactly the records before its checkpoint: replaying them gives it.
    tailer = manager.tailer("test/reader", CHANGELOG)
    records = []
    while len(records) < offset:
        records.extend(tailer.read_batch(offset - len(records), timeout=5.0))
    tailer.close()
    partial = restore_of(records)
    assert state(engine) == partial
    result = run(manager, engine, at(10), writer)  # the next owner goes on from there
    assert result.start == offset and state(engine) == replay(*appends)


def restore_of(records: list[Any]) -> dict[bytes, bytes]:
    """The state of changelog records read with a plain tailer (puts only, deletes decoded)."""
    from streamcore.state.changelog import DELETE_PREFIX

    out: dict[bytes, bytes] = {}
    for record in records:
        key, value = record.key.encode(), record.message
        if value.startswith(DELETE_PREFIX):
            out.pop(key, None)
        else:
            out[key] = value[4 + int.from_bytes(value[2:4], "big") :]
    return out


def test_the_writer_must_append_to_the_changelog_restored(manager: LogManager) -> None:
    ensure_changelog(manager, NAME, 2)
    other = changelog_name("test/count", "others")
    ensure_changelog(manager, other, 2)
    with ChangelogWriter(manager, other) as writer, pytest.raises(StateError, match="appends to"):
        run(manager, MemoryEngine(), at(0), writer)


def test_a_log_that_is_not_a_changelog_is_refused(manager: LogManager) -> None:
    ensure_changelog(manager, NAME, 2)
    with manager.appender(NAME) as appender:
        appender.append_to(TASK, "k", b"plain bytes")
    with (
        ChangelogWriter(manager, NAME) as writer,
        pytest.raises(StateError, match="not a changelog"),
    ):
        run(manager, MemoryEngine(), at(0), writer)


@pytest.mark.parametrize(
    "settings",
    [{"batch_size": 0}, {"stall_timeout": 0}, {"on_truncated": "ignore"}],
    ids=["batch_size", "stall_timeout", "on_truncated"],
)
def test_settings_out_of_range_are_refused(settings: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="restore settings"):
        RestoreSettings(**settings)
