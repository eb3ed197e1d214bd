"""Outbox faults: slow batches against the hung detector, dependency cycles in one put, and
failures that an ordered queue must retry in put order.

Each test runs on SQLite and on PostgreSQL (`outbox_url`, via `make_outbox`)."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable

import pytest
import sqlalchemy as sa

from streamcore.codecs import get_codec
from streamcore.config import LogDefaults, StreamcoreConfig
from streamcore.log.local.manager import LocalLogManager
from streamcore.outbox import (
    DONE,
    ERROR,
    ConsumerFailedError,
    NoJobError,
    Outbox,
    OutboxError,
    VirtualQueue,
    put,
    put_many,
    relay,
)
from streamcore.outbox.retry import RetryPoller
from streamcore.outbox.schema import jobs
from streamcore.record import Record


class Runs:
    """How many times each job body started, from any worker thread."""

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()

    def start(self, job_id: str) -> int:
        with self._lock:
            self.counts[job_id] += 1
            return self.counts[job_id]

    def most(self) -> int:
        with self._lock:
            return max(self.counts.values(), default=0)


def statuses(outbox: Outbox, queue: str) -> dict[str, str]:
    with outbox.engine.connect() as conn:
        rows = conn.execute(sa.select(jobs.c.id, jobs.c.status).where(jobs.c.queue == queue))
        return {r.id: r.status for r in rows}


def run_until(
    outbox: Outbox, stop: Callable[[], bool], timeout: float, linger: float = 0.0
) -> None:
    """Start the workers and run them until `stop()` (then `linger` s more, for a wrong late
    run to show) or `timeout` s, then stop them."""
    deadline = time.monotonic() + timeout
    with outbox:
        while not stop() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(linger)


def test_a_batch_slower_than_the_hung_timeout_runs_each_job_once_and_drains(make_outbox, registry):
    """4 jobs of 0.8 s claimed in one batch with hung_timeout 2 s: each job alone is well
    under the timeout, so none is hung; the batch as a whole is not a job."""
    runs = Runs()

    def slow(job_id: str) -> None:
        runs.start(job_id)
        time.sleep(0.8)

    registry.register("slow", slow, hung_timeout=2.0)
    outbox = make_outbox(workers=2, batch_size=4)
    ids = ["j0", "j1", "j2", "j3"]
    with outbox.engine.begin() as conn:  # put before start: the first claim takes all 4
        put_many(conn, "slow", ids, ids=ids, registry=registry)

    def drained_or_duplicated() -> bool:
        return runs.most() > 1 or set(statuses(outbox, "slow").values()) == {DONE}

    run_until(outbox, drained_or_duplicated, timeout=30.0)
    assert dict(runs.counts) == dict.fromkeys(ids, 1)
    assert statuses(outbox, "slow") == dict.fromkeys(ids, DONE)


def test_only_the_job_that_overruns_the_hung_timeout_runs_again(make_outbox, registry):
    """One batch: two instant jobs, one that runs 3 s on its first try (genuinely hung with
    hung_timeout 1 s: at-least-once, it runs again elsewhere), then two instant jobs. The
    instant ones, finished before it or waiting behind it, must not run twice."""
    runs = Runs()
    first_overrun_ended = threading.Event()

    def consumer(job_id: str) -> None:
        if runs.start(job_id) == 1 and job_id == "overrun":
            time.sleep(3.0)
            first_overrun_ended.set()

    registry.register("q", consumer, hung_timeout=1.0)
    outbox = make_outbox(workers=2, batch_size=5)
    ids = ["before-1", "before-2", "overrun", "after-1", "after-2"]
    with outbox.engine.begin() as conn:
        put_many(conn, "q", ids, ids=ids, registry=registry)

    def settled() -> bool:  # every job done, and the first run of the overrun ended
        return set(statuses(outbox, "q").values()) == {DONE} and first_overrun_ended.is_set()

    run_until(outbox, settled, timeout=30.0, linger=1.0)
    assert dict(runs.counts) == {**dict.fromkeys(ids, 1), "overrun": 2}
    assert statuses(outbox, "q") == dict.fromkeys(ids, DONE)


def test_a_job_depending_on_itself_is_refused_before_anything_is_written(make_outbox, registry):
    registry.register("q", lambda p: p)
    outbox = make_outbox()
    with outbox.engine.begin() as conn:
        with pytest.raises(OutboxError, match=r"'me' -> 'me'") as refused:
            put(conn, "q", 1, id="me", depends_on=("q", "me"), registry=registry)
        with pytest.raises(OutboxError, match=r"'a' -> 'a'"):  # put_many's shared depends_on
            put_many(conn, "q", [1, 2], ids=["a", "b"], depends_on=("q", "a"), registry=registry)
    assert type(refused.value).__name__ == "DependencyCycleError"
    assert "drop or change" in str(refused.value)
    assert statuses(outbox, "q") == {}


def test_a_dependency_cycle_inside_one_put_many_is_refused(make_outbox, registry):
    registry.register("q", lambda p: p, depends_on=lambda p: ("q", p["after"]) if p else None)
    outbox = make_outbox()
    payloads = [None, {"after": "c"}, {"after": "d"}, {"after": "b"}, {"after": "a"}]
    with outbox.engine.begin() as conn:
        with pytest.raises(OutboxError, match=r"'b' -> 'c' -> 'd' -> 'b'") as refused:
            put_many(conn, "q", payloads, ids=["a", "b", "c", "d", "e"], registry=registry)
        # A chain inside one put (later jobs waiting for earlier ones, or the reverse) is fine.
        put_many(
            conn,
            "q",
            [{"after": "y"}, None, {"after": "x"}],
            ids=["x", "y", "z"],
            registry=registry,
        )
    assert type(refused.value).__name__ == "DependencyCycleError"
    assert statuses(outbox, "q") == dict.fromkeys(["x", "y", "z"], "init")


def test_an_ordered_relay_keeps_the_put_order_when_a_retry_fails_again(
    make_outbox, registry, tmp_path
):
    """Issue 25's sequence on the outbox's own relay into a real local log: the batch 0, 1, 2
    fails, then the retry of 0 fails too, which starts 0's backoff again while 1's and 2's have
    passed. Nothing may be appended before 0."""
    failures = [0, 0]  # the payload whose record fails, once per failure

    def message(key: str, payload: int) -> Record:
        if failures and payload == failures[0]:
            failures.pop()
            raise ConnectionError("log unavailable")
        return Record.of(key, str(payload).encode())

    config = StreamcoreConfig(home=tmp_path, log=LogDefaults(fsync="always"))
    with LocalLogManager(tmp_path / "log", config=config) as manager:
        relay(
            "events",
            "app/events",
            manager=manager,
            message=message,
            log_codec=get_codec("avro"),
            batch_capacity=3,
            error_backoff=0.3,
            registry=registry,
        )
        outbox = make_outbox()
        with outbox.engine.begin() as conn:
            put_many(conn, "events", [0, 1, 2], registry=registry)
        run_until(outbox, lambda: set(statuses(outbox, "events").values()) == {DONE}, 30.0)
        tailer = manager.tailer("test/reader", "app/events", get_codec("avro"))
        appended = [int(r.message.data) for r in tailer.read_batch(10, timeout=1.0)]
        tailer.close()
    assert not failures
    assert appended == [0, 1, 2]


def test_an_ordered_queue_holds_every_later_job_behind_its_oldest_error(make_outbox, registry):
    """Rounds of the retry poller, run one at a time: on an ordered queue it retries only the
    oldest job in error by put order, even once that job is out of tries (an operator's
    `retry_one_error` then runs that job, not a later one)."""
    calls: list[list[int]] = []
    broken = [True]

    def consume(batch: list[int]) -> None:
        calls.append(batch)
        if 0 in batch and broken[0]:
            raise ConnectionError("downstream is down")

    registry.register(
        "ordered", consume, ordered=True, batch_capacity=3, max_retries=2, error_backoff=60
    )
    outbox = make_outbox()
    with outbox.engine.begin() as conn:
        put_many(conn, "ordered", [0, 1, 2], ids=["j0", "j1", "j2"], registry=registry)
    with pytest.raises(ConsumerFailedError):
        VirtualQueue(outbox).consume_one("ordered")
    poller = RetryPoller(
        outbox.engine,
        registry,
        poll_interval=1.0,
        watcher=outbox.watcher,
        counters=outbox.counters,
        on_retried=lambda: None,
    )

    def poll() -> dict[str, int]:
        """A round once every backoff has passed."""
        with outbox.engine.begin() as conn:
            conn.execute(sa.update(jobs).values(error_ms=jobs.c.error_ms - 61_000))
        return poller.poll_once()

    assert poll() == {"ordered": 0}  # j0 fails again: its last try
    assert poll() == {"ordered": 0}  # j0 is out of tries: j1 and j2 wait
    assert calls == [[0, 1, 2], [0]]
    assert statuses(outbox, "ordered") == dict.fromkeys(["j0", "j1", "j2"], ERROR)

    with pytest.raises(ConnectionError):
        outbox.retry_one_error("ordered")  # the operator's retry takes j0, the oldest
    broken[0] = False
    assert outbox.retry_one_error("ordered") is None
    assert poll() == {"ordered": 2}
    assert calls == [[0, 1, 2], [0], [0], [0], [1], [2]]
    assert statuses(outbox, "ordered") == dict.fromkeys(["j0", "j1", "j2"], DONE)
    with pytest.raises(NoJobError):
        outbox.retry_one_error("ordered")
