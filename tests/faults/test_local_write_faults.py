"""Faults on the local log's write path: short writes and a full disk, an idle writer in
`fsync=batch` mode, a multi-partition batch that fails in a later partition, a record larger than
the on-disk format allows, keys that are not UTF-8. Each test checks that nothing acknowledged is
lost or duplicated and that nothing unreadable is acknowledged."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import subprocess
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from log_fixtures import make_config

from streamcore.config import LogDefaults, load_config
from streamcore.errors import (
    ConfigError,
    LogLockedError,
    RecordTooLargeError,
    StreamcoreError,
)
from streamcore.log import LogManager
from streamcore.log.local import segment
from streamcore.log.local.manager import LocalLogManager
from streamcore.log.partitioner import partition_for_key

Factory = Callable[..., LocalLogManager]
ENOSPC = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
DISK_FULL = r"disk .*is full.*[Ff]ree space"


def read_all(manager: LogManager, name: str, group: str = "check") -> list[tuple[str, bytes]]:
    """Every record of `name` in (partition, offset) order, as (key, value)."""
    with manager.tailer(group, name) as tailer:
        records = []
        while (record := tailer.read(0.2)) is not None:
            records.append(record)
    records.sort(key=lambda r: (r.partition.partition, r.offset))
    return [(r.key, bytes(r.message)) for r in records]


def key_in(partition: int, partition_of: Callable[[str], int], prefix: str = "key-") -> str:
    return next(k for i in range(10_000) if partition_of(k := f"{prefix}{i}") == partition)


# -- 1. short writes and a full disk -------------------------------------------------------------


@contextlib.contextmanager
def short_writes(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The next write or writev puts half its bytes in the file and returns the short count, as a
    filling disk does; every later write fails with ENOSPC. Yields the byte counts written."""
    real_write = os.write
    written: list[int] = []

    def write(fd: int, data: Any) -> int:
        if written:
            raise ENOSPC
        data = bytes(data)
        written.append(real_write(fd, data[: len(data) // 2]))
        return written[-1]

    with monkeypatch.context() as patch:
        patch.setattr(os, "write", write)
        patch.setattr(os, "writev", lambda fd, parts: write(fd, b"".join(map(bytes, parts))))
        yield written


def append_arrow(app: Any, key: str, value: bytes) -> None:
    pa = pytest.importorskip("pyarrow")
    app.append_arrow(0, pa.array([key, key]), pa.array([value, value]))


@pytest.mark.parametrize(
    "append",
    [
        pytest.param(lambda app, k, v: app.append_batch([(k, v), (k, v)], partition=0), id="batch"),
        pytest.param(lambda app, k, v: app.append_to(0, k, v), id="single"),
        pytest.param(append_arrow, id="arrow"),
    ],
)
def test_short_write_is_undone_and_later_appends_stay_readable(
    local_manager_factory: Factory,
    unique_name: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
    append: Callable[[Any, str, bytes], None],
) -> None:
    m = local_manager_factory()
    name = unique_name("short")
    m.create(name, 1)
    app = m.appender(name)
    app.append_batch([("a", b"1" * 300), ("b", b"2" * 300)], partition=0)
    with short_writes(monkeypatch) as written, pytest.raises(OSError) as caught:
        append(app, "lost", b"x" * 1000)
    assert written and written[0] > 0  # garbage did reach the file
    assert app.append_to(0, "c", b"3").offset == 2  # no offset reused, none skipped
    acknowledged = [("a", b"1" * 300), ("b", b"2" * 300), ("c", b"3")]
    assert read_all(m, name) == acknowledged
    assert read_all(local_manager_factory(), name, "other_process") == acknowledged
    m.close()
    restarted = local_manager_factory()
    assert restarted.appender(name).append_to(0, "d", b"4").offset == 3
    assert read_all(restarted, name) == [*acknowledged, ("d", b"4")]
    assert isinstance(caught.value, StreamcoreError)
    assert re.search(DISK_FULL, str(caught.value)), caught.value


SINGLE_OR_BATCH = [
    pytest.param(lambda app, k, v: app.append_to(0, k, v), id="single"),
    pytest.param(lambda app, k, v: app.append_batch([(k, v)], partition=0), id="batch"),
]


@pytest.mark.parametrize("append", SINGLE_OR_BATCH)
def test_failed_roll_leaves_no_half_made_segment(
    local_manager_factory: Factory,
    unique_name: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
    append: Callable[[Any, str, bytes], None],
) -> None:
    m = local_manager_factory(segment_bytes=4096)
    name = unique_name("roll")
    m.create(name, 1)
    app = m.appender(name)
    app.append_to(0, "a", b"1" * 3000)
    real_open = os.open

    def no_new_segment(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if str(path).endswith(segment.SEGMENT_SUFFIX) and flags & os.O_CREAT:
            raise ENOSPC
        return real_open(path, flags, *args, **kwargs)

    with monkeypatch.context() as patch, pytest.raises(OSError) as caught:
        patch.setattr(os, "open", no_new_segment)
        append(app, "b", b"2" * 2000)  # does not fit: the segment rolls, and that fails
    folder = m.partition_folder(m.resolve_partitions(name)[0])
    assert segment.list_segments(folder) == [0]
    assert app.append_to(0, "c", b"3" * 2000).offset == 1
    assert segment.list_segments(folder) == [0, 1]
    m.close()
    restarted = local_manager_factory()
    assert read_all(restarted, name) == [("a", b"1" * 3000), ("c", b"3" * 2000)]
    assert isinstance(caught.value, StreamcoreError) and re.search(DISK_FULL, str(caught.value))


@pytest.mark.parametrize("append", SINGLE_OR_BATCH)
def test_failed_fsync_acknowledges_nothing_with_fsync_always(
    local_manager_factory: Factory,
    unique_name: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
    append: Callable[[Any, str, bytes], None],
) -> None:
    m = local_manager_factory(fsync="always")
    name = unique_name("fsync-fails")
    m.create(name, 1)
    app = m.appender(name)
    app.append_to(0, "a", b"1")
    with monkeypatch.context() as patch, pytest.raises(OSError) as caught:
        patch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(errno.EIO, "I/O")))
        append(app, "b", b"2")
    assert app.append_to(0, "c", b"3").offset == 1  # "b" was refused, so it is not in the log
    assert read_all(local_manager_factory(), name) == [("a", b"1"), ("c", b"3")]
    assert isinstance(caught.value, StreamcoreError) and caught.value.errno == errno.EIO
    assert "nothing of this batch was written" in str(caught.value)


class SmallDisk:
    """A 1 MiB filesystem at `path`: a real tmpfs when this user may mount one (root here and
    in CI), otherwise emulated by wrapping os.write/os.writev so writes under `path` stop short
    and then fail with ENOSPC once the files there hold 1 MiB (`real` says which)."""

    CAPACITY = 1 << 20

    def __init__(self, path: Path, real: bool) -> None:
        self.path = path
        self.real = real

    def emulate(self, monkeypatch: pytest.MonkeyPatch) -> None:
        real_write = os.write

        def free_bytes(fd: int) -> int | None:
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                return None
            if not target.startswith(str(self.path)):
                return None
            used = sum(f.stat().st_size for f in self.path.rglob("*") if f.is_file())
            return self.CAPACITY - used

        def write(fd: int, data: Any) -> int:
            free = free_bytes(fd)
            if free is None or len(data) <= free:
                return real_write(fd, data)
            if free <= 0:
                raise ENOSPC
            return real_write(fd, bytes(data)[:free])

        monkeypatch.setattr(os, "write", write)
        monkeypatch.setattr(os, "writev", lambda fd, parts: write(fd, b"".join(map(bytes, parts))))


@pytest.fixture
def small_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SmallDisk]:
    path = tmp_path / "small-disk"
    path.mkdir()
    command = ["mount", "-t", "tmpfs", "-o", f"size={SmallDisk.CAPACITY}", "tmpfs", str(path)]
    try:
        mounted = subprocess.run(command, capture_output=True, timeout=30).returncode == 0
    except OSError:
        mounted = False
    disk = SmallDisk(path, real=mounted)
    if not mounted:
        warnings.warn("cannot mount a tmpfs here: ENOSPC is emulated at os.write", stacklevel=1)
        disk.emulate(monkeypatch)
    try:
        yield disk
    finally:
        if mounted:
            subprocess.run(["umount", str(path)], check=True, timeout=30)


def test_full_disk_loses_nothing_acknowledged_and_recovers_once_space_is_freed(
    small_disk: SmallDisk, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A real ENOSPC (tmpfs of 1 MiB; emulated at os.write when mounting is not allowed)."""
    config = make_config(tmp_path)
    root = small_disk.path / "log"
    ballast = small_disk.path / "ballast"
    ballast.write_bytes(b"\0" * (300 << 10))
    managers = [LocalLogManager(root, config=config)]
    try:
        m = managers[0]
        m.create("test/full", 1)
        app = m.appender("test/full")
        acknowledged: list[tuple[str, bytes]] = []
        error = None
        for i in range(40):
            batch = [(f"k{i}-{j}", bytes([i]) * (20 << 10)) for j in range(3)]
            try:
                app.append_batch(batch, partition=0)
            except OSError as exc:
                error = exc
                break
            acknowledged += batch
        assert error is not None, "the disk never filled up"
        with pytest.raises(OSError) as single:  # the single-record path too
            app.append_to(0, "big", b"y" * (200 << 10))

        ballast.unlink()
        assert app.append_to(0, "after", b"z").offset == len(acknowledged)
        acknowledged.append(("after", b"z"))
        managers.append(LocalLogManager(root, config=config))  # a reader elsewhere
        assert read_all(managers[-1], "test/full") == acknowledged
        m.close()

        with caplog.at_level(logging.WARNING, logger="streamcore"):
            managers.append(restarted := LocalLogManager(root, config=config))
            assert restarted.appender("test/full").append_to(0, "end", b"!").offset == len(
                acknowledged
            )
        assert not [r for r in caplog.records if "truncating" in r.getMessage()]
        assert read_all(restarted, "test/full", "again") == [*acknowledged, ("end", b"!")]
        for exc in (error, single.value):
            assert isinstance(exc, StreamcoreError) and exc.errno == errno.ENOSPC
            assert re.search(DISK_FULL, str(exc)) and "test-full-00" in str(exc), exc
    finally:
        for manager in managers:
            manager.close()


# -- 2. fsync=batch syncs an idle writer ---------------------------------------------------------


def test_batch_fsync_syncs_an_idle_writer_within_about_a_second(
    local_manager_factory: Factory,
    unique_name: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_fsync = os.fsync
    segment_syncs: list[float] = []

    def fsync(fd: int) -> None:
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/self/fd/{fd}").endswith(segment.SEGMENT_SUFFIX):
                segment_syncs.append(time.monotonic())
        real_fsync(fd)

    threads_before = set(threading.enumerate())
    m = local_manager_factory(fsync="batch")
    name = unique_name("idle")
    m.create(name, 2)
    monkeypatch.setattr(os, "fsync", fsync)
    app = m.appender(name)
    app.append_batch([(f"k{i}", b"v") for i in range(100)])  # a burst, then silence
    burst_end = time.monotonic()
    deadline = burst_end + 3.0
    while len(segment_syncs) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(segment_syncs) == 2, "an idle writer's appends were never fsynced"
    assert max(segment_syncs) - burst_end < 1.75
    time.sleep(1.2)
    assert len(segment_syncs) == 2  # nothing new: no more syncs
    m.close()
    assert set(threading.enumerate()) <= threads_before  # close() stopped the timer


# -- 3. append_batch is all or nothing across partitions -----------------------------------------


def test_append_batch_writes_nothing_when_a_later_partition_is_locked(
    local_manager_factory: Factory, unique_name: Callable[[str], str]
) -> None:
    m, other = local_manager_factory(), local_manager_factory()
    name = unique_name("locked")
    m.create(name, 2)
    other.appender(name).append_to(1, "held", b"by another writer")  # holds partition 1's lock
    items = [(key_in(p, lambda k: partition_for_key(k, 2)), b"v") for p in (0, 1)]
    with pytest.raises(LogLockedError):
        m.appender(name).append_batch(items)
    assert local_manager_factory().end_offsets(name) == [0, 1]
    other.close()
    m.appender(name).append_batch(items)  # the retry writes each record once
    assert local_manager_factory().end_offsets(name) == [1, 2]


def test_append_batch_writes_nothing_when_a_later_partition_batch_is_too_big(
    local_manager_factory: Factory,
    unique_name: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(segment, "MAX_BATCH_BODY", 4096)  # the 1 GiB format limit, scaled down
    m = local_manager_factory()
    name = unique_name("too-big")
    m.create(name, 2)
    k0, k1 = (key_in(p, lambda k: partition_for_key(k, 2)) for p in (0, 1))
    items = [(k0, b"small")] + [(k1, b"x" * 500)] * 10
    with pytest.raises(RecordTooLargeError, match="smaller batches"):
        m.appender(name).append_batch(items)
    assert m.end_offsets(name) == [0, 0]
    assert read_all(local_manager_factory(), name) == []


@pytest.mark.parametrize("bad", ["timestamp", "key"])
def test_append_batch_writes_nothing_on_bad_input_in_a_later_partition(
    manager: LogManager, new_log: Callable[..., str], bad: str
) -> None:
    name = new_log(2)
    app = manager.appender(name)
    partition_of = getattr(app, "partition_for", lambda k: partition_for_key(k, 2))
    k0, k1 = key_in(0, partition_of), key_in(1, partition_of)
    if bad == "key":  # last, in partition 1 of the local log (Kafka cannot hash it: never sent)
        k1 = key_in(1, lambda k: partition_for_key(k, 2), "\ud800")
    items = [(k0, b"a"), (k0, b"b"), (k1, b"c")]
    timestamps = [1_000, 2_000, "yesterday" if bad == "timestamp" else 3_000]
    match = "timestamp #2 is 'yesterday'" if bad == "timestamp" else "key #2 .* not .*UTF-8"
    with pytest.raises((ValueError, TypeError)) as caught:
        app.append_batch(items, timestamps=timestamps)
    assert manager.end_offsets(name) == [0, 0]
    assert isinstance(caught.value, StreamcoreError) and isinstance(caught.value, ValueError)
    assert re.search(match, str(caught.value)), caught.value


# -- 4. a record larger than the format allows ---------------------------------------------------


def test_max_record_bytes_above_the_format_limit_is_refused(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    limit = segment.MAX_BATCH_BODY - 16  # one record with an empty key fills one batch body
    assert LogDefaults(max_record_bytes=limit).max_record_bytes == limit
    with pytest.raises(ConfigError, match=rf"log\.max_record_bytes is {limit + 1}; .*at most"):
        LogDefaults(max_record_bytes=limit + 1)
    clean_env.setenv("STREAMCORE_LOG_MAX_RECORD_BYTES", str(2 << 30))
    (toml := tmp_path / "streamcore.toml").write_text("")
    with pytest.raises(ConfigError, match=r"split .*payload"):
        load_config(toml)


@pytest.mark.parametrize(
    "append",
    [
        pytest.param(lambda app, k, v: app.append_to(0, k, v), id="single"),
        pytest.param(lambda app, k, v: app.append_batch([(k, v)], partition=0), id="batch"),
        pytest.param(append_arrow, id="arrow"),
    ],
)
def test_record_over_the_batch_limit_is_refused_not_lost(
    local_manager_factory: Factory,
    unique_name: Callable[[str], str],
    monkeypatch: pytest.MonkeyPatch,
    append: Callable[[Any, str, bytes], None],
) -> None:
    monkeypatch.setattr(segment, "MAX_BATCH_BODY", 4096)  # the 1 GiB format limit, scaled down
    m = local_manager_factory(max_record_bytes=1 << 20)
    name = unique_name("huge")
    m.create(name, 1)
    app = m.appender(name)
    app.append_to(0, "before", b"ok")
    with pytest.raises(RecordTooLargeError, match="split the payload"):
        append(app, "huge", b"x" * 5000)
    assert app.append_to(0, "after", b"ok").offset == 1
    m.close()
    restarted = local_manager_factory()
    assert read_all(restarted, name) == [("before", b"ok"), ("after", b"ok")]


# -- 5. keys that are not UTF-8 ------------------------------------------------------------------


@pytest.mark.parametrize("key_type", ["binary", "large_binary"])
def test_arrow_keys_that_are_not_utf8_are_refused(
    local_manager_factory: Factory, unique_name: Callable[[str], str], key_type: str
) -> None:
    pa = pytest.importorskip("pyarrow")
    m = local_manager_factory()
    name = unique_name("binary-keys")
    m.create(name, 1)
    app = m.appender(name)
    binary = getattr(pa, key_type)()
    app.append_arrow(0, pa.array(["é".encode(), b"k"], binary), pa.array([b"1", b"2"]))
    with pytest.raises(ValueError, match=r"key #1 \(b'\\xff\\xfe'\) is not valid UTF-8") as caught:
        app.append_arrow(0, pa.array([b"ok", b"\xff\xfe"], binary), pa.array([b"3", b"4"]))
    assert isinstance(caught.value, StreamcoreError)
    assert read_all(m, name) == [("é", b"1"), ("k", b"2")]
    assert app.append_to(0, "next", b"5").offset == 2
