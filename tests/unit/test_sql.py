"""`streamcore.sql`: the database the outbox, the bulk command store and the redrive ledger share,
on SQLite and PostgreSQL (`outbox_url`)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import sqlalchemy as sa

from streamcore import sql
from streamcore.bulk import store as bulk_store
from streamcore.config import load_config
from streamcore.outbox import schema as outbox_schema
from streamcore.recovery import ledger


def test_other_databases_are_refused_with_the_fix() -> None:
    with pytest.raises(
        sql.DatabaseError, match=r"SQLite or PostgreSQL, not 'mysql\+pymysql'.*sqlite:///"
    ):
        sql.create_engine("mysql+pymysql://user@localhost/jobs")


def test_default_url_is_the_environment_else_the_home(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = load_config(home=tmp_path)
    assert sql.default_url(config) == f"sqlite:///{tmp_path / 'outbox.db'}"
    clean_env.setenv("STREAMCORE_OUTBOX_URL", "postgresql://u@h/db")
    assert sql.default_url(config) == "postgresql://u@h/db"


def test_every_subsystem_creates_its_tables_in_one_database(outbox_url: str) -> None:
    """The three users of the database, each creating its own tables twice (idempotent)."""
    engine = sql.create_engine(outbox_url)
    try:
        for _ in range(2):
            outbox_schema.create_schema(engine)
            bulk_store.CommandStore(engine)._ready()
            ledger.RedriveLedger(engine)._ready()
            bulk_store.CommandStore(engine)._ready()
        with engine.connect() as conn:
            tables = set(sa.inspect(conn).get_table_names())
        assert {
            outbox_schema.TABLE,
            bulk_store.COMMANDS,
            bulk_store.BUCKETS,
            bulk_store.CLAIMS,
            ledger.REDRIVES,
        } <= tables
        assert sql.is_sqlite(engine) == outbox_url.startswith("sqlite")
    finally:
        engine.dispose()


def test_a_transaction_left_open_in_the_thread_is_a_busy_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite: the threads of a process queue on one lock per file; a second transaction in the
    thread holding the first waits LOCK_TIMEOUT, then says why."""
    monkeypatch.setattr(sql, "LOCK_TIMEOUT", 0.2)
    engine = sql.create_engine(f"sqlite:///{tmp_path / 'busy.db'}")
    try:
        with (
            engine.begin(),
            pytest.raises(sql.DatabaseBusyError, match="left open in the same thread"),
            engine.begin(),
        ):
            pass
        with engine.begin() as conn:  # the lock was released with the first transaction
            assert conn.execute(sa.text("SELECT 1")).scalar() == 1
    finally:
        engine.dispose()


def _waiting(lock: sql.FifoLock, count: int) -> None:
    """Until `count` threads wait for `lock` (a condition, not a delay)."""
    while len(lock._waiters) < count:
        threading.Event().wait(0.001)


def test_the_write_lock_goes_to_its_waiters_in_the_order_they_asked() -> None:
    lock = sql.FifoLock()
    assert lock.acquire()
    got: list[int] = []

    def take(n: int) -> None:
        assert lock.acquire(timeout=30)
        got.append(n)
        lock.release()

    threads = []
    for n in range(4):
        threads.append(threading.Thread(target=take, args=(n,)))
        threads[-1].start()
        _waiting(lock, n + 1)
    lock.release()
    # Handed over: the releasing thread, asking again at once, comes after the waiters.
    assert not lock.acquire(blocking=False)
    for thread in threads:
        thread.join(30)
    assert got == [0, 1, 2, 3]
    assert not lock.locked()


def test_a_write_lock_wait_that_runs_out_leaves_the_queue() -> None:
    lock = sql.FifoLock()
    assert lock.acquire()
    assert not lock.acquire(timeout=0.01)
    assert not lock._waiters
    lock.release()
    assert lock.acquire(blocking=False) and lock.locked()
    lock.release()
    with pytest.raises(sql.LockNotHeldError, match="unheld"):
        lock.release()
