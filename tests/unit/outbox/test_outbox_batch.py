"""Batch consumers (`batch_capacity`, `batch_threshold`), on SQLite and PostgreSQL: one call per
batch, claimed whatever the outbox's batch size, due when full or when the oldest job has waited
the threshold, failing together and retried one by one. The audit relay is their user
(tests/unit/audit)."""

from __future__ import annotations

import threading
import time

import pytest
import sqlalchemy as sa

from streamcore.outbox import (
    DONE,
    ERROR,
    ConsumerFailedError,
    OutboxError,
    QueueSpec,
    VirtualQueue,
    put_many,
)
from streamcore.outbox.claim import batch_due_in
from streamcore.outbox.schema import jobs


def statuses(engine: sa.Engine, queue: str) -> dict[str, str]:
    with engine.connect() as conn:
        rows = conn.execute(sa.select(jobs.c.id, jobs.c.status).where(jobs.c.queue == queue))
        return {r.id: r.status for r in rows}


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"batch_capacity": 0}, "batch_capacity is 0; use 1 or more"),
        ({"batch_threshold": 0.5}, "only applies to batch consumers"),
        ({"batch_capacity": 5, "batch_threshold": -1.0}, "use seconds >= 0"),
    ],
)
def test_batch_options_are_checked(options: dict, words: str) -> None:
    with pytest.raises(OutboxError, match=words):
        QueueSpec("q", print, **options)


def test_an_unordered_batch_queue_gets_lists_and_fails_them_together(make_outbox, registry) -> None:
    calls: list[list[int]] = []
    lock = threading.Lock()

    def consume(payloads: list[int]) -> None:
        with lock:
            calls.append(payloads)
        if 13 in payloads and len(payloads) > 1:
            raise ValueError("13 in a batch")

    registry.register("bulk", consume, batch_capacity=8, error_backoff=0.2)
    outbox = make_outbox(workers=1, batch_size=2)  # batch_size is for one-payload consumers
    with outbox.engine.begin() as conn:
        put_many(
            conn, "bulk", list(range(20)), ids=[f"j{n:02d}" for n in range(20)], registry=registry
        )
    seen: dict[str, str] = {}

    def settled() -> bool:
        seen.clear()
        seen.update(statuses(outbox.engine, "bulk"))
        return set(seen.values()) == {DONE}

    with outbox:
        deadline = time.monotonic() + 30
        errored: set[str] = set()
        while not settled():
            errored |= {i for i, s in seen.items() if s == ERROR}
            assert time.monotonic() < deadline, seen
            time.sleep(0.02)
    assert calls[:3] == [list(range(8)), list(range(8, 16)), list(range(16, 20))]
    assert errored == {f"j{n:02d}" for n in range(8, 16)}  # the whole failed batch
    assert sorted(calls[3:]) == [[n] for n in range(8, 16)]  # retried one by one


def test_a_batch_is_due_when_full_or_when_its_oldest_job_has_waited(make_outbox, registry) -> None:
    registry.register("ordered", print, batch_capacity=3, batch_threshold=5.0, ordered=True)
    registry.register("unordered", print, batch_capacity=3, batch_threshold=5.0)
    outbox = make_outbox()
    for queue in ("ordered", "unordered"):
        ordered = queue == "ordered"
        with outbox.engine.begin() as conn:
            assert batch_due_in(conn, queue, 3, 5.0, ordered=ordered) is None
            put_many(conn, queue, [1, 2], registry=registry)
        with outbox.engine.begin() as conn:
            assert 4.0 < batch_due_in(conn, queue, 3, 5.0, ordered=ordered) <= 5.0
            conn.execute(sa.update(jobs).values(created_ms=jobs.c.created_ms - 3000))
            assert 1.0 < batch_due_in(conn, queue, 3, 5.0, ordered=ordered) <= 2.0
            put_many(conn, queue, [3], registry=registry)
            assert batch_due_in(conn, queue, 3, 5.0, ordered=ordered) == 0.0
        with outbox.engine.begin() as conn:
            conn.execute(sa.update(jobs).values(created_ms=jobs.c.created_ms - 10_000))
            assert batch_due_in(conn, queue, 10, 5.0, ordered=ordered) == 0.0
            conn.execute(sa.delete(jobs))


def test_the_virtual_queue_runs_a_batch_and_retries_one_job(make_outbox, registry) -> None:
    calls: list[list[str]] = []

    def consume(payloads: list[str]) -> int:
        calls.append(payloads)
        if len(calls) == 1:
            raise ConnectionError("down")
        return len(payloads)

    registry.register("q", consume, batch_capacity=4, ordered=True)
    outbox = make_outbox()
    with outbox.engine.begin() as conn:
        put_many(conn, "q", ["a", "b", "c", "d", "e"], ids=list("abcde"), registry=registry)
    queue = VirtualQueue(outbox)
    with pytest.raises(ConsumerFailedError, match=r"job a and 3 more of queue q failed: Conn"):
        queue.consume_one("q")
    assert statuses(outbox.engine, "q") == {**dict.fromkeys("abcd", ERROR), "e": "init"}
    assert queue.force_retry("q") == 1
    assert calls == [["a", "b", "c", "d"], ["a"]]
    assert outbox.retry_one_error("q") == 1
    assert [outbox.retry_one_error("q") for _ in range(2)] == [1, 1]
    assert queue.consume_one("q") == 1
    assert set(statuses(outbox.engine, "q").values()) == {DONE}
    assert calls[2:] == [["b"], ["c"], ["d"], ["e"]]
