"""8 workers x 10,000 jobs: every job runs exactly once and ends done (PostgreSQL's SKIP LOCKED
claims and SQLite's compare-and-swap claims under contention)."""

from __future__ import annotations

import collections
import threading
import time

import sqlalchemy as sa

from streamcore.outbox import DONE, put_many
from streamcore.outbox.schema import jobs

JOBS = 10_000
WORKERS = 8


def test_eight_workers_run_ten_thousand_jobs_exactly_once(make_outbox, registry):
    runs: collections.Counter[int] = collections.Counter()
    threads: set[str] = set()
    lock = threading.Lock()

    def consumer(n: int) -> None:
        with lock:
            runs[n] += 1
            threads.add(threading.current_thread().name)

    registry.register("load", consumer)
    outbox = make_outbox(workers=WORKERS, batch_size=10)
    with outbox:
        for start in range(0, JOBS, 1000):  # puts race with the claims
            with outbox.engine.begin() as conn:
                put_many(conn, "load", list(range(start, start + 1000)), registry=registry)
        deadline = time.monotonic() + 300
        while sum(runs.values()) < JOBS and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)  # a duplicate run would show up now
    assert sum(runs.values()) == JOBS
    assert set(runs) == set(range(JOBS))
    assert set(runs.values()) == {1}
    assert len(threads) > 1
    with outbox.engine.connect() as conn:
        states = conn.execute(
            sa.select(jobs.c.status, jobs.c.tries, sa.func.count()).group_by(
                jobs.c.status, jobs.c.tries
            )
        ).all()
    assert [tuple(s) for s in states] == [(DONE, 1, JOBS)]
