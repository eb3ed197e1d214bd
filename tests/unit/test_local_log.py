"""Behaviour specific to the local-file log: segments, index, torn tails, corruption, the
single-writer lock, cross-process tailing, committed-position files, retention, fsync modes, size
limits and the Arrow fast path."""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import textwrap
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from streamcore.config import load_config
from streamcore.errors import (
    ConfigError,
    CorruptLogError,
    InvalidRecordError,
    LogExistsError,
    LogLockedError,
    RecordTooLargeError,
)
from streamcore.log import LogLag, LogOffset, LogPartition
from streamcore.log.config import ARCHIVER
from streamcore.log.local import writer as writer_module
from streamcore.log.local.manager import LocalLogManager
from streamcore.log.local.reader import PartitionCursor
from streamcore.log.local.segment import (
    HEADER_SIZE,
    list_segments,
    parse_header,
    read_index,
    segment_name,
)
from streamcore.log.partitioner import partition_for_key

Factory = Callable[..., LocalLogManager]
HOUR = 3_600_000
DAY = 24 * HOUR


def drain(tailer, timeout: float = 0.0) -> list:
    out = []
    rec = tailer.read(timeout)
    while rec is not None:
        out.append(rec)
        rec = tailer.read(0)
    return out


def payload(i: int, size: int = 40) -> bytes:
    return f"{i:08d}".encode().ljust(size, b"x")


def folder_of(m: LocalLogManager, name: str, partition: int = 0) -> Path:
    return m.partition_folder(LogPartition.of(name, partition))


def batch_positions(path: Path) -> list[tuple[int, int, int]]:
    """(file position, base offset, size) of every batch of a segment."""
    data = path.read_bytes()
    out, pos = [], 0
    while (header := parse_header(data, pos)) is not None and pos + header.size <= len(data):
        out.append((pos, header.base_offset, header.size))
        pos += header.size
    return out


def last_segment(folder: Path) -> Path:
    return folder / segment_name(list_segments(folder)[-1])


def run_script(tmp_path: Path, name: str, code: str, *args: str) -> subprocess.Popen:
    script = tmp_path / name
    script.write_text(textwrap.dedent(code))
    return subprocess.Popen(
        [sys.executable, "-u", str(script), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        bufsize=1,
    )


def expect_line(proc: subprocess.Popen, prefix: str) -> str:
    line = proc.stdout.readline()
    if not line.startswith(prefix):
        proc.kill()
        raise AssertionError(f"expected {prefix!r} from child, got {line!r}: {proc.stderr.read()}")
    return line.strip()


@pytest.fixture
def log_with(local_manager_factory: Factory) -> Callable[..., tuple[LocalLogManager, str]]:
    """`log_with(partitions=1, **create_options)` → (manager, name) of a new local log."""

    def make(partitions: int = 1, **options) -> tuple[LocalLogManager, str]:
        m = local_manager_factory()
        name = "test/local"
        m.create(name, partitions, **options)
        return m, name

    return make


def _create_at_once(
    manager: LocalLogManager,
    name: str,
    start: threading.Barrier,
    results: list[bool | BaseException],
    i: int,
) -> None:
    start.wait()
    try:
        results[i] = manager.create(name, 2)
    except BaseException as exc:  # the assertion on results reports it
        results[i] = exc


class TestCreateOptions:
    def test_metadata_records_the_options(self, log_with) -> None:
        m, name = log_with(2, retention="2h", segment_bytes=4096, segment_roll="5m", fsync="batch")
        assert m.retention_ms(name) == 2 * HOUR
        meta = m._meta(name)
        assert (meta["segment_bytes"], meta["segment_roll_ms"], meta["fsync"]) == (
            4096,
            300_000,
            "batch",
        )
        fresh = LocalLogManager(m.root, config=m.config)
        assert fresh.size(name) == 2
        assert fresh.retention_ms(name) == 2 * HOUR

    def test_a_log_from_before_incarnations_has_an_unknown_one(self, log_with) -> None:
        """metadata.json keeps the incarnation; a log created before it did reports None."""
        m, name = log_with()
        meta_file = folder_of(m, name).parent / "metadata.json"
        meta = json.loads(meta_file.read_text())
        assert m.incarnation(name) == meta["incarnation"] and len(meta["incarnation"]) == 32
        del meta["incarnation"]
        meta_file.write_text(json.dumps(meta))
        assert LocalLogManager(m.root, config=m.config).incarnation(name) is None

    def test_unknown_option(self, local_manager_factory: Factory) -> None:
        with pytest.raises(ConfigError, match=r"unknown local-log option\(s\) \['colour'\]"):
            local_manager_factory().create("test/x", 1, colour="red")

    def test_bad_fsync_option(self, local_manager_factory: Factory) -> None:
        with pytest.raises(ConfigError, match=r"fsync must be one of .*got 'sometimes'"):
            local_manager_factory().create("test/x", 1, fsync="sometimes")

    def test_bad_retention_option(self, local_manager_factory: Factory) -> None:
        with pytest.raises(ConfigError, match=r"invalid duration '4 days'"):
            local_manager_factory().create("test/x", 1, retention="4 days")

    def test_defaults_come_from_the_configuration(self, local_manager_factory: Factory) -> None:
        m = local_manager_factory(partitions=3, retention_ms=HOUR, fsync="always")
        m.create("test/x")
        assert m.size("test/x") == 3
        assert m.retention_ms("test/x") == HOUR
        assert m._meta("test/x")["fsync"] == "always"

    def test_delete_refuses_while_an_appender_is_open(self, log_with) -> None:
        m, name = log_with()
        app = m.appender(name)
        app.append("k", b"v")
        with pytest.raises(LogExistsError, match=r"is in use in this process.*close them"):
            m.delete(name)
        app.close()
        assert m.delete(name) is True
        assert not folder_of(m, name).parent.exists()

    def test_log_folder_layout(self, log_with) -> None:
        m, name = log_with(2)
        m.appender(name).append_to(1, "k", b"v")
        log_folder = m.root / "test-local"
        assert (log_folder / "metadata.json").is_file()
        assert (log_folder / "P-00").is_dir()
        assert (log_folder / "P-01" / segment_name(0)).is_file()
        assert (log_folder / "P-01" / ".lock").read_text() == str(os.getpid())

    def test_managers_creating_one_log_at_once_agree_on_one_creation(self, tmp_path) -> None:
        """Processes sharing a root (here: managers, each with its own lock) that create the same
        log at the same moment: one creation wins, the others see an existing log, and every
        manager reads the winner's incarnation (each used to write the same temporary file, and
        the slower one's rename failed with FileNotFoundError)."""
        config = load_config(home=tmp_path)
        managers = [LocalLogManager(tmp_path / "logs", config=config) for _ in range(6)]
        for round_ in range(15):
            name = f"race/log-{round_}"
            start = threading.Barrier(len(managers))
            results: list[bool | BaseException] = [False] * len(managers)

            threads = [
                threading.Thread(target=_create_at_once, args=(m, name, start, results, i))
                for i, m in enumerate(managers)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert sorted(map(repr, results)) == ["False"] * (len(managers) - 1) + ["True"]
            assert len({m.incarnation(name) for m in managers}) == 1
            assert not list(managers[0].folder(name).glob(".*.tmp"))
        for m in managers:
            m.close()


class TestSegments:
    def test_roll_by_size_and_read_across_segments(self, log_with) -> None:
        m, name = log_with(1, segment_bytes=1024)
        app = m.appender(name)
        for i in range(100):
            assert app.append("k", payload(i)).offset == i
        folder = folder_of(m, name)
        bases = list_segments(folder)
        assert len(bases) >= 8
        for base in bases:
            seg = folder / segment_name(base)
            assert seg.stat().st_size <= 1024
            first = batch_positions(seg)[0]
            assert first[:2] == (0, base)  # named by the offset of its first record
        with m.tailer("g", name) as tailer:
            assert [r.message for r in drain(tailer)] == [payload(i) for i in range(100)]

    def test_a_batch_bigger_than_a_segment_gets_its_own_segment(self, log_with) -> None:
        m, name = log_with(1, segment_bytes=1024)
        app = m.appender(name)
        app.append("k", b"small")
        app.append_batch([("k", payload(i, 100)) for i in range(30)], partition=0)
        app.append("k", b"after")
        folder = folder_of(m, name)
        assert list_segments(folder) == [0, 1, 31]
        with m.tailer("g", name) as tailer:
            assert len(drain(tailer)) == 32

    def test_reading_many_segments_after_reopen(self, log_with, local_manager_factory) -> None:
        m, name = log_with(2, segment_bytes=1024)
        app = m.appender(name)
        app.append_batch([(f"key-{i}", payload(i)) for i in range(50)])
        for i in range(50, 300):
            app.append(f"key-{i % 13}", payload(i))
        expected_ends = m.end_offsets(name)
        m.close()
        again = local_manager_factory()
        assert again.end_offsets(name) == expected_ends
        with again.tailer("g", name) as tailer:
            records = drain(tailer)
            assert sorted(r.message for r in records) == [payload(i) for i in range(300)]
            for p in range(2):
                offsets = [r.offset for r in records if r.partition.partition == p]
                assert offsets == list(range(expected_ends[p]))
            # seek into the middle of a later segment
            p0 = LogPartition.of(name, 0)
            target = expected_ends[0] - 7
            tailer.seek(LogOffset(p0, target))
            rest = [r for r in drain(tailer) if r.partition == p0]
            assert [r.offset for r in rest] == list(range(target, expected_ends[0]))
        # a reopened writer continues the offsets
        app2 = again.appender(name)
        assert app2.append_to(0, "k", b"next").offset == expected_ends[0]

    def test_roll_by_time(self, log_with, monkeypatch: pytest.MonkeyPatch) -> None:
        clock = [1_700_000_000_000]
        monkeypatch.setattr(writer_module, "now_ms", lambda: clock[0])
        m, name = log_with(1, segment_roll="1h")
        app = m.appender(name)
        app.append("k", b"a")
        clock[0] += HOUR - 1
        app.append("k", b"b")
        assert list_segments(folder_of(m, name)) == [0]
        clock[0] += 1  # one hour after the segment's first record
        app.append("k", b"c")
        clock[0] += 10
        app.append("k", b"d")
        assert list_segments(folder_of(m, name)) == [0, 2]
        clock[0] += 2 * HOUR
        app.append("k", b"e")
        assert list_segments(folder_of(m, name)) == [0, 2, 4]
        with m.tailer("g", name) as tailer:
            records = drain(tailer)
        assert [r.message for r in records] == [b"a", b"b", b"c", b"d", b"e"]
        assert [r.timestamp for r in records] == [
            1_700_000_000_000 + d for d in (0, HOUR - 1, HOUR, HOUR + 10, 3 * HOUR + 10)
        ]

    def test_roll_by_time_after_reopen(
        self, log_with, local_manager_factory, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        clock = [1_700_000_000_000]
        monkeypatch.setattr(writer_module, "now_ms", lambda: clock[0])
        m, name = log_with(1, segment_roll="1h")
        m.appender(name).append("k", b"a")
        m.close()
        clock[0] += HOUR
        again = local_manager_factory()
        again.appender(name).append("k", b"b")
        assert list_segments(folder_of(again, name)) == [0, 1]

    def test_history_appended_in_one_run_rolls_by_record_time(
        self, log_with, local_manager_factory
    ) -> None:
        """Eight days of history appended with their original times (`timestamps=`) in one
        run: a segment per day, as Kafka's segment.ms judges record timestamps, not the few
        seconds the appends took; readers and offset_for_timestamp see one log, and a reopened
        writer judges by the same times."""
        m, name = log_with(1)  # segment_roll: a day
        t0 = time.time_ns() // 1_000_000 - 8 * DAY
        append_days(m, name, t0, days=8)
        assert list_segments(folder_of(m, name)) == [6 * d for d in range(8)]
        with m.tailer("g", name) as tailer:
            records = drain(tailer)
            p0 = LogPartition.of(name, 0)
            assert tailer.offset_for_timestamp(p0, t0 + 3 * DAY) == LogOffset(p0, 18)
            assert tailer.offset_for_timestamp(p0, t0 + 3 * DAY + 1) == LogOffset(p0, 19)
        assert [r.offset for r in records] == list(range(48))
        assert [r.timestamp for r in records] == [
            t0 + d * DAY + j * 4 * HOUR for d in range(8) for j in range(6)
        ]
        m.close()
        again = local_manager_factory()
        app = again.appender(name)
        app.append_batch([("k", b"late")], partition=0, timestamps=[t0 + 7 * DAY + 21 * HOUR])
        assert list_segments(folder_of(again, name))[-1] == 42  # still the eighth day's
        app.append_batch([("k", b"next")], partition=0, timestamps=[t0 + 8 * DAY])
        assert list_segments(folder_of(again, name))[-1] == 49

    def test_a_record_time_a_roll_away_either_way_rolls(
        self, log_with, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The roll compares each record's time with the segment's first record's, backwards
        too (history appended after live records). A batch is never split: one that spans more
        than segment_roll lands whole, and the next record a roll away from its first rolls."""
        now = 1_700_000_000_000
        clock = [now]
        monkeypatch.setattr(writer_module, "now_ms", lambda: clock[0])
        m, name = log_with(1, segment_roll="1d")
        app = m.appender(name)
        folder = folder_of(m, name)
        app.append("k", b"live")  # segment 0 starts at `now`
        app.append_batch([("k", b"h0")], partition=0, timestamps=[now - DAY + 1])
        assert list_segments(folder) == [0]  # less than a day before
        app.append_batch([("k", b"h1")], partition=0, timestamps=[now - DAY])
        assert list_segments(folder) == [0, 2]  # a day before: segment 2 starts at now - DAY
        app.append_batch([("k", b"h2")], partition=0, timestamps=[now - DAY + HOUR])
        span = [("k", b"h3"), ("k", b"h4")]
        app.append_batch(span, partition=0, timestamps=[now - 2 * HOUR, now + HOUR])
        assert list_segments(folder) == [0, 2, 4]  # h4 is a day past h1: rolled, not split
        clock[0] = now + HOUR  # live again, within a day of h3
        app.append("k", b"live2")
        assert list_segments(folder) == [0, 2, 4]
        clock[0] = now + DAY - 2 * HOUR  # a day after h3
        app.append("k", b"live3")
        assert list_segments(folder) == [0, 2, 4, 7]
        with m.tailer("g", name) as tailer:
            records = drain(tailer)
        messages = b"live h0 h1 h2 h3 h4 live2 live3".split()
        assert [r.message for r in records] == messages

    def test_append_timestamps_never_go_backwards(
        self, log_with, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        clock = [1_700_000_000_000]
        monkeypatch.setattr(writer_module, "now_ms", lambda: clock[0])
        m, name = log_with(1)
        app = m.appender(name)
        app.append("k", b"a")
        clock[0] -= 5000  # the wall clock steps back
        app.append("k", b"b")
        with m.tailer("g", name) as tailer:
            assert [r.timestamp for r in drain(tailer)] == [1_700_000_000_000] * 2

    def test_tailer_follows_a_live_roll(self, log_with) -> None:
        m, name = log_with(1, segment_bytes=1024)
        app = m.appender(name)
        with m.tailer("g", name) as tailer:
            got = []
            for i in range(60):
                app.append("k", payload(i))
                got += drain(tailer)
            assert [r.offset for r in got] == list(range(60))
        assert len(list_segments(folder_of(m, name))) > 3


class TestIndex:
    @pytest.fixture
    def big_log(self, log_with) -> tuple[LocalLogManager, str, int]:
        """One segment of ~1.3 MiB in 2000 single-record batches (so ~20 index entries)."""
        m, name = log_with(1)
        app = m.appender(name)
        for i in range(2000):
            app.append_to(0, "k", payload(i, 600))
        m.close()
        return m, name, 2000

    def cursor_hops(self, folder: Path, offset: int, monkeypatch: pytest.MonkeyPatch) -> int:
        calls = [0]
        original = PartitionCursor._peek_header

        def counting(self):
            calls[0] += 1
            return original(self)

        monkeypatch.setattr(PartitionCursor, "_peek_header", counting)
        cursor = PartitionCursor(folder, "test")
        calls[0] = 0
        cursor.seek(offset)
        hops = calls[0]
        assert cursor.next_records(1)[0][0] == offset
        cursor.close()
        monkeypatch.setattr(PartitionCursor, "_peek_header", original)
        return hops

    def test_index_is_written_and_speeds_seek(
        self, big_log, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        m, name, count = big_log
        folder = folder_of(m, name)
        entries = read_index(folder / f"{0:020d}.index")
        assert len(entries) >= 15
        assert entries[0] == (0, 0)
        positions = {pos: base for pos, base, _ in batch_positions(folder / segment_name(0))}
        for offset, pos in entries:
            assert positions[pos] == offset
        with_index = self.cursor_hops(folder, count - 3, monkeypatch)
        (folder / f"{0:020d}.index").unlink()
        without_index = self.cursor_hops(folder, count - 3, monkeypatch)
        assert with_index < 200
        assert without_index >= count - 3
        assert with_index * 10 < without_index

    @pytest.mark.parametrize(
        "damage",
        ["deleted", "empty", "random", "shifted", "negative", "huge", "odd_length", "unsorted"],
    )
    def test_seek_is_correct_whatever_the_index_holds(self, big_log, damage: str) -> None:
        import random
        import struct

        m, name, count = big_log
        folder = folder_of(m, name)
        index = folder / f"{0:020d}.index"
        entries = read_index(index)
        rng = random.Random(damage)
        if damage == "deleted":
            index.unlink()
        elif damage == "empty":
            index.write_bytes(b"")
        elif damage == "random":
            index.write_bytes(rng.randbytes(16 * 40))
        elif damage == "shifted":  # right offsets, wrong positions
            index.write_bytes(b"".join(struct.pack("<qq", o, p + 8) for o, p in entries))
        elif damage == "negative":
            index.write_bytes(b"".join(struct.pack("<qq", o, -p - 1) for o, p in entries))
        elif damage == "huge":
            index.write_bytes(b"".join(struct.pack("<qq", o, p + 10**12) for o, p in entries))
        elif damage == "odd_length":
            index.write_bytes(index.read_bytes() + b"\x01\x02\x03")
        elif damage == "unsorted":
            swapped = [(o, p) for o, p in entries[::-1]]
            index.write_bytes(b"".join(struct.pack("<qq", o, p) for o, p in swapped))
        m2 = LocalLogManager(m.root, config=m.config)
        p0 = LogPartition.of(name, 0)
        with m2.tailer("g", name) as tailer:
            for target in [0, 1, 63, 64, 65, 999, 1000, count - 1, *rng.sample(range(count), 20)]:
                tailer.seek(LogOffset(p0, target))
                rec = tailer.read(0)
                assert (rec.offset, rec.message) == (target, payload(target, 600)), damage
            tailer.seek(LogOffset(p0, count))
            assert tailer.read(0) is None
        assert m2.end_offsets(name) == [count]
        assert m2.record_at(p0, 1234)[:2] == ("k", payload(1234, 600))
        # the writer rebuilds a good index when it opens the partition
        m2.appender(name).append_to(0, "k", b"more")
        rebuilt = read_index(index)
        assert rebuilt[: len(entries)] == entries
        m2.close()


class TestTornTail:
    """A torn tail is what a crash leaves after the last complete batch; readers never serve it
    and the next writer truncates it."""

    @pytest.fixture
    def log_to_tear(self, log_with) -> tuple[LocalLogManager, str, Path]:
        m, name = log_with(1, fsync="always")
        app = m.appender(name)
        for i in range(5):
            app.append_to(0, "k", payload(i))
        app.append_batch([("k", payload(i)) for i in range(5, 8)], partition=0)
        m.close()
        return m, name, last_segment(folder_of(m, name))

    @staticmethod
    def tear(segment: Path, how: str) -> int:
        """Damage the tail of `segment`; returns how many records survive (8 = none lost)."""
        data = bytearray(segment.read_bytes())
        last_pos, _, last_size = batch_positions(segment)[-1]
        if how == "cut_mid_batch":
            segment.write_bytes(data[: last_pos + last_size // 2])
            return 5
        if how == "cut_in_header":
            segment.write_bytes(data[: last_pos + 20])
            return 5
        if how == "flip_last_batch":
            data[last_pos + HEADER_SIZE + 10] ^= 0x40
            segment.write_bytes(data)
            return 5
        if how == "flip_last_header_count":
            data[last_pos + 16] ^= 0x01  # count field: checksum catches it
            segment.write_bytes(data)
            return 5
        if how == "garbage_small":
            segment.write_bytes(bytes(data) + b"\x13\x37garbage")
            return 8
        if how == "garbage_large":
            segment.write_bytes(bytes(data) + os.urandom(500))
            return 8
        if how == "zeros":  # what a power loss can leave with fsync=none
            segment.write_bytes(bytes(data) + bytes(4096))
            return 8
        if how == "copy_of_an_earlier_batch":  # stale bytes, valid in themselves
            first_pos, _, first_size = batch_positions(segment)[0]
            segment.write_bytes(bytes(data) + bytes(data[first_pos : first_pos + first_size]))
            return 8
        if how == "partial_copy_of_a_batch":
            segment.write_bytes(bytes(data) + bytes(data[last_pos : last_pos + last_size - 1]))
            return 8
        raise AssertionError(how)

    HOW = [
        "cut_mid_batch",
        "cut_in_header",
        "flip_last_batch",
        "flip_last_header_count",
        "garbage_small",
        "garbage_large",
        "zeros",
        "partial_copy_of_a_batch",
        "copy_of_an_earlier_batch",
    ]

    @pytest.mark.parametrize("how", HOW)
    def test_reader_serves_only_intact_batches_then_writer_truncates(
        self, log_to_tear, local_manager_factory: Factory, how: str
    ) -> None:
        _, name, segment = log_to_tear
        original = segment.read_bytes()
        last_batch_pos = batch_positions(segment)[-1][0]
        survivors = self.tear(segment, how)
        reader_manager = local_manager_factory()
        tailer = reader_manager.tailer("g", name)
        records = drain(tailer, timeout=0.05)
        assert [r.message for r in records] == [payload(i) for i in range(survivors)]
        assert tailer.read(0.05) is None  # nothing from the torn tail, no error, no garbage
        assert reader_manager.end_offsets(name) == [survivors]
        p0 = LogPartition.of(name, 0)
        assert reader_manager.record_at(p0, survivors) is None
        assert tailer.offset_for_timestamp(p0, 0) == LogOffset(p0, 0)
        last_ts = records[-1].timestamp
        assert tailer.offset_for_timestamp(p0, last_ts + 1) is None

        # a writer opens the partition: the tail is truncated, offsets continue
        intact = original[:last_batch_pos] if survivors == 5 else original
        writer_manager = local_manager_factory()
        app = writer_manager.appender(name)
        assert app.append_to(0, "k", b"after-recovery").offset == survivors
        data = segment.read_bytes()
        assert data[: len(intact)] == intact
        assert [b[1] for b in batch_positions(segment)][-1] == survivors
        assert len(data) == len(intact) + batch_positions(segment)[-1][2]
        app.append_to(0, "k", b"more-1")
        app.append_to(0, "k", b"more-2")
        # the reader that waited at the torn tail now gets the new records (not stale bytes)
        rec = tailer.read(1)
        assert (rec.offset, rec.message) == (survivors, b"after-recovery")
        assert [r.message for r in drain(tailer)] == [b"more-1", b"more-2"]
        tailer.close()
        with writer_manager.tailer("fresh", name) as fresh:
            assert [r.offset for r in drain(fresh)] == list(range(survivors + 3))

    def test_reader_waits_for_a_batch_being_written(self, log_to_tear) -> None:
        m, name, segment = log_to_tear
        data = segment.read_bytes()
        last_pos, _, last_size = batch_positions(segment)[-1]
        segment.write_bytes(data[:last_pos])
        m2 = LocalLogManager(m.root, config=m.config)
        with m2.tailer("g", name) as tailer:
            assert len(drain(tailer)) == 5
            with open(segment, "ab") as f:
                for chunk in range(last_pos, last_pos + last_size, 37):
                    f.write(data[chunk : min(chunk + 37, last_pos + last_size)])
                    f.flush()
                    if chunk + 37 < last_pos + last_size:
                        assert tailer.read(0) is None
            assert [r.offset for r in drain(tailer)] == [5, 6, 7]
        m2.close()

    def test_empty_last_segment_after_crash_at_roll(self, log_with, local_manager_factory):
        m, name = log_with(1, segment_bytes=1024)
        app = m.appender(name)
        for i in range(40):
            app.append("k", payload(i))
        m.close()
        folder = folder_of(m, name)
        (folder / segment_name(40)).write_bytes(b"")  # created, nothing written yet
        again = local_manager_factory()
        assert again.end_offsets(name) == [40]
        assert again.appender(name).append("k", b"x").offset == 40
        with again.tailer("g", name) as tailer:
            assert len(drain(tailer)) == 41


class TestCorruption:
    @pytest.fixture
    def corrupted_middle(self, log_with) -> tuple[LocalLogManager, str, Path, int]:
        m, name = log_with(1)
        app = m.appender(name)
        for i in range(10):
            app.append_to(0, "k", payload(i))
        m.close()
        segment = last_segment(folder_of(m, name))
        pos, _, _ = batch_positions(segment)[4]
        data = bytearray(segment.read_bytes())
        data[pos + HEADER_SIZE + 20] ^= 0xFF
        segment.write_bytes(data)
        return m, name, segment, pos

    def test_reader_raises_with_a_helpful_message(self, corrupted_middle) -> None:
        m, name, segment, pos = corrupted_middle
        m2 = LocalLogManager(m.root, config=m.config)
        with m2.tailer("g", name) as tailer:
            got = [tailer.read(0) for _ in range(4)]
            assert [r.offset for r in got] == [0, 1, 2, 3]
            with pytest.raises(
                CorruptLogError,
                match=rf"test-local-00: segment {segment.name} is corrupt \(batch at byte {pos} "
                r"fails its checksum\) in the middle of the log; restore it from a backup",
            ):
                tailer.read(0)
        m2.close()

    def test_writer_refuses_to_truncate_valid_records(self, corrupted_middle) -> None:
        m, name, segment, pos = corrupted_middle
        size = segment.stat().st_size
        m2 = LocalLogManager(m.root, config=m.config)
        with pytest.raises(CorruptLogError, match=rf"{segment.name}.*byte {pos}.*truncate"):
            m2.appender(name).append_to(0, "k", b"x")
        assert segment.stat().st_size == size  # nothing acknowledged was thrown away
        m2.close()

    def test_bad_header_in_the_middle(self, log_with) -> None:
        m, name = log_with(1)
        app = m.appender(name)
        for i in range(6):
            app.append_to(0, "k", payload(i))
        m.close()
        segment = last_segment(folder_of(m, name))
        pos = batch_positions(segment)[2][0]
        data = bytearray(segment.read_bytes())
        data[pos : pos + 4] = b"XXXX"
        segment.write_bytes(data)
        m2 = LocalLogManager(m.root, config=m.config)
        with m2.tailer("g", name) as tailer:
            assert [tailer.read(0).offset for _ in range(2)] == [0, 1]
            with pytest.raises(CorruptLogError, match=rf"no valid batch header at byte {pos}"):
                tailer.read(0)
        m2.close()

    def test_damaged_end_of_a_sealed_segment_is_corruption(self, log_with) -> None:
        m, name = log_with(1, segment_bytes=1024)
        app = m.appender(name)
        for i in range(60):
            app.append("k", payload(i))
        m.close()
        folder = folder_of(m, name)
        first = folder / segment_name(list_segments(folder)[0])
        _, last_base, _ = batch_positions(first)[-1]
        data = bytearray(first.read_bytes())
        data[-3] ^= 0xFF
        first.write_bytes(data)
        m2 = LocalLogManager(m.root, config=m.config)
        with m2.tailer("g", name) as tailer:
            assert [tailer.read(0).offset for _ in range(last_base)] == list(range(last_base))
            with pytest.raises(CorruptLogError, match=rf"{first.name} is corrupt"):
                tailer.read(0.05)
        m2.close()


LOCK_HOLDER = """
import sys, time
from streamcore.config import LogDefaults, StreamcoreConfig
from streamcore.log.local.manager import LocalLogManager

root, name = sys.argv[1], sys.argv[2]
m = LocalLogManager(root, config=StreamcoreConfig(home=root, log=LogDefaults()))
m.appender(name).append_to(0, "k", b"from-child")
print("ready", flush=True)
sys.stdin.readline()
m.close()
print("closed", flush=True)
"""


class TestSingleWriterLock:
    def test_second_process_gets_log_locked_error_naming_the_pid(
        self, log_with, tmp_path: Path
    ) -> None:
        m, name = log_with(2)
        child = run_script(tmp_path, "hold_lock.py", LOCK_HOLDER, str(m.root), name)
        try:
            expect_line(child, "ready")
            app = m.appender(name)
            with pytest.raises(
                LogLockedError,
                match=rf"partition test-local-00 is being written by another process "
                rf"\(pid {child.pid}\).*stop that process",
            ):
                app.append_to(0, "k", b"x")
            assert app.append_to(1, "k", b"other partition is free").offset == 0
            with m.tailer("g", LogPartition.of(name, 0)) as tailer:  # reading is always fine
                assert tailer.read(1).message == b"from-child"
            child.stdin.write("\n")
            child.stdin.flush()
            expect_line(child, "closed")
            assert child.wait(10) == 0
            assert app.append_to(0, "k", b"x").offset == 1
        finally:
            child.kill()
            child.wait()

    def test_lock_is_released_when_the_holder_is_killed(self, log_with, tmp_path: Path) -> None:
        m, name = log_with(1)
        child = run_script(tmp_path, "hold_lock.py", LOCK_HOLDER, str(m.root), name)
        try:
            expect_line(child, "ready")
            with pytest.raises(LogLockedError, match=rf"pid {child.pid}"):
                m.appender(name).append("k", b"x")
            child.send_signal(signal.SIGKILL)
            assert child.wait(10) == -signal.SIGKILL
        finally:
            child.kill()
            child.wait()
        assert m.appender(name).append("k", b"mine").offset == 1
        assert (folder_of(m, name) / ".lock").read_text() == str(os.getpid())

    def test_second_manager_in_the_same_process(self, log_with, local_manager_factory) -> None:
        m, name = log_with(1)
        m.appender(name).append("k", b"x")
        other = local_manager_factory()
        with pytest.raises(LogLockedError, match=rf"pid {os.getpid()}"):
            other.appender(name).append("k", b"y")
        m.close()
        assert other.appender(name).append("k", b"y").offset == 1


TAIL_CHILD = """
import sys, time
from streamcore.config import LogDefaults, StreamcoreConfig
from streamcore.log.local.manager import LocalLogManager

root, name, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
m = LocalLogManager(root, config=StreamcoreConfig(home=root, log=LogDefaults()))
tailer = m.tailer("latency", name)
print("ready", flush=True)
for _ in range(count):
    rec = tailer.read(timeout=5)
    now = time.monotonic()
    if rec is None:
        print("timeout", flush=True)
        break
    print(f"got {rec.offset} {now!r}", flush=True)
tailer.close()
"""


class TestCrossProcessTailing:
    def test_a_tailer_in_another_process_sees_a_record_within_50ms(
        self, log_with, tmp_path: Path
    ) -> None:
        import random

        m, name = log_with(1)
        app = m.appender(name)
        trials = 20
        child = run_script(tmp_path, "tail.py", TAIL_CHILD, str(m.root), name, str(trials))
        latencies = []
        try:
            expect_line(child, "ready")
            for i in range(trials):
                time.sleep(random.uniform(0.01, 0.04))
                sent = time.monotonic()
                app.append("k", payload(i))
                line = expect_line(child, "got ")
                _, offset, arrived = line.split()
                assert int(offset) == i
                latencies.append(float(arrived) - sent)
            assert child.wait(10) == 0
        finally:
            child.kill()
            child.wait()
        latencies.sort()
        p95 = latencies[int(0.95 * (len(latencies) - 1))]
        assert p95 < 0.050, f"p95 latency {p95 * 1000:.1f} ms; all: {latencies}"
        assert min(latencies) >= 0


class TestCommittedPositions:
    def test_positions_survive_a_new_manager(self, log_with, local_manager_factory) -> None:
        m, name = log_with(2)
        app = m.appender(name)
        for i in range(6):
            app.append_to(i % 2, "k", payload(i))
        with m.tailer("g", name) as tailer:
            for _ in range(4):
                tailer.read(0)
            tailer.commit()
        committed = m.committed(name, "g")
        again = local_manager_factory()
        assert again.committed(name, "g") == committed
        assert sum(committed) == 4
        assert again.list_groups(name) == ["g"]

    def test_no_temporary_file_is_left_behind(self, log_with) -> None:
        m, name = log_with(1)
        with m.tailer("g", name) as tailer:
            for _ in range(5):
                tailer.commit()
        group_dir = m.folder(name) / "groups" / "g"
        assert sorted(os.listdir(group_dir)) == ["p-00"]

    def test_leftover_temporary_files_are_ignored(self, log_with) -> None:
        m, name = log_with(1)
        m.appender(name).append("k", b"v")
        with m.tailer("g", name) as tailer:
            tailer.read(0)
            tailer.commit()
        group_dir = m.folder(name) / "groups" / "g"
        # what a crash between writing the temporary file and renaming it leaves
        (group_dir / ".p-00.99999.123").write_bytes(b"\x07" * 5)
        (group_dir / ".p-00.99998.124").write_bytes(b"")
        (m.folder(name) / "groups" / ".tmp-half-created").mkdir()
        assert m.committed(name, "g") == [1]
        assert m.list_groups(name) == ["g"]
        with m.tailer("g", name) as tailer:
            assert tailer.position(LogPartition.of(name, 0)) == 1
            tailer.seek(LogOffset(LogPartition.of(name, 0), 0))
            tailer.read(0)
            tailer.commit()
        assert m.committed(name, "g") == [1]

    @pytest.mark.parametrize(
        ("damage", "what"),
        [
            (lambda b: b[:10], "10 bytes"),
            (lambda b: b + b"x", "49 bytes"),
            (lambda b: b"", "0 bytes"),
            (lambda b: bytes(x ^ 1 for x in b), "checksum mismatch"),
        ],
        ids=["short", "long", "empty", "bit-flip"],
    )
    def test_corrupted_position_file(self, log_with, damage, what: str) -> None:
        m, name = log_with(1)
        with m.tailer("grp", name) as tailer:
            tailer.commit()
        path = m.folder(name) / "groups" / "grp" / "p-00"
        path.write_bytes(damage(path.read_bytes()))
        message = (
            rf"committed position of group 'grp' partition 0 is unreadable \({what}\); "
            r"reset it with `streamcore position -g grp --to-start`"
        )
        with pytest.raises(CorruptLogError, match=message):
            m.committed(name, "grp")
        with pytest.raises(CorruptLogError, match="streamcore position"):
            m.tailer("grp", name)
        # the group can be repaired by committing a position directly
        m.commit_position(LogPartition.of(name, 0), "grp", 0)
        assert m.committed(name, "grp") == [0]

    def test_a_torn_newest_slot_falls_back_to_the_previous_position(self, log_with) -> None:
        m, name = log_with(1)
        partition = LogPartition.of(name, 0)
        m.commit_position(partition, "grp", 5)
        m.commit_position(partition, "grp", 9)  # sequence 1, in the second slot
        path = m.folder(name) / "groups" / "grp" / "p-00"
        data = bytearray(path.read_bytes())
        data[24:32] = b"\xff" * 8  # what a crash in the middle of that write can leave
        path.write_bytes(bytes(data))
        assert m.committed(name, "grp") == [5]
        m.commit_position(partition, "grp", 12)
        m.commit_position(partition, "grp", 13)
        assert m.committed(name, "grp") == [13]

    def test_the_older_one_slot_layout_is_read_and_rewritten(self, log_with) -> None:
        m, name = log_with(1)
        path = m.folder(name) / "groups" / "grp" / "p-00"
        path.parent.mkdir(parents=True)
        head = struct.pack("<qq", 7, 0)
        path.write_bytes(head + struct.pack("<I", zlib.crc32(head)))
        assert m.committed(name, "grp") == [7]
        m.commit_position(LogPartition.of(name, 0), "grp", 8)
        assert m.committed(name, "grp") == [8]
        assert len(path.read_bytes()) == 48


MINUTE = 60_000


def fill(m: LocalLogManager, name: str, count: int, t0: int, first: int = 0) -> None:
    """Append records `first`..`first + count - 1`, record i appended at t0 + i minutes."""
    app = m.appender(name)
    for i in range(first, first + count):
        app.append_batch([("k", payload(i))], timestamps=[t0 + i * MINUTE])


def append_days(m: LocalLogManager, name: str, t0: int, days: int) -> None:
    """Six records a day, 4 hours apart, from `t0` on, appended with those times in batches
    of three (half a day each), as a copy or a back-fill appends history."""
    app = m.appender(name)
    for day in range(days):
        for half in (0, 1):
            times = [t0 + day * DAY + (3 * half + j) * 4 * HOUR for j in range(3)]
            app.append_batch([("k", payload(t)) for t in times], partition=0, timestamps=times)


class TestRetention:
    """Retention ages a sealed segment by its newest record's append time: the records of these
    logs were appended a minute apart, starting ten hours ago, and retention is one hour."""

    @pytest.fixture
    def aged_log(self, log_with) -> tuple[LocalLogManager, str, list[int], int]:
        """A log of 5+ segments whose groups, 'fast' and the archiver, committed the end; and
        the time its first record was appended."""
        m, name = log_with(1, segment_bytes=1024, retention="1h")
        t0 = time.time_ns() // 1_000_000 - 10 * HOUR
        fill(m, name, 100, t0)
        with m.tailer("fast", name) as t:
            drain(t)
            t.commit()
        m.commit_position(LogPartition.of(name, 0), ARCHIVER, 100)
        bases = list_segments(folder_of(m, name))
        assert len(bases) >= 5
        return m, name, bases, t0

    @staticmethod
    def expiring(t0: int, bases: list[int], k: int) -> int:
        """A time at which exactly the first `k` segments have expired."""
        return t0 + (bases[k] - 1) * MINUTE + HOUR + 1

    @staticmethod
    def slow_group(m: LocalLogManager, name: str, offset: int = 2) -> None:
        """Group 'slow' with its position at `offset` (it read the records before it)."""
        m.commit_position(LogPartition.of(name, 0), "slow", offset)

    def test_purge_removes_whole_expired_segments(self, aged_log) -> None:
        m, name, bases, t0 = aged_log
        folder = folder_of(m, name)
        now = self.expiring(t0, bases, 3)
        assert m.purge(name, now_ms=now) == {0: bases[:3]}
        assert list_segments(folder) == bases[3:]
        assert not (folder / f"{bases[0]:020d}.index").exists()
        assert m.start_offsets(name) == [bases[3]]
        assert m.end_offsets(name) == [100]
        assert m.purge(name, now_ms=now) == {0: []}

    def test_history_appended_in_one_run_is_purged_day_by_day(self, log_with) -> None:
        """Eight days of history appended in one run, retention four days: the four days
        older than that go (they were one segment that never expired as a whole)."""
        m, name = log_with(1, retention="4d")
        t0 = time.time_ns() // 1_000_000 - 8 * DAY
        append_days(m, name, t0, days=8)
        m.commit_position(LogPartition.of(name, 0), ARCHIVER, 48)  # archived
        (plan,) = m.purge_plan(name)
        assert (plan.expired_segments, plan.purgeable_records) == (4, 24)
        assert m.purge(name) == {0: [0, 6, 12, 18]}
        assert m.start_offsets(name) == [24]
        with m.tailer("g", name) as tailer:
            assert drain(tailer)[0].timestamp == t0 + 4 * DAY

    def test_a_segment_ages_by_its_newest_record_not_its_file(self, aged_log) -> None:
        m, name, bases, t0 = aged_log
        folder = folder_of(m, name)
        past = time.time() - 48 * 3600
        for base in bases:
            os.utime(folder / segment_name(base), (past, past))
        assert m.purge(name, now_ms=t0) == {0: []}  # every record is younger than an hour then
        assert m.purge(name, now_ms=self.expiring(t0, bases, 1)) == {0: bases[:1]}

    def test_purge_never_removes_the_active_segment(self, aged_log) -> None:
        m, name, bases, _ = aged_log
        folder = folder_of(m, name)
        assert m.purge(name) == {0: bases[:-1]}  # now: every record is 8 hours old or more
        assert list_segments(folder) == [bases[-1]]
        assert m.appender(name).append("k", b"still writable").offset == 100

    def test_no_retention_keeps_everything(self, log_with) -> None:
        m, name = log_with(1, segment_bytes=1024, retention="0")
        fill(m, name, 60, time.time_ns() // 1_000_000 - 10_000 * HOUR)
        folder = folder_of(m, name)
        bases = list_segments(folder)
        assert m.purge(name) == {0: []}
        assert list_segments(folder) == bases

    def test_roll_purges_expired_segments(self, aged_log) -> None:
        m, name, bases, _ = aged_log
        folder = folder_of(m, name)
        app = m.appender(name)
        i = 100
        while list_segments(folder)[-1] == bases[-1]:
            app.append("k", payload(i))  # now: young
            i += 1
        # every old sealed segment went; the one sealed by the roll holds young records
        assert list_segments(folder)[0] == bases[-1]

    def test_a_group_behind_holds_the_expired_segments_it_has_not_read(self, aged_log) -> None:
        m, name, bases, t0 = aged_log
        folder = folder_of(m, name)
        now = self.expiring(t0, bases, 3)
        self.slow_group(m, name, 2)
        (plan,) = m.purge_plan(name, now_ms=now)
        assert (plan.expired_segments, plan.expired_records) == (3, bases[3])
        assert (plan.purgeable_segments, plan.purgeable_records) == (0, 0)
        assert plan.held_by == {"slow": bases[3] - 2}  # 'fast' and the archiver read them all
        assert m.purge(name, now_ms=now) == {0: []}
        assert list_segments(folder) == bases
        # once 'slow' is inside the third segment, the two before it may go
        self.slow_group(m, name, bases[2] + 1)
        (plan,) = m.purge_plan(name, now_ms=now)
        assert (plan.purgeable_segments, plan.purgeable_records) == (2, bases[2])
        assert m.purge(name, now_ms=now) == {0: bases[:2]}
        assert m.lag(name, "slow").lost == 0
        assert not (m.folder(name) / "purges.jsonl").exists()

    def test_the_archiver_holds_an_archived_log_until_it_has_archived_it(
        self, log_with, tmp_path: Path
    ) -> None:
        m, name = log_with(1, segment_bytes=1024, retention="1h")
        t0 = time.time_ns() // 1_000_000 - 10 * HOUR
        fill(m, name, 100, t0)
        bases = list_segments(folder_of(m, name))
        now = self.expiring(t0, bases, 3)
        # archive = true by default: the archiver has not run, so it holds the whole partition
        (plan,) = m.purge_plan(name, now_ms=now)
        assert plan.held_by == {ARCHIVER: bases[3]} and plan.purgeable_segments == 0
        assert m.purge(name, now_ms=now) == {0: []}
        # a log whose [[log.match]] rule says archive = false does not wait for the archiver
        toml = tmp_path / "no-archive.toml"
        toml.write_text('[[log.match]]\nnamespace = "test"\nconfig = "default"\narchive = false\n')
        unarchived = LocalLogManager(m.root, config=load_config(toml, home=tmp_path))
        try:
            (plan,) = unarchived.purge_plan(name, now_ms=now)
            assert plan.held_by == {} and plan.purgeable_segments == 3
        finally:
            unarchived.close()
        m.commit_position(LogPartition.of(name, 0), ARCHIVER, bases[1])
        assert m.purge(name, now_ms=now) == {0: bases[:1]}

    def test_roll_keeps_what_a_group_has_not_read(self, aged_log) -> None:
        m, name, bases, _ = aged_log
        folder = folder_of(m, name)
        self.slow_group(m, name, bases[1])
        app = m.appender(name)
        i = 100
        while list_segments(folder)[-1] == bases[-1]:
            app.append("k", payload(i))
            i += 1
        assert list_segments(folder)[0] == bases[1]  # the first went; 'slow' needs the second

    def test_group_behind_retention_continues_from_oldest_and_reports_loss(self, aged_log) -> None:
        """A forced purge takes the expired segments a group had not read: the loss is in the
        log's purges.jsonl, in the group's lag (`lost`), and the group goes on from the oldest
        record left."""
        m, name, bases, t0 = aged_log
        self.slow_group(m, name, 2)
        now = self.expiring(t0, bases, 3)
        assert m.purge(name, now_ms=now, force=True) == {0: bases[:3]}
        oldest = bases[3]
        lines = (m.folder(name) / "purges.jsonl").read_text().splitlines()
        assert len(lines) == 1
        line = json.loads(lines[0])
        assert (line["partition"], line["purged_until"]) == (0, oldest)
        assert line["lost"] == {"slow": oldest - 2}
        (slow,) = m.lag_per_partition(name, "slow")
        assert slow == LogLag(pos=oldest, end=100, lag=100 - oldest, lost=oldest - 2)
        assert m.lag(name, "slow").lost == oldest - 2
        (fast,) = m.lag_per_partition(name, "fast")
        assert fast == LogLag(100, 100, 0, 0)
        (never,) = m.lag_per_partition(name, "neverread")
        assert never == LogLag(oldest, 100, 100 - oldest, 0)
        with m.tailer("slow", name) as tailer:
            assert tailer.lost == oldest - 2
            tailer.to_last_committed()  # going back again loses nothing more
            tailer.seek(LogOffset(LogPartition.of(name, 0), 0))
            assert tailer.lost == oldest - 2
            assert tailer.position(LogPartition.of(name, 0)) == oldest
            records = drain(tailer)
            assert [r.offset for r in records] == list(range(oldest, 100))
            tailer.commit()
        assert m.lag_per_partition(name, "slow") == [LogLag(100, 100, 0, 0)]
        with m.tailer("neverread", name) as tailer:
            assert tailer.lost == 0
            assert drain(tailer)[0].offset == oldest

    def test_a_reader_keeps_its_open_segment_while_it_is_purged(self, aged_log) -> None:
        m, name, bases, t0 = aged_log
        with m.tailer("reader", name) as tailer:
            first = tailer.read(0)
            assert first.offset == 0
            m.purge(name, now_ms=self.expiring(t0, bases, 2))
            rest = drain(tailer)
        offsets = [first.offset] + [r.offset for r in rest]
        # the open segment is still readable; records of the purged unopened one are lost
        assert offsets[-1] == 99
        assert offsets == sorted(set(offsets))
        assert set(range(bases[2], 100)) <= set(offsets)
        assert tailer.lost == 100 - len(offsets)

    def test_record_at_a_purged_offset(self, aged_log) -> None:
        m, name, bases, t0 = aged_log
        m.purge(name, now_ms=self.expiring(t0, bases, 1))
        p0 = LogPartition.of(name, 0)
        assert m.record_at(p0, 0) is None
        assert m.record_at(p0, bases[1])[1] == payload(bases[1])


class TestFsyncModes:
    @pytest.mark.parametrize("mode", ["none", "batch", "always"])
    def test_every_mode_round_trips(
        self, log_with, local_manager_factory, monkeypatch: pytest.MonkeyPatch, mode: str
    ) -> None:
        syncs = [0]
        real_fsync = os.fsync

        def counting_fsync(fd: int) -> None:
            syncs[0] += 1
            real_fsync(fd)

        m, name = log_with(2, fsync=mode, segment_bytes=2048)
        monkeypatch.setattr(writer_module.os, "fsync", counting_fsync)
        app = m.appender(name)
        app.append("warm-up", b"0")  # opens the writers
        syncs[0] = 0
        for i in range(20):
            app.append_to(0, "k", payload(i))
        appends_syncs = syncs[0]
        app.append_batch([(f"b{i}", payload(i)) for i in range(20)])
        with m.tailer("g", name) as tailer:
            drain(tailer)
            tailer.commit()
        m.close()
        if mode == "always":
            assert appends_syncs >= 20
        elif mode == "batch":
            assert appends_syncs <= 5  # at most about once a second, plus rolls
        else:
            assert appends_syncs == 0
        again = local_manager_factory()
        assert sum(again.end_offsets(name)) == 41
        assert again.committed(name, "g") == again.end_offsets(name)
        with again.tailer("other", name) as tailer:
            assert len(drain(tailer)) == 41

    def test_flush_fsyncs_whatever_the_mode(
        self, log_with, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        m, name = log_with(1, fsync="none")
        app = m.appender(name)
        app.append("k", b"v")
        calls = []
        monkeypatch.setattr(writer_module.os, "fsync", lambda fd: calls.append(fd))
        app.flush()
        assert len(calls) == 1


class TestRecordTooLarge:
    @pytest.fixture
    def small_limit(self, local_manager_factory: Factory) -> tuple[LocalLogManager, str]:
        m = local_manager_factory(max_record_bytes=1000)
        m.create("test/limited", 2)
        return m, "test/limited"

    MESSAGE = (
        r"a record of 1001 bytes exceeds log\.max_record_bytes=1000 on test-limited-0\d; "
        r"raise the limit in include/streamcore\.toml or split the payload"
    )

    def test_single_append(self, small_limit) -> None:
        m, name = small_limit
        app = m.appender(name)
        assert app.append_to(0, "k", b"x" * 1000).offset == 0
        with pytest.raises(RecordTooLargeError, match=self.MESSAGE):
            app.append_to(0, "k", b"x" * 1001)
        assert m.end_offsets(name) == [1, 0]

    def test_batch_with_one_large_record_writes_nothing(self, small_limit) -> None:
        m, name = small_limit
        app = m.appender(name)
        items = [(f"key-{i}", b"x" * 500) for i in range(10)] + [("big", b"y" * 1001)]
        with pytest.raises(RecordTooLargeError, match=self.MESSAGE):
            app.append_batch(items)
        with pytest.raises(RecordTooLargeError, match=self.MESSAGE):
            app.append_batch(items, partition=1)
        assert m.end_offsets(name) == [0, 0]
        # a batch bigger than the limit made of small records is fine
        assert len(app.append_batch(items[:10], partition=1)) == 10

    def test_arrow_append(self, small_limit) -> None:
        pa = pytest.importorskip("pyarrow")
        m, name = small_limit
        app = m.appender(name)
        with pytest.raises(RecordTooLargeError, match=self.MESSAGE):
            app.append_arrow(0, pa.array(["a", "b"]), pa.array([b"x", b"y" * 1001]))
        assert m.end_offsets(name) == [0, 0]


class TestSingleAppendKeys:
    """`append` encodes an ASCII key once, for its partition and its record; any other key
    takes the general path with the same checks."""

    def test_keys_land_by_key_and_read_back(self, log_with) -> None:
        m, name = log_with(4)
        app = m.appender(name)
        keys = ["doc-1", "", "clé-日本", "\U0001f600", "x" * 100, "y" * 64]
        offsets = [app.append(key, key.encode()) for key in keys]
        assert [o.partition.partition for o in offsets] == [partition_for_key(k, 4) for k in keys]
        assert all(type(o) is LogOffset for o in offsets)
        with m.tailer("check", name) as tailer:
            records = drain(tailer)
        assert sorted((r.key, r.message) for r in records) == sorted((k, k.encode()) for k in keys)

    @pytest.mark.parametrize("key", [None, 7, b"bytes"])
    def test_a_key_that_is_not_a_string_writes_nothing(self, log_with, key) -> None:
        m, name = log_with(2)
        with pytest.raises(TypeError, match=f"log keys must be str, got {type(key).__name__}"):
            m.appender(name).append(key, b"v")
        assert m.end_offsets(name) == [0, 0]

    def test_a_key_with_no_utf8_form_writes_nothing(self, log_with) -> None:
        m, name = log_with(2)
        app = m.appender(name)
        for append in (app.append, lambda k, v: app.append_to(1, k, v)):
            with pytest.raises(InvalidRecordError, match="has no UTF-8 form"):
                append("bad-\udcff", b"v")
        assert m.end_offsets(name) == [0, 0]

    def test_a_released_writer_is_opened_again(self, log_with) -> None:
        m, name = log_with(1)
        app = m.appender(name)
        app.append("a", b"1")
        m.release_writer(name, 0)
        assert app.append("b", b"2").offset == 1
        assert app.append_to(0, "c", b"3").offset == 2


class TestAppendArrow:
    def read_all(self, m: LocalLogManager, name: str) -> list[tuple[str, bytes]]:
        with m.tailer("check", name) as tailer:
            return [(r.key, r.message) for r in drain(tailer)]

    def test_round_trip(self, log_with) -> None:
        pa = pytest.importorskip("pyarrow")
        m, name = log_with(1)
        app = m.appender(name)
        keys = [f"k{i}" for i in range(50)] + ["é", ""]
        values = [payload(i) for i in range(50)] + [b"", b"\x00\xff"]
        assert app.append_arrow(0, pa.array(keys), pa.array(values, pa.binary())) == 0
        assert app.append_arrow(0, pa.array(["x"]), pa.array([b"y"])) == 52
        assert self.read_all(m, name) == [*zip(keys, values, strict=True), ("x", b"y")]

    def test_sliced_arrays_with_non_zero_offsets(self, log_with) -> None:
        pa = pytest.importorskip("pyarrow")
        m, name = log_with(1)
        app = m.appender(name)
        all_keys = pa.array([f"key-{i}" for i in range(20)])
        all_values = pa.array([payload(i, 10 + i) for i in range(30)], pa.binary())
        keys = all_keys.slice(5, 8)
        values = all_values[17:25]
        assert keys.offset == 5
        assert values.offset == 17
        assert app.append_arrow(0, keys, values) == 0
        expected = [(f"key-{5 + i}", payload(17 + i, 27 + i)) for i in range(8)]
        assert self.read_all(m, name) == expected

    def test_string_values_and_large_types(self, log_with) -> None:
        pa = pytest.importorskip("pyarrow")
        m, name = log_with(1)
        app = m.appender(name)
        app.append_arrow(0, pa.array(["a", "b"], pa.large_string()), pa.array(["v1", "vé"]))
        app.append_arrow(
            0, pa.array(["c"]).slice(0, 1), pa.array([b"x", b"big"], pa.large_binary()).slice(1)
        )
        assert self.read_all(m, name) == [("a", b"v1"), ("b", "vé".encode()), ("c", b"big")]

    def test_empty_arrays_append_nothing(self, log_with) -> None:
        pa = pytest.importorskip("pyarrow")
        m, name = log_with(1)
        app = m.appender(name)
        app.append_to(0, "k", b"first")
        assert app.append_arrow(0, pa.array([], pa.string()), pa.array([], pa.binary())) == 1
        app.append_to(0, "k", b"second")
        with m.tailer("g", name) as tailer:
            assert [r.message for r in tailer] == [b"first", b"second"]

    def test_invalid_input(self, log_with) -> None:
        pa = pytest.importorskip("pyarrow")
        m, name = log_with(1)
        app = m.appender(name)
        with pytest.raises(ValueError, match="2 keys for 1 values; give one key per value"):
            app.append_arrow(0, pa.array(["a", "b"]), pa.array([b"x"]))
        with pytest.raises(ValueError, match="must not be null"):
            app.append_arrow(0, pa.array(["a", None]), pa.array([b"x", b"y"]))
        with pytest.raises(ValueError, match=r"has partitions 0\.\.0, not 1"):
            app.append_arrow(1, pa.array(["a"]), pa.array([b"x"]))
        assert m.end_offsets(name) == [0]

    def test_read_arrow_is_zero_copy_and_matches(self, log_with) -> None:
        pa = pytest.importorskip("pyarrow")
        m, name = log_with(1)
        app = m.appender(name)
        app.append_arrow(
            0, pa.array([f"k{i}" for i in range(100)]), pa.array([payload(i) for i in range(100)])
        )
        with m.tailer("g", name) as tailer:
            tailer.seek(LogOffset(LogPartition.of(name, 0), 10))
            batch = tailer.read_arrow(max_records=30)
            assert batch.column("offset").to_pylist() == list(range(10, 40))
            assert batch.column("value").to_pylist() == [payload(i) for i in range(10, 40)]
            assert batch.column("key").to_pylist() == [f"k{i}" for i in range(10, 40)]
            assert batch.column("partition").to_pylist() == [0] * 30
            rest = tailer.read_arrow(max_records=1000)
            assert rest.column("offset").to_pylist() == list(range(40, 100))


class TestReaderProcessIndependence:
    def test_reader_only_manager_does_not_take_the_lock(self, log_with, local_manager_factory):
        m, name = log_with(1)
        m.appender(name).append("k", b"v")
        reader = local_manager_factory()
        with reader.tailer("g", name) as tailer:
            assert tailer.read(0).message == b"v"
        assert reader.end_offsets(name) == [1]
        assert reader.info(name).records == 1
        m.appender(name).append("k", b"w")  # the writer is unaffected
        assert reader.end_offsets(name) == [2]
