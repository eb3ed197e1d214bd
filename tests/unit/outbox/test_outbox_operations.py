"""The test harness, operations (retry, stats, purge, metrics) and the schema, on both databases."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from streamcore.outbox import (
    DONE,
    ERROR,
    INIT,
    ConsumerFailedError,
    NoJobError,
    VirtualQueue,
    create_schema,
    put,
    put_many,
)
from streamcore.outbox.claim import now_ms
from streamcore.outbox.schema import TABLE, jobs
from streamcore.outbox.stats import percentile


class Flaky:
    """Fails while `broken` is True, else returns a result built from the payload."""

    def __init__(self) -> None:
        self.broken = True

    def __call__(self, payload: dict) -> str:
        if self.broken:
            raise KeyError(f"no mailbox for {payload['to']}")
        return f"sent to {payload['to']}"


def test_virtual_queue_runs_jobs_in_the_callers_thread(make_outbox, registry):
    flaky = Flaky()
    registry.register("mail", flaky)
    outbox = make_outbox()
    queue = VirtualQueue(outbox)
    with pytest.raises(NoJobError, match="no job ready"):
        queue.consume_one("mail")
    with outbox.engine.begin() as conn:
        put(conn, "mail", {"to": "ada"}, id="m1", registry=registry)
    with pytest.raises(ConsumerFailedError, match="job m1 of queue mail failed: KeyError") as info:
        queue.consume_one("mail")
    assert isinstance(info.value.__cause__, KeyError)
    assert not isinstance(info.value, AssertionError)
    assert outbox.get_errors("mail")[0].tries == 1
    flaky.broken = False
    assert queue.force_retry("mail") == "sent to ada"
    with pytest.raises(NoJobError, match="no job in error"):
        queue.force_retry("mail")
    with outbox.engine.begin() as conn:
        put_many(conn, "mail", [{"to": "b"}, {"to": "c"}], registry=registry)
    assert queue.consume_all("mail") == ["sent to b", "sent to c"]


def test_virtual_queue_honours_dependencies(make_outbox, registry):
    registry.register("a", lambda p: p)
    registry.register("b", lambda p: p)
    outbox = make_outbox()
    queue = VirtualQueue(outbox)
    with outbox.engine.begin() as conn:
        put(conn, "a", "first", id="a1", registry=registry)
        put(conn, "b", "second", depends_on=("a", "a1"), registry=registry)
    with pytest.raises(NoJobError):
        queue.consume_one("b")
    assert queue.consume_one("a") == "first"
    assert queue.consume_one("b") == "second"


def test_retry_one_error_raises_the_consumers_exception(make_outbox, registry):
    flaky = Flaky()
    registry.register("mail", flaky, error_backoff=3600)
    outbox = make_outbox()
    with pytest.raises(NoJobError):
        outbox.retry_one_error("mail")
    with outbox.engine.begin() as conn:
        put(conn, "mail", {"to": "ada"}, id="m1", registry=registry)
    with pytest.raises(ConsumerFailedError):
        VirtualQueue(outbox).consume_one("mail")
    with pytest.raises(KeyError, match="no mailbox for ada"):
        outbox.retry_one_error("mail")
    assert outbox.get_errors("mail")[0].tries == 2
    flaky.broken = False
    assert outbox.retry_one_error("mail") == "sent to ada"
    assert outbox.queue_stats() == [
        {"queue": "mail", "init": 0, "processing": 0, "done": 1, "error": 0, "total": 1}
    ]


def test_retry_one_error_of_an_ordered_queue_runs_its_head_only(make_outbox, registry):
    ran: list[int] = []
    registry.register("q", ran.append, ordered=True)
    outbox = make_outbox()
    with outbox.engine.begin() as conn:
        put_many(conn, "q", [1, 2, 3], ids=["a", "b", "c"], registry=registry)
        # "a" failed last: by error time "b" and "c" are older, by put order "a" comes first.
        conn.execute(sa.update(jobs).values(status=ERROR, error_ms=now_ms() - 1000, tries=1))
        conn.execute(sa.update(jobs).where(jobs.c.id == "a").values(error_ms=now_ms()))
    assert outbox.force_retry("q", id="a") == 1
    with pytest.raises(NoJobError, match=r"ordered and its oldest unfinished job 'a' is init"):
        outbox.retry_one_error("q")
    assert VirtualQueue(outbox).consume_one("q") is None
    outbox.retry_one_error("q")
    VirtualQueue(outbox).force_retry("q")
    assert ran == [1, 2, 3]


def test_force_retry_one_or_all_errors(make_outbox, registry):
    registry.register("q", lambda p: p)
    outbox = make_outbox()
    with outbox.engine.begin() as conn:
        put_many(conn, "q", [1, 2, 3], ids=["a", "b", "c"], registry=registry)
        conn.execute(sa.update(jobs).values(status=ERROR, error_ms=now_ms(), tries=1))
    assert outbox.force_retry("q", id="b") == 1
    assert outbox.force_retry("q", id="nope") == 0
    with outbox.engine.connect() as conn:
        got = dict(conn.execute(sa.select(jobs.c.id, jobs.c.status)).all())
    assert got == {"a": ERROR, "b": INIT, "c": ERROR}
    assert outbox.force_retry("q") == 2


def test_processing_time_stats(make_outbox, registry):
    registry.register("q", lambda p: p)
    outbox = make_outbox()
    now = now_ms()
    with outbox.engine.begin() as conn:
        put_many(conn, "q", list(range(100)), ids=[str(n) for n in range(100)], registry=registry)
        for n in range(100):
            conn.execute(
                sa.update(jobs)
                .where(jobs.c.id == str(n))
                .values(status=DONE, processing_ms=now - 1000 - (n + 1), done_ms=now - 1000)
            )
        put(conn, "q", "old", id="old", registry=registry)
        conn.execute(
            sa.update(jobs)
            .where(jobs.c.id == "old")
            .values(status=DONE, processing_ms=0, done_ms=now - 3 * 86_400_000)
        )
    [got] = outbox.processing_time_stats(age_days=1, queue="q")
    assert got == {
        "queue": "q",
        "count": 100,
        "avg_ms": 50.5,
        "min_ms": 1.0,
        "max_ms": 100.0,
        "p50_ms": 50.0,
        "p90_ms": 90.0,
        "p95_ms": 95.0,
        "p99_ms": 99.0,
    }
    assert outbox.processing_time_stats(age_days=1, queue="other") == []
    assert outbox.processing_time_stats(age_days=5)[0]["count"] == 101
    assert percentile([5.0], 99) == 5.0


def test_purge_removes_old_done_jobs_only(make_outbox, registry):
    registry.register("q", lambda p: p)
    outbox = make_outbox()
    with outbox.engine.begin() as conn:
        put_many(conn, "q", [1, 2, 3, 4], ids=["old", "new", "err", "init"], registry=registry)
        conn.execute(
            sa.update(jobs)
            .where(jobs.c.id == "old")
            .values(status=DONE, done_ms=now_ms() - 7200_000)
        )
        conn.execute(
            sa.update(jobs).where(jobs.c.id == "new").values(status=DONE, done_ms=now_ms())
        )
        conn.execute(sa.update(jobs).where(jobs.c.id == "err").values(status=ERROR, error_ms=0))
        put(conn, "q", 5, id="child", depends_on=("q", "old"), registry=registry)
    assert outbox.purge(done_older_than=3600) == 1
    with outbox.engine.connect() as conn:
        assert sorted(conn.execute(sa.select(jobs.c.id)).scalars()) == [
            "child",
            "err",
            "init",
            "new",
        ]
    # a dependency that was purged no longer blocks its dependant
    assert VirtualQueue(outbox).consume_all("q") == [4, 5]
    assert outbox.purge(done_older_than=0) == 3
    with pytest.raises(ValueError, match="seconds >= 0"):
        outbox.purge(done_older_than=-1)


def test_metrics_text_is_prometheus_format(make_outbox, registry):
    registry.register("q", lambda p: p)
    outbox = make_outbox()
    with outbox.engine.begin() as conn:
        put_many(conn, "q", [1, 2], registry=registry)
    VirtualQueue(outbox).consume_one("q")
    text = outbox.metrics_text()
    assert 'streamcore_outbox_jobs{queue="q",status="init"} 1' in text
    assert 'streamcore_outbox_jobs{queue="q",status="done"} 1' in text
    assert "# TYPE streamcore_outbox_runs_total counter" in text
    assert "streamcore_outbox_healthy 0" in text  # not started


def test_schema_is_idempotent_and_migrates_missing_columns(make_outbox, registry):
    registry.register("q", lambda p: p)
    outbox = make_outbox()
    create_schema(outbox.engine)
    with outbox.engine.begin() as conn:
        conn.execute(sa.text(f"ALTER TABLE {TABLE} DROP COLUMN error_traceback"))
    create_schema(outbox.engine)
    with outbox.engine.connect() as conn:
        columns = {c["name"] for c in sa.inspect(conn).get_columns(TABLE)}
        indexes = {i["name"] for i in sa.inspect(conn).get_indexes(TABLE)}
    assert "error_traceback" in columns
    assert {f"{TABLE}_claim", f"{TABLE}_done", f"{TABLE}_depends"} <= indexes
