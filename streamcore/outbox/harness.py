"""The virtual-queue test harness: run jobs in the test's own thread, no workers, no waiting.

    def test_signup_sends_mail(engine):
        with engine.begin() as conn:
            signup(conn, "ada@example.com")          # puts a "mail" job
        queue = VirtualQueue(Outbox(engine=engine))
        assert queue.consume_one("mail") == "sent"   # the consumer's result

`consume_one` claims the next claimable job of the queue as a worker would (order, dependencies)
and runs it; on a batch queue (`batch_capacity`) it runs one batch: the ready jobs up to the
capacity, without waiting for the batch threshold. It asserts success: a consumer exception becomes
ConsumerFailedError (an OutboxError) with the exception as its cause, and the jobs go to
`error` as in production. `force_retry` runs the oldest job in error the same way, ignoring its
backoff.
"""

from __future__ import annotations

from typing import Any

from streamcore.outbox.claim import ClaimedJob, claim_batch
from streamcore.outbox.consumers import QueueSpec
from streamcore.outbox.errors import ConsumerFailedError, NoJobError, OutboxError
from streamcore.outbox.execute import execute_batch
from streamcore.outbox.outbox import Outbox

__all__ = ["VirtualQueue"]


class VirtualQueue:
    """Runs the jobs of an outbox one at a time in the calling thread, for tests (the module
    docstring has an example)."""

    def __init__(self, outbox: Outbox) -> None:
        self.outbox = outbox
        outbox.create_schema()

    def _run(self, spec: QueueSpec, jobs: list[ClaimedJob]) -> Any:
        outcome = execute_batch(spec, jobs)
        self.outbox.record(jobs, outcome.error)
        if outcome.error is not None:
            which = f"job {jobs[0].id}" + (f" and {len(jobs) - 1} more" if len(jobs) > 1 else "")
            raise ConsumerFailedError(
                f"{which} of queue {spec.name} failed: {type(outcome.error).__name__}: "
                f"{outcome.error}"
            ) from outcome.error
        return outcome.result

    def consume_one(self, queue: str) -> Any:
        """Run the next job (a batch queue: the next batch) of `queue`; returns the consumer's
        result."""
        spec = self.outbox.registry.get(queue)
        if spec.consumer is None:
            raise OutboxError(f"queue {queue} has no consumer registered")
        with self.outbox.engine.begin() as conn:
            batch = claim_batch(conn, queue, spec.batch_capacity or 1, ordered=spec.ordered)
        if not batch:
            raise NoJobError(f"queue {queue} has no job ready to run (init, dependencies done)")
        return self._run(spec, batch)

    def consume_all(self, queue: str) -> list[Any]:
        """Run jobs of `queue` until none is ready; returns their results in order."""
        results = []
        while True:
            try:
                results.append(self.consume_one(queue))
            except NoJobError:
                return results

    def force_retry(self, queue: str) -> Any:
        """Run the oldest job of `queue` in error now; returns the consumer's result."""
        spec, job = self.outbox.claim_oldest_error(queue)
        return self._run(spec, [job])
