"""Key compaction of the local log (streamcore.log.local.compaction): the latest record per key
stays at its offset, tombstones delete keys, readers move past removed offsets without
reporting a loss, and a crash or a dry run changes nothing."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from streamcore.codecs import get_codec
from streamcore.log import LogPartition
from streamcore.log.config import ARCHIVER
from streamcore.log.local import compaction as compaction_module
from streamcore.log.local.maintenance import maintenance_lock
from streamcore.log.local.manager import LocalLogManager
from streamcore.log.local.reader import PartitionCursor
from streamcore.log.local.segment import list_segments, segment_name
from streamcore.record import TOMBSTONE, Flag, Record

HOUR = 3_600_000
MINUTE = 60_000
NAME = "test/compacted"
KEYS = 5


def value(i: int) -> bytes:
    return f"{i:08d}".encode().ljust(40, b"x")


@pytest.fixture
def make_log(local_manager_factory: Callable[..., LocalLogManager]):
    """`make_log(records)` → (manager, t0): a 1-partition log of `records` records, record i
    with key k{i % 5} appended at t0 + i minutes (t0 ten hours ago), 1 KiB segments, and the
    archiver at the end (so it holds nothing)."""

    def make(records: int = 100) -> tuple[LocalLogManager, int]:
        m = local_manager_factory()
        m.create(NAME, 1, segment_bytes=1024, retention="0")
        t0 = time.time_ns() // 1_000_000 - 10 * HOUR
        app = m.appender(NAME)
        for i in range(records):
            app.append_batch([(f"k{i % KEYS}", value(i))], timestamps=[t0 + i * MINUTE])
        m.commit_position(LogPartition.of(NAME, 0), ARCHIVER, records)
        return m, t0

    return make


def folder(m: LocalLogManager) -> Path:
    return m.partition_folder(LogPartition.of(NAME, 0))


def read_all(m: LocalLogManager) -> tuple[list[tuple[int, str, bytes, int]], PartitionCursor]:
    cursor = PartitionCursor(folder(m), "test")
    out = []
    while records := cursor.next_records(1000):
        out.extend((o, k, v, ts) for o, ts, k, v in records)
    cursor.close()
    return out, cursor


def sealed_end(m: LocalLogManager) -> int:
    return list_segments(folder(m))[-1]


def test_keeps_the_latest_record_per_key_at_its_offset(make_log) -> None:
    m, _ = make_log()
    before, _ = read_all(m)
    end = sealed_end(m)
    m.commit_position(LogPartition.of(NAME, 0), "slow", 0)  # groups do not hold compaction
    [result] = m.compact(NAME)
    after, cursor = read_all(m)
    latest = {}
    for offset, key, _, _ in before:
        if offset < end:
            latest[key] = offset
    expected = [r for r in before if r[0] >= end or latest[r[1]] == r[0]]
    assert after == expected  # offsets, keys, values and timestamps as they were
    assert result.removed == end - KEYS == len(before) - len(after)
    assert (result.keys, result.until, result.tombstones) == (KEYS, end, 0)
    assert result.bytes_after < result.bytes_before
    assert cursor.lost == 0 and cursor.compacted == result.removed
    assert m.end_offsets(NAME) == [100] and m.start_offsets(NAME) == [0]
    again = m.compact(NAME)[0]
    assert (again.removed, again.rewritten) == (0, 0)
    assert read_all(m)[0] == expected


def test_readers_move_past_removed_offsets_without_a_loss(make_log) -> None:
    m, _ = make_log()
    m.compact(NAME)
    kept = [r[0] for r in read_all(m)[0]]
    removed = next(o for o in range(100) if o not in kept)
    assert m.record_at(LogPartition.of(NAME, 0), removed) is None
    partition = LogPartition.of(NAME, 0)
    m.commit_position(partition, "late", removed)
    with m.tailer("late", NAME) as tailer:
        offsets = []
        while (record := tailer.read(0)) is not None:
            offsets.append(record.offset)
        assert offsets == [o for o in kept if o >= removed]
        assert m.lag(NAME, "late").lag == 100 - removed  # lag counts offsets
    appender = m.appender(NAME)
    appender.append("k0", b"after compaction")
    assert read_all(m)[0][-1][:3] == (100, "k0", b"after compaction")


def test_tombstones_delete_their_key_once_old_enough(make_log) -> None:
    m, t0 = make_log(0)
    codec = get_codec("avro")
    app = m.appender(NAME)
    rows = [
        ("empty", b"v1"),
        ("empty", b""),  # an empty value
        ("no-data", codec.encode(Record("no-data", b"v1", 1))),
        ("no-data", codec.encode(Record("no-data", b"", 2))),  # a Record with empty data
        ("flagged", codec.encode(Record("flagged", b"v1", 3))),
        ("flagged", codec.encode(Record("flagged", b"why", 4, Flag.DEFAULT | TOMBSTONE))),
        ("alive", codec.encode(Record("alive", b"v1", 5))),
    ]
    for i, (key, data) in enumerate(rows):
        app.append_batch([(key, data)], timestamps=[t0 + i * MINUTE])
    for i in range(30):  # younger filler to seal the segments above
        app.append_batch([(f"filler{i}", value(i))], timestamps=[t0 + HOUR + i * MINUTE])
    m.commit_position(LogPartition.of(NAME, 0), ARCHIVER, m.end_offsets(NAME)[0])

    recent = m.compact(NAME, delete_retention_ms=20 * HOUR)[0]  # the tombstones are 10 h old
    keys = [k for _, k, _, _ in read_all(m)[0]]
    assert keys[:4] == ["empty", "no-data", "flagged", "alive"]  # deletes still visible
    assert (recent.removed, recent.tombstones) == (3, 0)

    expired = m.compact(NAME, delete_retention_ms=HOUR)[0]
    keys = [k for _, k, _, _ in read_all(m)[0]]
    assert keys[0] == "alive" and not {"empty", "no-data", "flagged"} & set(keys)
    assert (expired.removed, expired.tombstones) == (3, 3)


def test_the_archiver_holds_compaction_until_it_has_archived(make_log) -> None:
    m, _ = make_log()
    bases = list_segments(folder(m))
    partition = LogPartition.of(NAME, 0)
    m.commit_position(partition, ARCHIVER, bases[2] + 1)  # inside the third segment
    [result] = m.compact(NAME)
    assert (result.segments, result.until) == (2, bases[2])
    assert [o for o, *_ in read_all(m)[0]][-(100 - bases[2]) :] == list(range(bases[2], 100))


def test_nothing_is_compacted_before_the_archiver_came(make_log, local_manager_factory) -> None:
    m = local_manager_factory()
    m.create(NAME, 1, segment_bytes=1024)
    app = m.appender(NAME)
    t0 = time.time_ns() // 1_000_000 - 10 * HOUR
    for i in range(100):
        app.append_batch([(f"k{i % KEYS}", value(i))], timestamps=[t0 + i * MINUTE])
    [result] = m.compact(NAME)
    assert (result.segments, result.removed) == (0, 0)


def test_young_segments_wait_for_the_minimum_lag(make_log) -> None:
    m, t0 = make_log()
    assert m.compact(NAME, min_lag_ms=11 * HOUR)[0].segments == 0
    now = t0 + 10 * HOUR
    partial = m.compact(NAME, now_ms=now, min_lag_ms=10 * HOUR - 30 * MINUTE)[0]
    assert 0 < partial.until <= 30


def test_a_dry_run_changes_nothing_and_says_what_a_run_would_do(make_log) -> None:
    m, _ = make_log()

    def data() -> dict[str, bytes]:  # segments and indexes; not the lock files
        return {p.name: p.read_bytes() for p in folder(m).iterdir() if p.name[0] != "."}

    files = data()
    planned = m.compact(NAME, dry_run=True)[0]
    assert data() == files
    done = m.compact(NAME)[0]
    assert planned == done


def test_a_crash_before_the_rename_keeps_the_segment_whole(make_log, monkeypatch) -> None:
    m, _ = make_log()
    before, _ = read_all(m)
    real_replace = compaction_module.os.replace
    calls = []

    def crash(src, dst):
        if str(src).endswith(compaction_module.LEFTOVER_SUFFIX):
            calls.append(src)
            raise OSError("simulated crash before the rename")
        real_replace(src, dst)

    monkeypatch.setattr(compaction_module.os, "replace", crash)
    with pytest.raises(OSError, match="simulated crash"):
        m.compact(NAME)
    monkeypatch.undo()
    leftover = Path(calls[0])
    assert leftover.exists()  # the rewritten copy, never read
    assert read_all(m)[0] == before
    result = m.compact(NAME)[0]
    assert not leftover.exists() and result.removed == sealed_end(m) - KEYS
    assert {o for o, *_ in read_all(m)[0]} < {o for o, *_ in before}


def test_a_busy_partition_is_skipped_and_a_purge_waits(make_log) -> None:
    m, _ = make_log()
    with maintenance_lock(folder(m)) as locked:
        assert locked
        assert m.compact(NAME)[0].busy
        writer = m._writer(m.resolve_partitions(NAME)[0].name, 0)
        assert writer.purge_expired(below=None) == []
    assert not m.compact(NAME)[0].busy


def test_compacted_segments_still_expire_by_their_newest_record(make_log) -> None:
    m, t0 = make_log()
    bases = list_segments(folder(m))
    m.compact(NAME)
    m._writer(m.resolve_partitions(NAME)[0].name, 0).retention_ms = HOUR
    removed = m._writer(m.resolve_partitions(NAME)[0].name, 0).purge_expired(
        now=t0 + (bases[1] - 1) * MINUTE + HOUR + 1
    )
    assert removed == bases[:1]
    assert segment_name(bases[1]) in {p.name for p in folder(m).iterdir()}
