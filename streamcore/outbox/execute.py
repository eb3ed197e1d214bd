"""Running claimed jobs: decode their payloads with the queue's codec, call the consumer under
the watcher's eye, and report the outcome (never raises what the consumer raised).

A queue's consumer takes one payload, or, for a batch queue (`batch_capacity`), a list of them:
`execute_batch` calls it once for several jobs, which then succeed or fail together, and
`execute` hands it a single job as a batch of one (retries run one job at a time)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from streamcore.outbox.claim import ClaimedJob
from streamcore.outbox.consumers import QueueSpec
from streamcore.outbox.errors import ConcurrentUpdateError, NoConsumerError, NotBatchQueueError
from streamcore.outbox.log_context import restored_context
from streamcore.outbox.watcher import ExecutionWatcher

__all__ = ["ExecutionOutcome", "execute", "execute_batch"]


logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ExecutionOutcome:
    """What running a batch of claimed jobs gave: the consumer's result, or its error."""

    jobs: tuple[ClaimedJob, ...]
    result: Any = None
    error: BaseException | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def _lost_a_concurrent_update(error: BaseException) -> bool:
    from sqlalchemy.orm.exc import StaleDataError

    return isinstance(error, ConcurrentUpdateError | StaleDataError)


def execute(
    spec: QueueSpec, job: ClaimedJob, watcher: ExecutionWatcher | None = None
) -> ExecutionOutcome:
    """Run `job` with the consumer of `spec` in the calling thread."""
    return execute_batch(spec, [job], watcher)


def execute_batch(
    spec: QueueSpec, jobs: Sequence[ClaimedJob], watcher: ExecutionWatcher | None = None
) -> ExecutionOutcome:
    """Run `jobs` (several only for a batch queue) with one call of the consumer of `spec`."""
    if spec.consumer is None:
        raise NoConsumerError(f"queue {spec.name} has no consumer in this process")
    if len(jobs) > 1 and spec.batch_capacity is None:
        raise NotBatchQueueError(f"queue {spec.name} runs one job at a time, not {len(jobs)}")
    label = jobs[0].id if len(jobs) == 1 else f"{jobs[0].id} and {len(jobs) - 1} more"
    try:
        payloads = [spec.codec.decode(job.payload) for job in jobs]
        argument = payloads if spec.batch_capacity is not None else payloads[0]
        with restored_context(jobs[0].context):  # a batch runs in its first job's context
            if watcher is None:
                result = spec.consumer(argument)
            else:
                watcher.begin(spec.name, label, spec.max_execute_time)
                try:
                    result = spec.consumer(argument)
                finally:
                    watcher.end()
    except Exception as exc:
        if spec.allow_cas_failure and _lost_a_concurrent_update(exc):
            logger.info(
                "outbox: job %s of queue %s lost a concurrent update (%s: %s); done, as the "
                "queue allows (allow_cas_failure)",
                label,
                spec.name,
                type(exc).__name__,
                exc,
            )
            return ExecutionOutcome(tuple(jobs))
        logger.info(
            "outbox: job %s of queue %s failed (try %d): %s: %s",
            label,
            spec.name,
            jobs[0].tries,
            type(exc).__name__,
            exc,
        )
        return ExecutionOutcome(tuple(jobs), error=exc)
    return ExecutionOutcome(tuple(jobs), result=result)
