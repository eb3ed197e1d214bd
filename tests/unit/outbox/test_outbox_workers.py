"""Workers, retries, hung jobs, the watcher, dependencies and ordering, on SQLite and PostgreSQL."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import sqlalchemy as sa

from streamcore.outbox import DONE, ERROR, INIT, PROCESSING, put, put_many
from streamcore.outbox.claim import now_ms
from streamcore.outbox.retry import RetryPoller
from streamcore.outbox.schema import jobs


def wait_until(condition: Callable[[], bool], timeout: float = 20.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or condition}")
        time.sleep(0.02)


def statuses(engine: sa.Engine, queue: str) -> dict[str, tuple[str, int]]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(jobs.c.id, jobs.c.status, jobs.c.tries).where(jobs.c.queue == queue)
        )
        return {r.id: (r.status, r.tries) for r in rows}


def test_workers_run_jobs_at_once_without_waiting_for_the_poll(make_outbox, registry):
    seen: list[int] = []
    registry.register("q", seen.append)
    outbox = make_outbox(poll_interval=60.0)  # only a wake-up can explain a fast pick-up
    with outbox:
        time.sleep(0.3)  # the workers are asleep now
        started = time.monotonic()
        with outbox.engine.begin() as conn:
            put_many(conn, "q", list(range(50)), registry=registry)
        wait_until(lambda: len(seen) == 50, 10, "50 jobs")
        elapsed = time.monotonic() - started
    assert sorted(seen) == list(range(50))
    assert elapsed < 5.0
    assert set(statuses(outbox.engine, "q").values()) == {(DONE, 1)}


def test_failed_job_is_recorded_then_retried_after_the_backoff(make_outbox, registry):
    calls: list[float] = []

    def flaky(payload: dict) -> str:
        calls.append(time.monotonic())
        if len(calls) == 1:
            raise ValueError(f"first try of {payload['n']} fails")
        return "ok"

    registry.register("q", flaky, error_backoff=0.5)
    outbox = make_outbox()
    with outbox:
        with outbox.engine.begin() as conn:
            put(conn, "q", {"n": 7}, id="j", registry=registry)
        wait_until(lambda: statuses(outbox.engine, "q")["j"][0] == ERROR, 10, "the error")
        [error] = outbox.get_errors("q")
        assert (error.id, error.tries, error.error_type) == ("j", 1, "ValueError")
        assert error.error_message == "first try of 7 fails"
        assert "in flaky" in error.error_traceback
        assert error.payload == {"n": 7}
        wait_until(lambda: statuses(outbox.engine, "q")["j"] == (DONE, 2), 10, "the retry")
    assert calls[1] - calls[0] >= 0.5
    [retries] = outbox.retry_stats()
    assert (retries["retried_jobs"], retries["retries"], retries["max_tries"]) == (1, 1, 2)


def test_retry_poller_stops_at_the_first_failure_of_a_queue(make_outbox, registry):
    tried: list[str] = []

    def broken(payload: str) -> None:
        tried.append(payload)
        raise ConnectionError("downstream is down")

    registry.register("down", broken, error_backoff=0.01)
    registry.register("up", lambda p: tried.append(p), error_backoff=0.01)
    outbox = make_outbox()
    with outbox.engine.begin() as conn:
        put_many(conn, "down", ["d1", "d2", "d3"], registry=registry)
        put_many(conn, "up", ["u1", "u2"], registry=registry)
        conn.execute(sa.update(jobs).values(status=ERROR, error_ms=now_ms() - 1000, tries=1))
    poller = RetryPoller(
        outbox.engine,
        registry,
        poll_interval=1.0,
        watcher=outbox.watcher,
        counters=outbox.counters,
        on_retried=lambda: None,
    )
    assert poller.poll_once() == {"down": 0, "up": 2}
    assert tried == ["d1", "u1", "u2"]
    assert statuses(outbox.engine, "down")  # the untried ones are still waiting in error
    tries = sorted(t for _, t in statuses(outbox.engine, "down").values())
    assert tries == [1, 1, 2]


def test_max_retries_leaves_the_job_in_error(make_outbox, registry):
    attempts = []
    registry.register("q", lambda p: attempts.append(p) or 1 / 0, max_retries=3, error_backoff=0.05)
    outbox = make_outbox()
    with outbox:
        with outbox.engine.begin() as conn:
            put(conn, "q", "x", id="j", registry=registry)
        wait_until(lambda: len(attempts) == 3, 10, "three tries")
        time.sleep(0.5)  # several more poll rounds: no fourth try
    assert statuses(outbox.engine, "q")["j"] == (ERROR, 3)
    assert len(attempts) == 3
    assert outbox.force_retry("q") == 1
    assert statuses(outbox.engine, "q")["j"] == (INIT, 3)


def test_zero_max_retries_means_forever(make_outbox, registry):
    registry.register("q", lambda p: p, max_retries=0)
    outbox = make_outbox()
    spec = registry.get("q")
    assert spec.can_retry(10**9)
    with outbox.engine.begin() as conn:
        put(conn, "q", 1, id="j", registry=registry)
        conn.execute(sa.update(jobs).values(status=ERROR, tries=50_000, error_ms=0))
    poller = RetryPoller(
        outbox.engine,
        registry,
        poll_interval=1.0,
        watcher=outbox.watcher,
        counters=outbox.counters,
        on_retried=lambda: None,
    )
    assert poller.poll_once() == {"q": 1}
    assert statuses(outbox.engine, "q")["j"] == (DONE, 50_001)


def test_hung_jobs_are_retried_or_errored_past_max_retries(make_outbox, registry):
    registry.register("q", lambda p: p, hung_timeout=1.0, max_retries=2)
    outbox = make_outbox()
    with outbox.engine.begin() as conn:
        put(conn, "q", 1, id="young", registry=registry)
        put(conn, "q", 2, id="old", registry=registry)
        put(conn, "q", 3, id="old-last-try", registry=registry)
        conn.execute(sa.update(jobs).values(status=PROCESSING, lock_token="t", tries=1))
        conn.execute(
            sa.update(jobs).where(jobs.c.id != "young").values(processing_ms=now_ms() - 5000)
        )
        conn.execute(sa.update(jobs).where(jobs.c.id == "young").values(processing_ms=now_ms()))
        conn.execute(sa.update(jobs).where(jobs.c.id == "old-last-try").values(tries=2))
    poller = RetryPoller(
        outbox.engine,
        registry,
        poll_interval=1.0,
        watcher=outbox.watcher,
        counters=outbox.counters,
        on_retried=lambda: None,
    )
    poller.reset_hung(registry.get("q"))
    assert statuses(outbox.engine, "q") == {
        "young": (PROCESSING, 1),
        "old": (INIT, 1),
        "old-last-try": (ERROR, 2),
    }
    [error] = outbox.get_errors("q")
    assert error.error_type == "HungJobError"


def test_a_late_finish_after_a_hung_reset_changes_nothing(make_outbox, registry):
    from streamcore.outbox import store
    from streamcore.outbox.claim import claim_batch

    registry.register("q", lambda p: p)
    outbox = make_outbox()
    with outbox.engine.begin() as conn:
        put(conn, "q", 1, id="j", registry=registry)
    with outbox.engine.begin() as conn:
        [first] = claim_batch(conn, "q", 10)
    with outbox.engine.begin() as conn:  # the hung detector gives it to another worker
        store.reset_hung(conn, "q", -1.0, 0)
        [second] = claim_batch(conn, "q", 10)
    assert first.token != second.token
    with outbox.engine.begin() as conn:
        assert store.mark_done(conn, [first]) == 0
        assert not store.mark_error(conn, first, RuntimeError("late"))
    assert statuses(outbox.engine, "q")["j"] == (PROCESSING, 2)
    with outbox.engine.begin() as conn:
        assert store.mark_done(conn, [second]) == 1
    assert statuses(outbox.engine, "q")["j"] == (DONE, 2)


def test_watcher_logs_the_stack_of_a_job_over_its_max_execute_time(make_outbox, registry, caplog):
    release = threading.Event()

    def slow_consumer_waits_here(payload: int) -> None:
        release.wait(10)

    registry.register("slow", slow_consumer_waits_here, max_execute_time=0.2)
    outbox = make_outbox()
    caplog.set_level(logging.WARNING, logger="streamcore.outbox.watcher")
    with outbox:
        with outbox.engine.begin() as conn:
            put(conn, "slow", 1, id="s1", registry=registry)
        wait_until(lambda: outbox.watcher.overdue == 1, 10, "the watcher")
        release.set()
    [message] = [r.getMessage() for r in caplog.records if "max execute time" in r.getMessage()]
    assert "job s1 of queue slow" in message
    assert "slow_consumer_waits_here" in message
    assert statuses(outbox.engine, "slow")["s1"] == (DONE, 1)


def test_dependent_job_waits_for_its_dependency(make_outbox, registry):
    order: list[str] = []
    gate = threading.Event()

    def parent(payload: str) -> None:
        gate.wait(10)
        order.append(payload)

    registry.register("parent", parent)
    registry.register("child", order.append)
    outbox = make_outbox(workers=3)
    with outbox:
        with outbox.engine.begin() as conn:
            put(conn, "parent", "p", id="p1", registry=registry)
            put(conn, "child", "c", depends_on=("parent", "p1"), registry=registry)
        time.sleep(0.5)  # several claim rounds while the parent runs
        assert order == []
        gate.set()
        wait_until(lambda: len(order) == 2, 10, "both jobs")
    assert order == ["p", "c"]


def test_ordered_queue_keeps_put_order_and_blocks_behind_a_failure(make_outbox, registry):
    seen: list[int] = []
    failures = {3}

    def consumer(n: int) -> None:
        if n in failures:
            failures.discard(n)
            raise RuntimeError(f"{n} fails once")
        seen.append(n)

    registry.register("ordered", consumer, ordered=True, error_backoff=0.3)
    outbox = make_outbox(workers=4, batch_size=4)
    with outbox:
        with outbox.engine.begin() as conn:
            put_many(conn, "ordered", list(range(20)), registry=registry)
        wait_until(lambda: len(seen) == 20, 15, "20 jobs")
    assert seen == list(range(20))


def test_stop_is_graceful_and_gives_unstarted_jobs_back(make_outbox, registry):
    started = threading.Event()
    finish = threading.Event()
    ran: list[int] = []

    def consumer(n: int) -> None:
        started.set()
        finish.wait(10)
        ran.append(n)

    registry.register("q", consumer)
    outbox = make_outbox(workers=1, batch_size=5)
    outbox.start()
    with outbox.engine.begin() as conn:
        put_many(conn, "q", [1, 2, 3, 4, 5], registry=registry)
    assert started.wait(10)
    threading.Timer(0.3, finish.set).start()
    assert outbox.stop(timeout=10)
    assert ran == [1]  # the running job finished, the rest of the batch was given back
    rows = statuses(outbox.engine, "q")
    assert sorted(rows.values()) == [(DONE, 1)] + [(INIT, 0)] * 4


def test_health_grace_threads_and_stale_errors(make_outbox, registry):
    registry.register("q", lambda p: 1 / 0, error_backoff=60)
    outbox = make_outbox(startup_grace=0.0, healthy_allowed_error_time=0.2)
    assert outbox.health().reason == "not started"
    graceful = make_outbox(startup_grace=600)
    with graceful:
        assert graceful.health().healthy
    with outbox:
        assert outbox.healthy()
        with outbox.engine.begin() as conn:
            put(conn, "q", 1, id="bad", registry=registry)
        wait_until(lambda: bool(outbox.get_errors("q")), 10, "the error")
        time.sleep(0.3)
        health = outbox.health()
        assert not health.healthy
        assert health.stale_errors == {"q": 1}
        assert "streamcore outbox errors" in health.reason
        assert "streamcore_outbox_healthy 0" in outbox.metrics_text()
    with outbox.engine.begin() as conn:
        conn.execute(sa.update(jobs).values(status=DONE, done_ms=now_ms()))
    with outbox:
        assert outbox.healthy()
