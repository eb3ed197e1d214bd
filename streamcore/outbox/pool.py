"""The worker pool: threads that claim batches of jobs and run them.

A worker claims up to `batch_size` jobs of one queue (queues taken in turn), runs them one by
one, and marks the successes `done` in one statement. The batch is a `Lease`: the hung timeout
counts per job from its own start, not from the claim (see `lease`). When no queue has work it
sleeps until a wake-up (a committed `put`, see `notify`) or `poll_interval` (jobs put by
processes that cannot wake us, and jobs whose dependency got done). On SQLite a worker with no
`done` to record looks for a claimable job without the write lock before it claims, and again
holding the process's write lock before it begins the claim's transaction.

A batch queue (`batch_capacity`) is claimed `batch_capacity` jobs at a time, once its batch is
due (`batch_threshold`), and its consumer runs once for the whole batch: they succeed together
(recorded `done` together) or fail together (all in `error`, retried one by one by the retry
poller). A worker that finds a partial batch not yet due sleeps until it is, or until a wake-up
that can have made it due: one that announced enough jobs to fill it (puts of this process on
SQLite say how many they committed), or one that announced nothing (see `WorkerPool._due`).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from streamcore.outbox import sql, store
from streamcore.outbox.claim import (
    BatchDue,
    ClaimedJob,
    claim_after_done,
    claim_batch,
    claim_due_batch,
    may_claim,
    peek_batch,
)
from streamcore.outbox.consumers import QueueSpec, Registry
from streamcore.outbox.execute import ExecutionOutcome, execute, execute_batch
from streamcore.outbox.hooks import SystemHooks
from streamcore.outbox.lease import Lease, LeaseKeeper
from streamcore.outbox.watcher import ExecutionWatcher

__all__ = ["Counters", "WorkerPool"]


logger = logging.getLogger(__name__)

_UNLOCKED = contextlib.nullcontext(False)


class Counters:
    """Jobs this process ran, per (queue, outcome); thread-safe."""

    def __init__(self) -> None:
        self._counts: collections.Counter[tuple[str, str]] = collections.Counter()
        self._lock = threading.Lock()

    def add(self, queue: str, outcome: str, n: int = 1) -> None:
        with self._lock:
            self._counts[(queue, outcome)] += n

    def snapshot(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return dict(self._counts)


class Wakeup:
    """A generation counter: waiters sleep until it moves or their timeout ends, so a wake-up
    that comes between a worker's empty claim and its wait is never lost. One wake-up (one
    committed put) wakes one sleeping worker: a worker that finds work keeps claiming without
    sleeping, so a backlog still gets every awake worker, and a small put does not send the
    whole pool into empty claims (on SQLite, each one a write transaction).

    It also counts what the wake-ups announced: the jobs committed per queue by puts of this
    process (SQLite), and the wake-ups that announced nothing (PostgreSQL notifications,
    retries, `Outbox.wake`). A worker waiting for a partial batch compares them with what it
    saw when it last looked, and looks again only when they can have made the batch due."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.generation = 0
        self._announced: collections.Counter[str] = collections.Counter()
        self._unannounced = 0

    def wake(self, committed: Any = None) -> None:
        """Wake one sleeping worker; `committed`: the jobs a committed transaction put, as a
        mapping of queue to count, or anything else when the waker cannot tell."""
        with self._cond:
            self.generation += 1
            if isinstance(committed, Mapping):
                self._announced.update(committed)
            else:
                self._unannounced += 1
            self._cond.notify()

    def announced(self, queue: str) -> tuple[int, int]:
        """(jobs of `queue` announced so far, wake-ups that announced nothing so far)."""
        with self._cond:
            return self._announced[queue], self._unannounced

    def wake_all(self) -> None:
        with self._cond:
            self.generation += 1
            self._cond.notify_all()

    def wait(self, seen: int, timeout: float) -> None:
        with self._cond:
            if self.generation == seen:
                self._cond.wait(timeout)


class _HeldConnection:
    """The connection a worker runs its claims on, kept from one to the next: checking one out
    of the pool and back for each claim cost about as much as the claim's statements. A worker
    uses at most one connection at a time either way. Replaced after an error, which may have
    been the connection's (a restarted server)."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self._conn: sa.Connection | None = None

    def get(self) -> sa.Connection:
        if self._conn is None:
            self._conn = self.engine.connect()
        return self._conn

    def drop(self) -> None:
        """Give the connection back (a broken one is discarded by the pool)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


@dataclass(frozen=True, slots=True)
class _Look:
    """What a worker saw of a batch queue: when (`time.monotonic()`), what (`BatchDue`), and
    the wake-up counts (`Wakeup.announced`) read just before, so that a put committed while it
    looked counts as new."""

    at: float
    due: BatchDue
    announced: int
    unannounced: int


class WorkerPool:
    """The outbox's worker threads, which claim batches of jobs and run them (the module docstring
    has how)."""

    def __init__(
        self,
        engine: sa.Engine,
        registry: Registry,
        *,
        threads: int,
        batch_size: int,
        poll_interval: float,
        watcher: ExecutionWatcher,
        counters: Counters,
        hooks: SystemHooks | None = None,
    ) -> None:
        self.engine = engine
        self.registry = registry
        self.hooks = hooks or SystemHooks()
        self.batch_size = batch_size
        self.poll_interval = poll_interval
        self.watcher = watcher
        self.counters = counters
        self.wakeup = Wakeup()
        self.keeper = LeaseKeeper(lambda: [s.hung_timeout for s in registry.consumed()])
        self._stopping = threading.Event()
        self._threads = [
            threading.Thread(target=self._work, name=f"outbox-worker-{n}", daemon=True)
            for n in range(threads)
        ]

    def start(self) -> None:
        self.keeper.start()
        for thread in self._threads:
            thread.start()

    def stop(self, timeout: float) -> bool:
        """Stop claiming, let running jobs finish; True if every worker ended within `timeout`."""
        self._stopping.set()
        self.wakeup.wake_all()
        end = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, end - time.monotonic()))
        self.keeper.stop()
        return self.alive() == 0

    def alive(self) -> int:
        return sum(t.is_alive() for t in self._threads)

    def _work(self) -> None:
        # What this worker last saw of each batch queue with a threshold (see `_due`).
        looks: dict[str, _Look] = {}
        held = _HeldConnection(self.engine)
        try:
            self._loop(held, looks)
        finally:
            held.drop()

    def _loop(self, held: _HeldConnection, looks: dict[str, _Look]) -> None:
        turn = 0
        # Successes of the last batch, marked done in the transaction of the next claim: one
        # write transaction per batch instead of two. A crash before it re-runs them (after the
        # hung timeout), as a crash before any done would.
        unrecorded: list[ClaimedJob] = []
        while not self._stopping.is_set():
            seen = self.wakeup.generation
            specs = self.registry.consumed()
            claimed = False
            sleep = self.poll_interval
            for n in range(len(specs)):
                spec = specs[(turn + n) % len(specs)]
                if self._stopping.is_set():
                    break
                batch: list[ClaimedJob] = []
                try:
                    # Jobs to record `done` need the write transaction anyway: no look first.
                    due = self._due(spec, looks) if not unrecorded else 0.0
                    conn = held.get()
                    if due == 0 and not unrecorded and self._plain(spec):
                        # A look without the write lock: a woken worker whose jobs another one
                        # took takes no write transaction (SQLite). A put committed after the
                        # look wakes it again (`seen` is older).
                        due = 0.0 if may_claim(conn, spec.name) else None
                    if due == 0:
                        stamped = time.monotonic()
                        counts = self.wakeup.announced(spec.name)  # before the claim's look
                        if conn.dialect.name == "postgresql" and self._plain(spec):
                            recorded, batch = claim_after_done(
                                conn, spec.name, spec.batch_capacity or self.batch_size, unrecorded
                            )
                            store.check_done(unrecorded, recorded)
                            found = None
                        else:
                            found, batch = self._claim_in_transaction(conn, spec, unrecorded)
                        unrecorded = []
                        self.hooks.succeeded(f"claiming jobs of {spec.name}")
                        if found is not None:
                            due = found.seconds
                            looks[spec.name] = _Look(stamped, found, *counts)
                except Exception as exc:
                    self.hooks.failed(f"claiming jobs of {spec.name}", exc)
                    looks.pop(spec.name, None)
                    held.drop()
                    self._stopping.wait(1.0)
                    continue
                if due:  # a partial batch that may wait for more jobs: come back when it is due
                    sleep = min(sleep, due)
                if batch:
                    claimed = True
                    looks.pop(spec.name, None)  # what is left after the claim is unknown
                    lease = Lease(self.engine, spec, batch, stamped)
                    if spec.batch_capacity is None:
                        unrecorded = self._run(spec, lease)
                    else:
                        unrecorded = self._run_batch(spec, lease)
            turn += 1
            if not claimed:
                if unrecorded:  # the claim transactions failed: record them on their own
                    self._finish(unrecorded[0].queue, unrecorded)
                    unrecorded = []
                self.wakeup.wait(seen, sleep)
        if unrecorded:
            self._finish(unrecorded[0].queue, unrecorded)

    def _due(self, spec: QueueSpec, looks: dict[str, _Look]) -> float | None:
        """Seconds until the queue's next batch is due (0: go and claim it, the claim checks
        again; None: nothing to claim), without a write transaction. Always 0 for a queue
        without a batch threshold, whose claim says what there is.

        A worker woken by every committed put while a batch fills would find it not due most
        times. So it looks again only when something can have made the batch due since its
        last look: the puts of this process announced enough jobs to fill it (then it claims
        at once), its oldest job has waited the threshold (likewise), jobs came to an empty
        queue, a wake-up announced nothing (a retry, a PostgreSQL notification), or a poll
        interval passed (jobs of other processes). Looking reads the queue outside any write
        transaction (`peek_batch`): on SQLite that takes neither the write lock the putting
        threads wait for nor a BEGIN IMMEDIATE."""
        if not spec.batch_threshold or spec.batch_capacity is None:
            return 0.0
        now = time.monotonic()
        look = looks.get(spec.name)
        if look is not None:
            announced, unannounced = self.wakeup.announced(spec.name)
            if unannounced == look.unannounced and now - look.at < self.poll_interval:
                added = announced - look.announced
                if look.due.seconds is not None:
                    left = look.at + look.due.seconds - now
                    if left <= 0 or look.due.ready + added >= spec.batch_capacity:
                        return 0.0
                    return left
                if not added:
                    return look.at + self.poll_interval - now
        counts = self.wakeup.announced(spec.name)  # before the read: puts committed meanwhile count
        found = peek_batch(
            self.engine, spec.name, spec.batch_capacity, spec.batch_threshold, ordered=spec.ordered
        )
        looks[spec.name] = _Look(now, found, *counts)
        return found.seconds

    @staticmethod
    def _plain(spec: QueueSpec) -> bool:
        """Whether `spec` is neither ordered nor waiting for batches to fill: its claim takes
        the oldest claimable jobs, on PostgreSQL in one statement with the `done` before it
        (`claim_after_done`)."""
        waits = bool(spec.batch_threshold) and spec.batch_capacity is not None
        return not (spec.ordered or waits)

    def _claim_in_transaction(
        self, conn: sa.Connection, spec: QueueSpec, unrecorded: list[ClaimedJob]
    ) -> tuple[BatchDue | None, list[ClaimedJob]]:
        """Record `unrecorded` done and claim (`_claim`) in one transaction. A worker with
        nothing to record on a plain queue first looks again once it holds the process's
        SQLite write lock: its look without the lock found jobs, but the worker that waited for
        the lock before it, recording its last batch, has usually claimed them; finding none
        then takes no write transaction (BEGIN IMMEDIATE, an UPDATE of nothing, COMMIT) while
        the putting thread waits for the lock."""
        with sql.write_locked(conn) if not unrecorded and self._plain(spec) else _UNLOCKED as held:
            if held and not may_claim(conn, spec.name):
                return None, []
            with conn.begin():
                store.mark_done(conn, unrecorded)
                return self._claim(conn, spec)

    def _claim(
        self, conn: sa.Connection, spec: QueueSpec
    ) -> tuple[BatchDue | None, list[ClaimedJob]]:
        """(what the look found, the jobs claimed); a batch queue with a threshold is claimed
        only when its batch is due, and only it reports a look (None for the others)."""
        if spec.batch_threshold and spec.batch_capacity is not None:
            return claim_due_batch(
                conn, spec.name, spec.batch_capacity, spec.batch_threshold, ordered=spec.ordered
            )
        limit = spec.batch_capacity or self.batch_size
        return None, claim_batch(conn, spec.name, limit, ordered=spec.ordered)

    @staticmethod
    def _take(spec: QueueSpec, lease: Lease, job: ClaimedJob) -> bool | None:
        """`lease.take(job)`: whether this worker still holds the job; None when the database
        cannot say (the job must not run, and neither may the rest of its batch)."""
        try:
            return lease.take(job)
        except Exception:
            logger.exception(
                "outbox: cannot tell whether job %s of %s is still ours; giving the rest of its "
                "batch back",
                job.id,
                spec.name,
            )
            return None

    def _run(self, spec: QueueSpec, lease: Lease) -> list[ClaimedJob]:
        """Run a batch; returns the successes not recorded yet (a failure is recorded at once,
        with the successes before it)."""
        succeeded = 0
        self.keeper.add(lease)
        try:
            for job in lease.jobs:
                if self._stopping.is_set():
                    break
                held = self._take(spec, lease, job)
                if held is None:
                    break
                if not held:
                    if spec.ordered:  # a later job must not overtake the one handed over
                        break
                    continue
                outcome = execute(spec, job, self.watcher)
                if outcome.ok:
                    lease.finished(job)
                    succeeded += 1
                    continue
                assert outcome.error is not None
                if spec.ordered:  # nothing behind a failure runs before it is retried
                    done, rest = lease.release()
                    self._finish(spec.name, done, failed=([job], outcome.error), rest=rest)
                    return []
                self._finish(spec.name, lease.pop_finished(), failed=([job], outcome.error))
        finally:
            self.keeper.remove(lease)
            self.counters.add(spec.name, "done", succeeded)
        done, waiting = lease.release()
        if waiting:
            self._finish(spec.name, done, rest=waiting)
            return []
        return done

    def _run_batch(self, spec: QueueSpec, lease: Lease) -> list[ClaimedJob]:
        """Run a batch queue's consumer once on the claimed jobs this worker still holds (a
        leading run: a later job must not go without an earlier one). Returns them if they
        succeeded, to be recorded `done` with the next claim; a failure is recorded at once,
        every job of the batch in `error`."""
        jobs: list[ClaimedJob] = []
        outcome: ExecutionOutcome | None = None
        self.keeper.add(lease)
        try:
            for job in lease.jobs:
                if self._stopping.is_set():
                    break
                held = self._take(spec, lease, job)
                if held is None:
                    break
                if not held:
                    break
                jobs.append(job)
            outcome = execute_batch(spec, jobs, self.watcher) if jobs else None
            if outcome is not None and outcome.ok:
                for job in jobs:
                    lease.finished(job)
                self.counters.add(spec.name, "done", len(jobs))
        finally:
            self.keeper.remove(lease)
        done, waiting = lease.release()
        if outcome is not None and outcome.error is not None:
            self._finish(spec.name, done, failed=(jobs, outcome.error), rest=waiting)
            return []
        if waiting:
            self._finish(spec.name, done, rest=waiting)
            return []
        return done

    def _finish(
        self,
        queue: str,
        done: list[ClaimedJob],
        *,
        failed: tuple[list[ClaimedJob], BaseException] | None = None,
        rest: list[ClaimedJob] | None = None,
    ) -> None:
        """Record outcomes in one transaction (retried: losing them would re-run jobs)."""
        for attempt in range(10):
            try:
                with self.engine.begin() as conn:
                    store.mark_done(conn, done)
                    if failed is not None:
                        for job in failed[0]:
                            store.mark_error(conn, job, failed[1])
                    if rest:
                        store.release(conn, rest)
                self.hooks.succeeded(f"recording outcomes of {queue}")
                break
            except Exception as exc:
                self.hooks.failed(f"recording outcomes of {queue} (try {attempt + 1})", exc)
                time.sleep(min(2**attempt * 0.1, 5.0))
        if failed is not None:
            self.counters.add(queue, "error", len(failed[0]))
