"""What a worker holds of a claimed batch, kept from looking hung while the worker is alive.

A claim stamps `processing_ms` once for a whole batch, but the worker runs its jobs one after
the other, and the hung detector resets every job whose stamp is older than the queue's
`hung_timeout`. Measured against the claim, jobs waiting their turn behind slow batch-mates and
jobs finished but not yet recorded `done` would look hung and be run again elsewhere. So the
hung timeout counts per job, from its own start:

- before a job starts, if the batch's stamp is older than `STAMP_SLACK` of the hung timeout,
  one transaction records the finished jobs `done`, stamps the waiting ones (this job included)
  as of now, and returns those still holding the claim's token; a job whose token the hung
  detector took back is not run (an ordered queue stops there). Fast jobs never pay for it:
  the detector takes a token back only once its stamp is `hung_timeout` old, so a job whose
  stamp is younger is still held (the processes' clocks agreeing, as the detector assumes).
- while a job runs, the `LeaseKeeper` thread does the same for its batch-mates (not for the
  running job), so they never reach the timeout while their worker lives.

Only a job that itself runs past its hung timeout (less up to `STAMP_SLACK` of it) is reset
and may run again elsewhere while its first run goes on: at-least-once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import sqlalchemy as sa

from streamcore.outbox import store
from streamcore.outbox.claim import ClaimedJob
from streamcore.outbox.consumers import QueueSpec

__all__ = ["Lease", "LeaseKeeper"]


logger = logging.getLogger(__name__)

STAMP_SLACK = 0.02
KEEPER_MAX_INTERVAL = 1.0


class Lease:
    """The jobs of one claimed batch: waiting (claimed, not started) and finished (succeeded,
    `done` not recorded yet). Thread-safe: the worker and the keeper share it."""

    def __init__(
        self, engine: sa.Engine, spec: QueueSpec, batch: list[ClaimedJob], stamped: float
    ) -> None:
        """`stamped`: `time.monotonic()` taken before the claim that stamped `batch`."""
        self.engine = engine
        self.jobs = tuple(batch)
        self.queue = spec.name
        self.hung_timeout = spec.hung_timeout
        self._waiting = {job.seq: job for job in batch}
        self._finished: list[ClaimedJob] = []
        self._stamped = stamped
        self._lock = threading.Lock()

    def take(self, job: ClaimedJob) -> bool:
        """`job` starts now: True if this worker still holds it. Raises if the database cannot
        say (the job must not run then)."""
        with self._lock:
            if self._stale():
                self._stamp()
            return self._waiting.pop(job.seq, None) is not None

    def finished(self, job: ClaimedJob) -> None:
        """`job` succeeded; its `done` is recorded with the next stamp or by `release`."""
        with self._lock:
            self._finished.append(job)

    def keep(self) -> None:
        """The keeper's turn: stamp the batch-mates of the running job if their stamp ages."""
        with self._lock:
            if self._stale() and (self._waiting or self._finished):
                self._stamp()

    def pop_finished(self) -> list[ClaimedJob]:
        """Hand back the finished jobs not recorded `done` yet (to record them now)."""
        with self._lock:
            finished, self._finished = self._finished, []
            return finished

    def release(self) -> tuple[list[ClaimedJob], list[ClaimedJob]]:
        """Hand back (finished jobs not recorded `done`, jobs never started); empties the lease."""
        with self._lock:
            finished, waiting = self._finished, list(self._waiting.values())
            self._finished, self._waiting = [], {}
            return finished, waiting

    def _stale(self) -> bool:
        return time.monotonic() - self._stamped > self.hung_timeout * STAMP_SLACK

    def _stamp(self) -> None:
        started = time.monotonic()
        with self.engine.begin() as conn:
            store.mark_done(conn, self._finished)
            held = store.stamp(conn, list(self._waiting.values()))
        self._finished = []
        self._stamped = started
        for seq in [seq for seq in self._waiting if seq not in held]:
            job = self._waiting.pop(seq)
            logger.warning(
                "outbox: job %s of %s waited in its batch past the hung timeout (%g s) and was "
                "handed to another worker; not running it here (a stalled worker or database?)",
                job.id,
                self.queue,
                self.hung_timeout,
            )


class LeaseKeeper(threading.Thread):
    """Stamps the leases of running batches often enough that no waiting or finished job of a
    live worker reaches its hung timeout."""

    def __init__(self, hung_timeouts: Callable[[], list[float]]) -> None:
        super().__init__(name="outbox-lease-keeper", daemon=True)
        self._hung_timeouts = hung_timeouts
        self._leases: set[Lease] = set()
        self._guard = threading.Lock()
        self._stopping = threading.Event()

    def add(self, lease: Lease) -> None:
        with self._guard:
            self._leases.add(lease)

    def remove(self, lease: Lease) -> None:
        with self._guard:
            self._leases.discard(lease)

    def keep_all(self) -> None:
        with self._guard:
            leases = list(self._leases)
        for lease in leases:
            try:
                lease.keep()
            except Exception:
                logger.exception(
                    "outbox: stamping the claimed jobs of %s failed; retrying", lease.queue
                )

    def interval(self) -> float:
        # Four turns per shortest hung timeout: a failed stamp still has three more chances.
        return min([KEEPER_MAX_INTERVAL, *(t / 4 for t in self._hung_timeouts())])

    def run(self) -> None:
        # After stop, a worker still running a job past the pool's stop timeout keeps its lease
        # until the job ends: the keeper goes on until then.
        while not (self._stopping.is_set() and self._idle()):
            time.sleep(self.interval())
            self.keep_all()

    def _idle(self) -> bool:
        with self._guard:
            return not self._leases

    def stop(self) -> None:
        """End once no lease is left (at once if none)."""
        self._stopping.set()
