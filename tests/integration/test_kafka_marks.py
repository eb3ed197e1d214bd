"""Mark-and-periodic-commit on Kafka (issue 3 §6): marked positions are committed every
`commit_interval` from the read path (busy or idle), on revoke and on close; a consumer killed
with SIGKILL loses at most the uncommitted interval: those records are delivered again, and no
record is skipped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator

import pytest
from kafka_broker import scratch_prefix

from streamcore.log import LogOffset, LogPartition
from streamcore.log.kafka import KafkaLogManager

pytestmark = pytest.mark.kafka
CONFIG = {"session.timeout.ms": 3000, "heartbeat.interval.ms": 250, "fetch.wait.max.ms": 50}


@pytest.fixture
def kafka(kafka_bootstrap: str) -> Iterator[KafkaLogManager]:
    manager = KafkaLogManager(
        kafka_bootstrap, topic_prefix=scratch_prefix(), config=CONFIG, timeout=10.0
    )
    yield manager
    manager.close()


def test_marks_are_committed_from_busy_and_idle_reads_and_on_close(
    kafka: KafkaLogManager,
) -> None:
    kafka.create("test/a", 1)
    kafka.appender("test/a").append_batch([("k", bytes([i])) for i in range(10)], partition=0)
    p0 = LogPartition.of("test/a", 0)
    tailer = kafka.tailer("g", "test/a")
    tailer.commit_interval = 0.3
    tailer.mark(tailer.read(5))  # the first mark starts the interval
    for _ in range(3):
        tailer.mark(tailer.read(0))
    assert kafka.committed("test/a", "g") == [None]  # within the interval
    time.sleep(0.35)
    assert tailer.read(0).offset == 4  # a busy read (record already fetched) commits the marks
    assert kafka.committed("test/a", "g") == [4]
    tailer.mark(LogOffset(p0, 4))
    for _ in range(5):
        tailer.mark(tailer.read(0))
    assert tailer.read(0) is None
    time.sleep(0.35)
    assert tailer.read(0) is None  # an idle read commits them too
    assert kafka.committed("test/a", "g") == [10]
    kafka.appender("test/a").append_to(0, "k", b"more")
    tailer.mark(tailer.read(5))
    tailer.close()  # and close
    assert kafka.committed("test/a", "g") == [11]


CHILD = textwrap.dedent(
    """
    import sys, time
    from streamcore.log.kafka import KafkaLogManager

    bootstrap, prefix, mode, interval = sys.argv[1:5]
    config = {"session.timeout.ms": 3000, "heartbeat.interval.ms": 250, "fetch.wait.max.ms": 50}
    manager = KafkaLogManager(bootstrap, topic_prefix=prefix, config=config, timeout=10)
    if mode == "static":
        tailer = manager.tailer("workers", "test/work")
    else:
        tailer = manager.subscribe("workers", ["test/work"])
    tailer.commit_interval = float(interval)
    out = sys.stdout
    while True:
        record = tailer.read(0.05)
        if record is None:
            continue
        time.sleep(0.002)  # the processing
        tailer.mark(record)
        out.write(f"done {record.partition.partition} {record.offset} {time.time()}\\n")
        out.flush()
    """
)


@pytest.mark.parametrize("mode", ["static", "subscribe"])
def test_sigkill_loses_at_most_the_uncommitted_interval(kafka: KafkaLogManager, mode: str) -> None:
    interval, slack = 0.3, 0.25
    kafka.create("test/work", 2)
    total = 3000
    kafka.appender("test/work").append_batch([(f"k{i}", b"x" * 20) for i in range(total)])
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            CHILD,
            kafka.bootstrap_servers,
            kafka.topic_prefix,
            mode,
            str(interval),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    processed: dict[int, list[tuple[int, float]]] = {0: [], 1: []}
    count = 0
    try:
        assert child.stdout is not None
        for line in child.stdout:
            _, partition, offset, at = line.split()
            processed[int(partition)].append((int(offset), float(at)))
            count += 1
            if count == 800:  # well past a few commit intervals
                child.send_signal(signal.SIGKILL)
                killed_at = time.time()
                break
    finally:
        child.kill()
        child.wait(10)
    committed = kafka.committed("test/work", "workers")
    redelivered_expected = 0
    for p in (0, 1):
        offsets = [o for o, _ in processed[p]]
        if not offsets:
            assert committed[p] in (None, 0)
            continue
        assert offsets == list(range(len(offsets))), "one consumer reads a partition in order"
        done = len(offsets)  # offsets 0..done-1 were processed and marked
        position = committed[p] or 0
        # none skipped: never committed past what was processed
        assert position <= done
        # at most the uncommitted interval lost: what was marked before it is committed
        old = [o for o, at in processed[p] if at <= killed_at - interval - slack]
        if old:
            assert position >= max(old) + 1, (p, position, max(old))
        redelivered_expected += done - position

    # Another member resumes from the commits: the uncommitted records come again, none skipped.
    if mode == "static":
        tailer = kafka.tailer("workers", "test/work")
    else:
        tailer = kafka.subscribe("workers", ["test/work"])  # once the killed member expired
    seen: dict[int, list[int]] = {0: [], 1: []}
    deadline = time.monotonic() + 30
    while sum(map(len, seen.values())) < total - sum(c or 0 for c in committed):
        assert time.monotonic() < deadline
        record = tailer.read(0.1)
        if record is not None:
            seen[record.partition.partition].append(record.offset)
    for p in (0, 1):
        start = committed[p] or 0
        assert seen[p][:1] == [start] or not seen[p]
        assert seen[p] == list(range(start, start + len(seen[p])))
    again = sum(len([o for o in seen[p] if o < len(processed[p])]) for p in (0, 1))
    assert again == redelivered_expected
    assert again <= (interval + slack) / 0.002 + 50  # at most what one interval processes
    tailer.close()
