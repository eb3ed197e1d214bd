"""The retry poller: every `poll_interval`, per consumed queue, retries errored jobs whose
backoff has passed and hands hung jobs to the workers again.

Retries run in the poller's own thread, oldest first, and a queue's round stops at its first
failure (yoltq's rule): when a dependency such as a broker is down, one failing retry per round
is enough to know, instead of hammering it with every errored job.

On an ordered queue "oldest" is by put order, and only the queue's head is retried: a job that
failed again starts its backoff again (and may run out of tries) while the jobs put after it,
errored in the same batch, have theirs passed; retrying those would put them ahead of it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator

import sqlalchemy as sa

from streamcore.outbox import store
from streamcore.outbox.claim import claim_error
from streamcore.outbox.consumers import QueueSpec, Registry
from streamcore.outbox.execute import execute
from streamcore.outbox.hooks import SystemHooks
from streamcore.outbox.pool import Counters
from streamcore.outbox.watcher import ExecutionWatcher

__all__ = ["RetryPoller"]


logger = logging.getLogger(__name__)


class RetryPoller(threading.Thread):
    """The thread that retries errored jobs once their backoff has passed and hands hung jobs
    back to the workers, every `poll_interval`."""

    def __init__(
        self,
        engine: sa.Engine,
        registry: Registry,
        *,
        poll_interval: float,
        watcher: ExecutionWatcher,
        counters: Counters,
        on_retried: Callable[[], None],
        hooks: SystemHooks | None = None,
    ) -> None:
        super().__init__(name="outbox-retry", daemon=True)
        self.hooks = hooks or SystemHooks()
        self.engine = engine
        self.registry = registry
        self.poll_interval = poll_interval
        self.watcher = watcher
        self.counters = counters
        self.on_retried = on_retried
        self._stop_event = threading.Event()

    def stop(self) -> None:
        self._stop_event.set()

    def run(self) -> None:
        while not self._stop_event.wait(self.poll_interval):
            try:
                self.poll_once()
            except Exception as exc:
                self.hooks.failed(f"the retry poll (next in {self.poll_interval:g} s)", exc)
            else:
                self.hooks.succeeded("the retry poll")

    def poll_once(self) -> dict[str, int]:
        """One round over every consumed queue; returns the jobs retried successfully per queue."""
        succeeded: dict[str, int] = {}
        for spec in self.registry.consumed():
            if self._stop_event.is_set():
                break
            self.reset_hung(spec)
            succeeded[spec.name] = self.retry_errors(spec)
        return succeeded

    def reset_hung(self, spec: QueueSpec) -> None:
        with self.engine.begin() as conn:
            retried, errored = store.reset_hung(
                conn, spec.name, spec.hung_timeout, spec.max_retries
            )
        if retried or errored:
            logger.warning(
                "outbox: %d hung job(s) of %s (processing > %g s) retried, %d out of tries",
                retried,
                spec.name,
                spec.hung_timeout,
                errored,
            )
            self.counters.add(spec.name, "hung", retried + errored)
            if retried:
                self.on_retried()

    def retry_errors(self, spec: QueueSpec) -> int:
        succeeded = 0
        for seq in self._due(spec):
            if self._stop_event.is_set():
                break
            with self.engine.begin() as conn:
                job = claim_error(conn, spec.name, seq)
            if job is None:
                if spec.ordered:  # another process retries the head: what follows waits
                    break
                continue
            outcome = execute(spec, job, self.watcher)
            with self.engine.begin() as conn:
                if outcome.ok:
                    store.mark_done(conn, [job])
                else:
                    assert outcome.error is not None
                    store.mark_error(conn, job, outcome.error)
            self.counters.add(spec.name, "retried_done" if outcome.ok else "retried_error")
            if not outcome.ok:
                break
            succeeded += 1
        if succeeded:
            self.on_retried()
        return succeeded

    def _due(self, spec: QueueSpec) -> Iterator[int]:
        """The seqs of `spec`'s jobs to retry, oldest first. An ordered queue's head is looked
        up again after each retry: the next job becomes the head only once it is done."""
        while True:
            with self.engine.connect() as conn:
                seqs = store.due_errors(
                    conn, spec.name, spec.error_backoff, spec.max_retries, ordered=spec.ordered
                )
            yield from seqs
            if not (spec.ordered and seqs):
                return
