"""Leases: the hung timeout of a claimed batch counts per job, on SQLite and PostgreSQL."""

from __future__ import annotations

import time

import sqlalchemy as sa

from streamcore.outbox import DONE, INIT, PROCESSING, put_many, store
from streamcore.outbox.claim import claim_batch, now_ms
from streamcore.outbox.lease import Lease, LeaseKeeper
from streamcore.outbox.schema import jobs

LONG_AGO = 60.0
HUNG = 0.5


def claimed(outbox, registry, ids: list[str]) -> Lease:
    """A lease on a batch of `ids` whose worker claimed it LONG_AGO (so it stamps at once)."""
    with outbox.engine.begin() as conn:
        put_many(conn, "q", ids, ids=ids, registry=registry)
    with outbox.engine.begin() as conn:
        batch = claim_batch(conn, "q", 10)
    return Lease(outbox.engine, registry.get("q"), batch, time.monotonic() - LONG_AGO)


def rows(engine: sa.Engine) -> dict[str, tuple[str, int | None]]:
    with engine.connect() as conn:
        found = conn.execute(sa.select(jobs.c.id, jobs.c.status, jobs.c.processing_ms))
        return {r.id: (r.status, r.processing_ms) for r in found}


def age(engine: sa.Engine, job_id: str, seconds: float) -> None:
    with engine.begin() as conn:
        conn.execute(
            sa.update(jobs)
            .where(jobs.c.id == job_id)
            .values(processing_ms=now_ms() - int(seconds * 1000))
        )


def test_a_worker_that_froze_past_the_hung_timeout_runs_no_job_handed_over(make_outbox, registry):
    registry.register("q", lambda p: p, hung_timeout=HUNG)
    outbox = make_outbox()
    lease = claimed(outbox, registry, ["a", "b", "c"])
    a, b, c = lease.jobs
    assert lease.take(a)  # stamps the batch: it was claimed long ago
    lease.finished(a)
    time.sleep(2 * HUNG)  # the process froze, no keeper ran; the hung detector takes all three
    with outbox.engine.begin() as conn:
        assert store.reset_hung(conn, "q", HUNG, 0) == (3, 0)
    assert not lease.take(b)
    assert not lease.take(c)
    assert lease.release() == ([], [])
    assert {k: v[0] for k, v in rows(outbox.engine).items()} == dict.fromkeys("abc", INIT)


def test_the_keeper_stamps_the_batch_mates_of_a_running_job_not_the_job(make_outbox, registry):
    registry.register("q", lambda p: p, hung_timeout=HUNG)
    outbox = make_outbox()
    lease = claimed(outbox, registry, ["a", "b", "c"])
    a, b, c = lease.jobs
    assert lease.take(a)
    lease.finished(a)
    assert lease.take(b)  # b runs now
    for job_id in "abc":
        age(outbox.engine, job_id, 5.0)
    time.sleep(HUNG / 5)  # the lease's own stamp ages too, as b runs
    keeper = LeaseKeeper(lambda: [HUNG])
    keeper.add(lease)
    before = now_ms()
    keeper.keep_all()
    after = rows(outbox.engine)
    assert after["a"][0] == DONE
    assert after["b"][0] == PROCESSING and after["b"][1] < before - 4000
    assert after["c"][0] == PROCESSING and after["c"][1] >= before
    with outbox.engine.begin() as conn:  # the hung detector takes only the running job
        assert store.reset_hung(conn, "q", HUNG, 0) == (1, 0)
    assert lease.take(c)
    assert keeper.interval() == HUNG / 4
