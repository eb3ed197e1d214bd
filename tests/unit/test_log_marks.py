"""Mark mode (Nuclio's Kafka model): `mark(record)` once processed, marked positions committed
every `commit_interval`, on `commit_marked()`, on revoke and on close. Generic tests run on every
backend of the `manager` fixture; the crash test kills a real consumer process on the local log."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

from streamcore.log import LogManager, LogOffset, LogPartition, LogRecord

NewLog = Callable[..., str]
INTERVAL = 0.4


def fill(manager: LogManager, name: str, partitions: int, per_partition: int) -> None:
    app = manager.appender(name)
    for p in range(partitions):
        app.append_batch(
            [(f"k{i}", f"p{p}-{i}".encode()) for i in range(per_partition)], partition=p
        )


def read_n(tailer, n: int, timeout: float = 10.0) -> list[LogRecord]:
    out: list[LogRecord] = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        rec = tailer.read(0.1)
        if rec is not None:
            out.append(rec)
    assert len(out) == n, f"read {len(out)} records of {n}"
    return out


def test_marks_are_committed_after_the_interval(manager: LogManager, new_log: NewLog) -> None:
    name = new_log(1)
    fill(manager, name, 1, 20)
    tailer = manager.tailer("test/marks", name)
    tailer.commit_interval = INTERVAL
    tailer.commit_marked()  # starts the interval now, whatever the backend's default start
    started = time.monotonic()
    records = read_n(tailer, 5)
    for rec in records:
        tailer.mark(rec)
    if time.monotonic() - started < INTERVAL * 0.8:
        assert manager.committed(name, "test/marks") == [None], "committed before the interval"
    time.sleep(INTERVAL + 0.05)
    tailer.mark(records[-1])  # marking again moves nothing, but the commit is due
    assert manager.committed(name, "test/marks") == [5]
    tailer.close()


def test_an_idle_reader_commits_its_marks_on_read(manager: LogManager, new_log: NewLog) -> None:
    name = new_log(1)
    fill(manager, name, 1, 3)
    tailer = manager.tailer("test/marks", name)
    tailer.commit_interval = INTERVAL
    tailer.commit_marked()
    for rec in read_n(tailer, 3):
        tailer.mark(rec)
    deadline = time.monotonic() + INTERVAL + 5.0
    while manager.committed(name, "test/marks") != [3] and time.monotonic() < deadline:
        assert tailer.read(0.1) is None
    assert manager.committed(name, "test/marks") == [3]
    tailer.close()


def test_close_commits_the_marks_and_nothing_else(manager: LogManager, new_log: NewLog) -> None:
    name = new_log(2)
    fill(manager, name, 2, 10)
    tailer = manager.tailer("test/marks", name)
    tailer.commit_interval = 3600
    records = read_n(tailer, 20)
    for rec in records:  # mark the first 4 of each partition only: the rest is not processed
        if rec.offset < 4:
            tailer.mark(rec)
    assert manager.committed(name, "test/marks") == [None, None]
    tailer.close()
    assert manager.committed(name, "test/marks") == [4, 4]


def test_commit_marked_explicitly(manager: LogManager, new_log: NewLog) -> None:
    name = new_log(2)
    fill(manager, name, 2, 5)
    tailer = manager.tailer("test/marks", name)
    tailer.commit_interval = 3600
    for rec in read_n(tailer, 10):
        if rec.partition.partition == 1 or rec.offset < 2:
            tailer.mark(rec)
    p0, p1 = LogPartition.of(name, 0), LogPartition.of(name, 1)
    assert tailer.commit_marked() == {p0: 2, p1: 5}
    assert manager.committed(name, "test/marks") == [2, 5]
    assert tailer.commit_marked() == {}  # nothing new marked
    tailer.mark(LogOffset(p0, 3))  # a LogOffset marks too
    assert tailer.commit_marked() == {p0: 4}
    assert manager.committed(name, "test/marks") == [4, 5]
    tailer.close()


def test_marks_never_move_a_position_backwards(manager: LogManager, new_log: NewLog) -> None:
    name = new_log(1)
    fill(manager, name, 1, 12)
    tailer = manager.tailer("test/marks", name)
    tailer.commit_interval = 3600
    records = read_n(tailer, 12)
    tailer.mark(records[7])
    tailer.mark(records[3])  # completed out of order: the mark stays after record 7
    p0 = LogPartition.of(name, 0)
    assert tailer.commit_marked() == {p0: 8}
    tailer.mark(records[5])  # older than what was committed: nothing to commit
    assert tailer.commit_marked() == {}
    tailer.close()
    assert manager.committed(name, "test/marks") == [8]
    tailer = manager.tailer("test/marks", name)
    assert tailer.read(1.0).offset == 8
    tailer.mark(records[10])
    tailer.close()
    assert manager.committed(name, "test/marks") == [11]


# -- crash: a consumer process in mark mode is SIGKILLed ---------------------------------------
CONSUMER = """
import sys, time
from streamcore.config import LogDefaults, StreamcoreConfig
from streamcore.log.local.manager import LocalLogManager

root, name, interval = sys.argv[1], sys.argv[2], float(sys.argv[3])
m = LocalLogManager(root, config=StreamcoreConfig(home=root, log=LogDefaults()))
tailer = m.tailer("test/crash", name)
tailer.commit_interval = interval
real_commit = tailer.commit_offset
def commit_offset(partition, offset):
    real_commit(partition, offset)
    print("commit", partition.partition, offset, time.time(), flush=True)
tailer.commit_offset = commit_offset
print("ready", flush=True)
while True:
    rec = tailer.read(1.0)
    if rec is None:
        continue
    print("rec", rec.partition.partition, rec.offset, time.time(), flush=True)
    time.sleep(0.002)  # "processing"
    tailer.mark(rec)
"""


def test_a_crash_loses_at_most_the_uncommitted_interval(
    tmp_path: Path, local_manager_factory
) -> None:
    manager = local_manager_factory()
    name, partitions, per_partition, interval = "test/crash", 2, 1000, 0.3
    manager.create(name, partitions)
    fill(manager, name, partitions, per_partition)
    script = tmp_path / "consumer.py"
    script.write_text(textwrap.dedent(CONSUMER))
    proc = subprocess.Popen(
        [sys.executable, str(script), str(manager.root), name, str(interval)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    processed: list[tuple[int, int, float]] = []
    commits = 0
    try:
        assert proc.stdout.readline().strip() == "ready"
        # Kill it after a few periodic commits, in the middle of an interval: at least 40
        # records processed since the last commit.
        since_commit = 0
        while commits < 3 or since_commit < 40:
            line = proc.stdout.readline()
            assert line, "the consumer stopped early"
            kind, p, o, ts = line.split()
            if kind == "rec":
                processed.append((int(p), int(o), float(ts)))
                since_commit += 1
            else:
                commits += 1
                since_commit = 0
        proc.send_signal(signal.SIGKILL)
        rest, _ = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    for line in rest.splitlines():  # lines written before the kill
        kind, p, o, ts = line.split()
        if kind == "rec":
            processed.append((int(p), int(o), float(ts)))
    committed = manager.committed(name, "test/crash")
    last_ts = max(ts for _, _, ts in processed)
    by_partition = {p: {o for q, o, _ in processed if q == p} for p in range(partitions)}
    for p in range(partitions):
        pos = committed[p] or 0
        # None skipped: everything before the committed position was processed ...
        assert set(range(pos)) <= by_partition[p], f"partition {p}: committed {pos} skips records"
        # ... and what is re-delivered was processed within the last commit interval (+ slack).
        redelivered = [(o, ts) for q, o, ts in processed if q == p and o >= pos]
        assert all(ts >= last_ts - interval - 0.5 for _, ts in redelivered), redelivered[:5]
    # A new consumer of the group starts at the committed positions and gets the rest.
    tailer = manager.tailer("test/crash", name)
    seen = {p: set() for p in range(partitions)}
    first: dict[int, int] = {}
    while (rec := tailer.read(0.2)) is not None:
        first.setdefault(rec.partition.partition, rec.offset)
        seen[rec.partition.partition].add(rec.offset)
    tailer.close()
    for p in range(partitions):
        assert first.get(p, per_partition) == (committed[p] or 0)
        assert by_partition[p] | seen[p] == set(range(per_partition))
