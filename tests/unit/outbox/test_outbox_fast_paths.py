"""The outbox's hot paths: statements run on the SQLite driver connection where nothing can
tell, wake-ups that come after the commit and say how many jobs it put, looks at a batch queue
that take no write lock, and workers that look again only when a wake-up can have made a batch
due."""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from typing import Any

import pytest
import sqlalchemy as sa

from streamcore.outbox import Outbox, create_engine, put, put_many
from streamcore.outbox import pool as pool_module
from streamcore.outbox import sql as sql_module
from streamcore.outbox.claim import peek_batch
from streamcore.outbox.notify import database_key, local_hub
from streamcore.outbox.schema import TABLE, jobs

on_sqlite = pytest.mark.parametrize("outbox_url", ["sqlite"], indirect=True)


def job_ids(engine: sa.Engine) -> list[str]:
    with engine.connect() as conn:
        return list(conn.execute(sa.select(jobs.c.id).order_by(jobs.c.seq)).scalars())


def test_put_on_a_connection_that_began_nothing_is_still_in_a_transaction(
    make_outbox, registry
) -> None:
    # SQLAlchemy begins the transaction (the outbox's BEGIN IMMEDIATE) at the first statement;
    # a statement run on the driver before that would commit on its own.
    registry.define_queue("q")
    outbox = make_outbox()
    with outbox.engine.connect() as conn:
        put(conn, "q", {"n": 1}, id="first", registry=registry)  # also checks the schema
        conn.rollback()
        put(conn, "q", {"n": 2}, id="rolled-back", registry=registry)
        conn.rollback()
        put(conn, "q", {"n": 3}, id="kept", registry=registry)
        put(conn, "q", {"n": 4}, id="kept-too", registry=registry)
        conn.commit()
    assert job_ids(outbox.engine) == ["kept", "kept-too"]


def test_statement_listeners_see_put_and_unobserved_sqlite_puts_skip_sqlalchemy(
    make_outbox, registry, monkeypatch
) -> None:
    registry.define_queue("q")
    outbox = make_outbox()
    on_driver: list[str] = []
    real = sql_module._on_driver
    monkeypatch.setattr(
        sql_module, "_on_driver", lambda *args: on_driver.append(args[2]) or real(*args)
    )
    with outbox.engine.begin() as conn:
        put(conn, "q", {"n": 1}, registry=registry)
    sqlite = outbox.engine.dialect.name == "sqlite"
    assert len(on_driver) == (1 if sqlite else 0)

    seen: list[str] = []

    def watch(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        seen.append(statement)

    sa.event.listen(outbox.engine, "before_cursor_execute", watch)  # now all go through SQLAlchemy
    with outbox.engine.begin() as conn:
        put_many(conn, "q", [{"n": 2}, {"n": 3}], registry=registry)
    assert len(on_driver) == (1 if sqlite else 0)
    assert any(f"INSERT INTO {TABLE}" in statement for statement in seen)
    assert len(job_ids(outbox.engine)) == 3


@on_sqlite
def test_an_engine_that_logs_statements_logs_put(outbox_url, registry, caplog) -> None:
    registry.define_queue("q")
    engine = create_engine(outbox_url, echo=True)
    outbox = Outbox(engine=engine, registry=registry)
    outbox.create_schema()
    with caplog.at_level(logging.INFO, logger="sqlalchemy.engine"), engine.begin() as conn:
        put(conn, "q", {"n": 1}, registry=registry)
    assert any(f"INSERT INTO {TABLE}" in r.getMessage() for r in caplog.records)
    outbox.close()
    engine.dispose()


@on_sqlite
def test_driver_errors_are_raised_as_sqlalchemy_raises_them(make_outbox, registry) -> None:
    registry.define_queue("q")
    outbox = make_outbox()
    with outbox.engine.begin() as conn:
        put(conn, "q", {"n": 1}, registry=registry)  # the schema is checked once per engine
    with outbox.engine.begin() as conn:
        conn.exec_driver_sql(f"DROP TABLE {TABLE}")
        with pytest.raises(sa.exc.OperationalError, match="no such table") as caught:
            put(conn, "q", {"n": 2}, registry=registry)
        assert isinstance(caught.value.orig, sqlite3.OperationalError)
        conn.rollback()


@on_sqlite
def test_wakeups_come_after_the_commit_and_count_the_jobs(make_outbox, registry) -> None:
    registry.define_queue("a")
    registry.define_queue("b")
    outbox = make_outbox()
    path = outbox.engine.url.database
    heard: list[tuple[dict[str, int], int, bool]] = []

    def on_wakeup(committed: Any) -> None:
        # A reader on another connection already sees the jobs, and the write lock is free.
        with sqlite3.connect(path) as reader:
            [(count,)] = reader.execute(f"SELECT count(*) FROM {TABLE}").fetchall()
        lock = outbox.engine.raw_connection().driver_connection.write_lock
        free = lock.acquire(blocking=False)
        if free:
            lock.release()
        heard.append((dict(committed), count, free))

    key = database_key(outbox.engine)
    local_hub.subscribe(key, on_wakeup)
    try:
        with outbox.engine.begin() as conn:
            put_many(conn, "a", [1, 2, 3], registry=registry)
            put(conn, "a", 4, registry=registry)
            put(conn, "b", 5, registry=registry)
        with outbox.engine.begin() as conn:
            put(conn, "a", 6, registry=registry)
            conn.rollback()  # no commit, no wake-up
        with outbox.engine.begin() as conn:
            put(conn, "b", 7, registry=registry)
    finally:
        local_hub.unsubscribe(key, on_wakeup)
    assert heard == [({"a": 4, "b": 1}, 5, True), ({"b": 1}, 6, True)]


@on_sqlite
def test_a_failing_wakeup_does_not_fail_the_committed_transaction(
    make_outbox, registry, caplog
) -> None:
    registry.define_queue("q")
    outbox = make_outbox()

    def broken(_committed: Any) -> None:
        raise RuntimeError("subscriber broke")

    key = database_key(outbox.engine)
    local_hub.subscribe(key, broken)
    try:
        with outbox.engine.begin() as conn:
            put(conn, "q", 1, id="committed", registry=registry)
    finally:
        local_hub.unsubscribe(key, broken)
    assert job_ids(outbox.engine) == ["committed"]
    assert "waking the workers after a commit failed" in caplog.text


@on_sqlite
def test_a_look_at_a_batch_queue_does_not_wait_for_a_writer(make_outbox, registry) -> None:
    registry.register("q", print, batch_capacity=5, batch_threshold=10.0, ordered=True)
    outbox = make_outbox()
    with outbox.engine.begin() as conn:
        put_many(conn, "q", [1, 2], registry=registry)
    looked: list[Any] = []

    def look() -> None:
        looked.append(peek_batch(outbox.engine, "q", 5, 10.0, ordered=True))

    with outbox.engine.begin() as conn:  # holds the write lock until the end of the block
        put_many(conn, "q", [3, 4, 5], registry=registry)
        reader = threading.Thread(target=look)
        reader.start()
        reader.join(5)
        assert not reader.is_alive(), "the look waited for the writer"
    [found] = looked
    assert found.ready == 2  # what is committed: 2 jobs, due within the threshold
    assert 9.0 < found.seconds <= 10.0


class Looks:
    """Counts the workers' looks at a batch queue outside a claim (`peek_batch`)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        real = pool_module.peek_batch

        def counted(*args: Any, **kwargs: Any) -> Any:
            found = real(*args, **kwargs)
            self.count += 1  # once the look is done
            return found

        monkeypatch.setattr(pool_module, "peek_batch", counted)


def wait_for(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


@on_sqlite
def test_a_worker_looks_again_only_when_a_wakeup_can_have_made_the_batch_due(
    make_outbox, registry, monkeypatch
) -> None:
    batches: list[list[int]] = []
    registry.register(
        "q", batches.append, batch_capacity=10, batch_threshold=30.0, ordered=True
    )  # the threshold never passes in this test: only a full batch goes
    looks = Looks(monkeypatch)
    outbox = make_outbox(workers=1, poll_interval=30.0)
    with outbox:
        wait_for(lambda: looks.count == 1, 5, "the first look")  # an empty queue
        for n in range(9):  # nine commits of one job each: the batch is not full
            with outbox.engine.begin() as conn:
                put(conn, "q", n, registry=registry)
            time.sleep(0.02)
        time.sleep(0.3)
        assert batches == []
        assert looks.count == 2  # jobs came to an empty queue: one look; then only counting
        with outbox.engine.begin() as conn:
            put(conn, "q", 9, registry=registry)  # the tenth: full, claimed without a look
        wait_for(lambda: batches, 5, "the full batch")
        assert batches == [list(range(10))]
        assert looks.count == 2
        outbox.wake()  # a wake-up that announces nothing: the worker looks
        wait_for(lambda: looks.count > 2, 5, "a look after an unannounced wake-up")


@on_sqlite
def test_jobs_no_wakeup_announced_are_found_at_the_poll(make_outbox, registry) -> None:
    batches: list[list[int]] = []
    registry.register("q", batches.append, batch_capacity=3, batch_threshold=0.1, ordered=True)
    outbox = make_outbox(workers=1, poll_interval=0.5)
    with outbox:
        time.sleep(0.2)  # the worker has looked at the empty queue and sleeps
        with sqlite3.connect(outbox.engine.url.database) as other_process:
            now = time.time_ns() // 1_000_000
            other_process.executemany(
                f"INSERT INTO {TABLE} (queue, id, status, payload, tries, created_ms, "
                "updated_ms) VALUES ('q', ?, 'init', ?, 0, ?, ?)",
                [(f"j{n}", json.dumps(n).encode(), now, now) for n in range(3)],
            )
        wait_for(lambda: batches, 5, "the batch put by another process")
    assert batches == [[0, 1, 2]]


def test_a_worker_whose_connection_broke_takes_another(make_outbox, registry, monkeypatch) -> None:
    done: list[int] = []
    registry.register("q", done.append)
    held: list[sa.Connection] = []
    real_get = pool_module._HeldConnection.get

    def get(self: Any) -> sa.Connection:
        conn = real_get(self)
        if not held or held[-1] is not conn:
            held.append(conn)
        return conn

    monkeypatch.setattr(pool_module._HeldConnection, "get", get)
    outbox = make_outbox(workers=1)
    with outbox:
        with outbox.engine.begin() as conn:
            put(conn, "q", 1, registry=registry)
        wait_for(lambda: done == [1], 10, "the first job")
        [worker_conn] = held  # kept from one claim to the next
        driver = worker_conn.connection.dbapi_connection
        if outbox.engine.dialect.name == "postgresql":  # the server ends its session
            with outbox.engine.connect() as other:
                other.execute(
                    sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": driver.info.backend_pid}
                )
        else:
            driver.close()
        with outbox.engine.begin() as conn:
            put(conn, "q", 2, registry=registry)
        wait_for(lambda: done == [1, 2], 15, "the job after the connection broke")
    assert len(held) == 2 and held[1] is not held[0]


@pytest.mark.parametrize("outbox_url", ["postgres"], indirect=True)
@pytest.mark.parametrize("observed", [False, True], ids=["driver", "listener"])
def test_a_postgres_claim_records_the_last_batch_done_in_one_statement(
    make_outbox, registry, observed
) -> None:
    # What the transaction of mark_done then claim_batch did: the jobs still holding their
    # token are recorded done (a taken-over one is not), and a job waiting for one of them is
    # claimable in the same claim. Without a statement listener it runs in autocommit on the
    # driver connection, which is left as SQLAlchemy expects it.
    from streamcore.outbox.claim import claim_after_done, claim_batch

    registry.define_queue("q")
    outbox = make_outbox()
    statements: list[str] = []
    if observed:
        sa.event.listen(outbox.engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
    with outbox.engine.begin() as conn:
        put(conn, "q", 1, id="first", registry=registry)
        put(conn, "q", 2, id="taken-over", registry=registry)
        put(conn, "q", 3, id="after-first", depends_on=("q", "first"), registry=registry)
    with outbox.engine.begin() as conn:
        running = claim_batch(conn, "q", 10)
    assert [job.id for job in running] == ["first", "taken-over"]
    with outbox.engine.begin() as conn:  # the hung detector hands "taken-over" to another run
        conn.execute(
            sa.update(jobs).where(jobs.c.id == "taken-over").values(status="init", lock_token=None)
        )
    with outbox.engine.connect() as conn:
        recorded, claimed = claim_after_done(conn, "q", 10, running)
        assert not conn.in_transaction()
        assert conn.connection.dbapi_connection.autocommit is False
        again, none = claim_after_done(conn, "q", 10, claimed)
    assert recorded == 1
    assert sorted(job.id for job in claimed) == ["after-first", "taken-over"]
    assert (again, none) == (2, [])
    with outbox.engine.connect() as conn:
        status = dict(conn.execute(sa.select(jobs.c.id, jobs.c.status)).all())
    assert status == {"first": "done", "taken-over": "done", "after-first": "done"}
    assert any("WITH done AS" in s for s in statements) is observed


def test_a_look_for_claimable_jobs_takes_no_write_lock_on_sqlite(make_outbox, registry) -> None:
    # A woken worker whose jobs another one took looks first and takes no write transaction;
    # PostgreSQL's claim finds that out in one round trip, so it always claims there.
    from streamcore.outbox.claim import claim_batch, may_claim

    registry.define_queue("q")
    outbox = make_outbox()
    sqlite = outbox.engine.dialect.name == "sqlite"
    with outbox.engine.connect() as conn:
        assert may_claim(conn, "q") is not sqlite
        with outbox.engine.begin() as other:
            put(other, "q", 1, id="first", registry=registry)
            put(other, "q", 2, id="second", depends_on=("q", "first"), registry=registry)
        assert may_claim(conn, "q") is True
        with conn.begin():
            [first] = claim_batch(conn, "q", 10)
            assert may_claim(conn, "q") is True  # in a transaction: it cannot look unseen
        assert first.id == "first"
        if sqlite:  # "second" waits for "first"; a writer holding the lock does not block the look
            writer = outbox.engine.connect()
            writer.begin()
            put(writer, "q", 3, id="held", depends_on=("q", "first"), registry=registry)
            assert may_claim(conn, "q") is False
            writer.rollback()
            writer.close()
    observed: list[str] = []
    sa.event.listen(outbox.engine, "before_cursor_execute", lambda *a: observed.append(a[2]))
    with outbox.engine.connect() as conn:
        assert may_claim(conn, "q") is True  # observed: the claim itself says


def test_a_look_under_the_write_lock_holds_it_until_the_transaction_it_begins_ends(
    make_outbox, registry
) -> None:
    # A woken worker with nothing to record looks again holding the process's SQLite write lock,
    # and takes no write transaction when the jobs are gone; its claim uses the lock it holds.
    registry.define_queue("q")
    outbox = make_outbox()
    sqlite = outbox.engine.dialect.name == "sqlite"
    with outbox.engine.connect() as conn:
        lock = conn.connection.dbapi_connection.write_lock if sqlite else None
        with sql_module.write_locked(conn) as held:
            assert held is sqlite
            assert lock is None or lock.locked()
        assert lock is None or not lock.locked()  # nothing began: given back
        with sql_module.write_locked(conn):
            with conn.begin():
                put(conn, "q", 1, id="in-the-lock", registry=registry)
            assert lock is None or not lock.locked()  # the commit gave it back
        with conn.begin(), sql_module.write_locked(conn) as inside:
            assert inside is False  # in a transaction: nothing more to hold
    assert job_ids(outbox.engine) == ["in-the-lock"]
    sa.event.listen(outbox.engine, "before_cursor_execute", lambda *a: None)
    with outbox.engine.connect() as conn, sql_module.write_locked(conn) as held:
        assert held is False  # observed: nothing held
