"""`Outbox`: the queue's runtime in one process (workers, retry poller, watcher, wake-ups) and its
operations (errors, retries, statistics, health, purge).

    outbox = Outbox()                       # SQLite at STREAMCORE_HOME/outbox.db
    register("mail", send_mail)             # consumers before start()
    with outbox:                            # start() ... stop()
        with outbox.engine.begin() as conn:
            conn.execute(...business write...)
            put(conn, "mail", {"to": "a@b.c"})
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from streamcore.outbox import stats as stats_module
from streamcore.outbox import store
from streamcore.outbox.claim import ClaimedJob, claim_error
from streamcore.outbox.consumers import QueueSpec, Registry, default_registry
from streamcore.outbox.errors import NoJobError, OutboxError
from streamcore.outbox.execute import execute
from streamcore.outbox.health import (
    DEFAULT_ALLOWED_ERROR_TIME,
    DEFAULT_STARTUP_GRACE,
    Health,
    assess,
)
from streamcore.outbox.hooks import SystemErrorHook, SystemHooks, SystemRecoveryHook
from streamcore.outbox.notify import PgListener, database_key, local_hub, psycopg_dsn
from streamcore.outbox.pool import Counters, WorkerPool
from streamcore.outbox.purge import purge as purge_jobs
from streamcore.outbox.put import JobRef, put, put_many
from streamcore.outbox.retry import RetryPoller
from streamcore.outbox.schema import ERROR, create_schema
from streamcore.outbox.store import FailedJob
from streamcore.outbox.watcher import ExecutionWatcher
from streamcore.sql import create_engine, is_sqlite

__all__ = ["Outbox"]


logger = logging.getLogger(__name__)

DEFAULT_POLL_INTERVAL = 10.0


class Outbox:
    """The outbox of one database.

    :param url: SQLAlchemy URL. Default - `$STREAMCORE_OUTBOX_URL`, else SQLite at
        `STREAMCORE_HOME/outbox.db`.
    :param engine: an engine to use instead of `url` (make SQLite ones with
        `streamcore.outbox.create_engine`, which sets WAL and BEGIN IMMEDIATE).
    :param registry: where consumers are registered. Default - the process-wide registry.
    :param workers: worker threads. Default - 4.
    :param batch_size: jobs a worker claims at once. Default - 10.
    :param poll_interval: seconds between polls for jobs no wake-up announced, and between
        retry-poller rounds. Default - 10.
    :param healthy_allowed_error_time: seconds a job may stay in error before `healthy()` says
        no. Default - 900.
    :param startup_grace: seconds after `start()` during which `healthy()` says yes.
        Default - 600.
    :param on_system_error: `(where, error)`, called on each failure of the outbox itself (its
        database out of reach), `on_system_recovery`: `(where, seconds_down)`, once when it
        works again (`streamcore.outbox.hooks`). Default - log them.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        engine: sa.Engine | None = None,
        registry: Registry | None = None,
        workers: int = 4,
        batch_size: int = 10,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        healthy_allowed_error_time: float = DEFAULT_ALLOWED_ERROR_TIME,
        startup_grace: float = DEFAULT_STARTUP_GRACE,
        watcher_interval: float = 1.0,
        on_system_error: SystemErrorHook | None = None,
        on_system_recovery: SystemRecoveryHook | None = None,
    ) -> None:
        if workers < 1 or batch_size < 1 or poll_interval <= 0:
            raise OutboxError(
                f"workers={workers}, batch_size={batch_size}, poll_interval={poll_interval}: "
                "use at least 1 worker, a batch of 1+ and a poll interval > 0"
            )
        self.engine = engine if engine is not None else create_engine(url)
        self._owns_engine = engine is None
        self.registry = registry or default_registry
        self.workers = workers
        self.batch_size = batch_size
        self.poll_interval = poll_interval
        self.healthy_allowed_error_time = healthy_allowed_error_time
        self.startup_grace = startup_grace
        self.watcher_interval = watcher_interval
        self.counters = Counters()
        self.hooks = SystemHooks(on_system_error, on_system_recovery)
        self.watcher = ExecutionWatcher(watcher_interval)
        self._pool: WorkerPool | None = None
        self._poller: RetryPoller | None = None
        self._listener: PgListener | None = None
        self._started_at: float | None = None
        self._schema_ready = False

    def __repr__(self) -> str:
        return f"Outbox({self.engine.url.render_as_string()!r})"

    # -- lifecycle -------------------------------------------------------------------------
    def create_schema(self) -> None:
        if not self._schema_ready:
            create_schema(self.engine)
            self._schema_ready = True

    def start(self) -> Outbox:
        """Create the schema if needed and start the workers, the retry poller and the watcher."""
        if self._pool is not None:
            raise OutboxError(f"{self!r} is started already")
        self.create_schema()
        self.watcher = ExecutionWatcher(self.watcher_interval)
        pool = WorkerPool(
            self.engine,
            self.registry,
            threads=self.workers,
            batch_size=self.batch_size,
            poll_interval=self.poll_interval,
            watcher=self.watcher,
            counters=self.counters,
            hooks=self.hooks,
        )
        self._poller = RetryPoller(
            self.engine,
            self.registry,
            poll_interval=self.poll_interval,
            watcher=self.watcher,
            counters=self.counters,
            on_retried=pool.wakeup.wake,
            hooks=self.hooks,
        )
        if is_sqlite(self.engine):
            local_hub.subscribe(database_key(self.engine), pool.wakeup.wake)
        else:
            self._listener = PgListener(psycopg_dsn(self.engine), pool.wakeup.wake)
            self._listener.start()
            if not self._listener.ready.wait(30):
                logger.warning("outbox: LISTEN not ready after 30 s; workers poll meanwhile")
        self._pool = pool
        self.watcher.start()
        pool.start()
        self._poller.start()
        self._started_at = time.monotonic()
        logger.info(
            "outbox: started %d workers on %s for %s",
            self.workers,
            self.engine.url.render_as_string(),
            ", ".join(s.name for s in self.registry.consumed()) or "no queue",
        )
        return self

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop taking jobs and wait up to `timeout` s for running ones; claimed jobs that did
        not start go back to `init`. True if everything stopped in time."""
        pool, poller, listener = self._pool, self._poller, self._listener
        if pool is None or poller is None:
            return True
        end = time.monotonic() + timeout
        poller.stop()
        clean = pool.stop(timeout)
        poller.join(max(0.0, end - time.monotonic()))
        clean = clean and not poller.is_alive()
        if listener is not None:
            listener.stop()
            listener.join(5)
        else:
            local_hub.unsubscribe(database_key(self.engine), pool.wakeup.wake)
        self.watcher.stop()
        self._pool = self._poller = self._listener = None
        self._started_at = None
        if not clean:
            logger.warning(
                "outbox: jobs still running after %g s; they finish in background", timeout
            )
        return clean

    def close(self) -> None:
        self.stop()
        if self._owns_engine:
            self.engine.dispose()

    def __enter__(self) -> Outbox:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def wake(self) -> None:
        """Wake the workers now (e.g. after jobs were put by a process that cannot notify)."""
        if self._pool is not None:
            self._pool.wakeup.wake()

    # -- put ------------------------------------------------------------------------------
    def put(
        self,
        conn_or_session: Any,
        queue: str,
        payload: Any,
        *,
        id: str | None = None,
        depends_on: JobRef | None = None,
    ) -> str:
        """`streamcore.outbox.put` with this outbox's registry."""
        return put(
            conn_or_session, queue, payload, id=id, depends_on=depends_on, registry=self.registry
        )

    def put_many(
        self, conn_or_session: Any, queue: str, payloads: list[Any], **kw: Any
    ) -> list[str]:
        return put_many(conn_or_session, queue, payloads, registry=self.registry, **kw)

    # -- operations -----------------------------------------------------------------------
    def get_errors(self, queue: str, limit: int = 100) -> list[FailedJob]:
        """Jobs of `queue` in error, oldest error first, with their last error and payload."""
        spec = self.registry.find(queue)
        with self.engine.connect() as conn:
            rows = store.errors(conn, queue, limit)
        out = []
        for row in rows:
            payload: Any = bytes(row.payload)
            if spec is not None:
                try:
                    payload = spec.codec.decode(payload)
                except Exception:  # shown raw: an undecodable payload is itself the error
                    logger.debug("cannot decode payload of %s/%s", queue, row.id)
            out.append(
                FailedJob(
                    row.queue,
                    row.id,
                    row.tries,
                    row.error_ms,
                    row.error_type,
                    row.error_message,
                    row.error_traceback,
                    payload,
                )
            )
        return out

    def claim_oldest_error(self, queue: str) -> tuple[QueueSpec, ClaimedJob]:
        """Claim the oldest job of `queue` in error, whatever its backoff and tries: on an
        ordered queue its head, by put order (NoJobError when the head is not in error: the
        jobs in error behind it may not run before it)."""
        spec = self.registry.get(queue)
        if spec.consumer is None:
            raise OutboxError(f"queue {queue} has no consumer in this process; register one")
        while True:
            with self.engine.begin() as conn:
                seq = self._oldest_error(conn, spec)
                job = claim_error(conn, queue, seq)
            if job is not None:
                return spec, job

    @staticmethod
    def _oldest_error(conn: sa.Connection, spec: QueueSpec) -> int:
        if not spec.ordered:
            seq = store.oldest_error(conn, spec.name)
            if seq is None:
                raise NoJobError(f"queue {spec.name} has no job in error")
            return seq
        head = store.head(conn, spec.name)
        if head is not None and head.status == ERROR:
            head_seq: int = head.seq
            return head_seq
        if head is None or store.oldest_error(conn, spec.name) is None:
            raise NoJobError(f"queue {spec.name} has no job in error")
        raise NoJobError(
            f"queue {spec.name} is ordered and its oldest unfinished job {head.id!r} is "
            f"{head.status}, not in error: the jobs in error behind it run after it. Wait for "
            "it (or force_retry them: they go back to the workers in put order)"
        )

    def record(self, jobs: Sequence[ClaimedJob], error: BaseException | None) -> None:
        """Record the outcome of one run of a consumer: its jobs `done`, or all in `error`."""
        with self.engine.begin() as conn:
            if error is None:
                store.mark_done(conn, jobs)
            else:
                for job in jobs:
                    store.mark_error(conn, job, error)

    def retry_one_error(self, queue: str) -> Any:
        """Run the oldest job of `queue` in error now, in this thread, whatever its backoff:
        returns the consumer's result (the job is done) or raises the consumer's exception (the
        job is in error again). NoJobError if the queue has no job in error."""
        spec, job = self.claim_oldest_error(queue)
        outcome = execute(spec, job)
        self.record([job], outcome.error)
        if outcome.error is not None:
            raise outcome.error
        self.wake()
        return outcome.result

    def force_retry(self, queue: str, id: str | None = None) -> int:
        """Send every job of `queue` in error (or the one `id`) back to the workers now,
        whatever its backoff and tries; returns how many."""
        with self.engine.begin() as conn:
            count = store.force_retry(conn, queue, id)
        self.wake()
        return count

    def queue_stats(self) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            return stats_module.queue_stats(conn)

    def retry_stats(self, age_days: float = 1.0) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            return stats_module.retry_stats(conn, age_days)

    def processing_time_stats(
        self, age_days: float = 1.0, queue: str | None = None
    ) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            return stats_module.processing_time_stats(conn, age_days, queue)

    def health(self) -> Health:
        pool, poller = self._pool, self._poller
        alive = bool(pool and poller and pool.alive() == self.workers and poller.is_alive())
        with self.engine.connect() as conn:
            return assess(
                conn,
                [s.name for s in self.registry.consumed()],
                started_at=self._started_at,
                threads_alive=alive,
                allowed_error_time=self.healthy_allowed_error_time,
                startup_grace=self.startup_grace,
            )

    def healthy(self) -> bool:
        return self.health().healthy

    def purge(self, done_older_than: float, queue: str | None = None) -> int:
        """Delete done jobs finished more than `done_older_than` seconds ago."""
        with self.engine.begin() as conn:
            count = purge_jobs(conn, done_older_than, queue)
        logger.info("outbox: purged %d done job(s)", count)
        return count

    def metrics_text(self) -> str:
        """Prometheus text: jobs per queue and status, runs of this process, overdue, health."""
        return stats_module.prometheus_text(
            self.queue_stats(),
            self.counters.snapshot(),
            healthy=self.healthy(),
            overdue=self.watcher.overdue,
        )
