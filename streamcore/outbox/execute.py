"""Running one claimed job: decode its payload with the queue's codec, call the consumer under
the watcher's eye, and report the outcome (never raises what the consumer raised)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from streamcore.outbox.claim import Job
from streamcore.outbox.consumers import QueueSpec
from streamcore.outbox.watcher import ExecutionWatcher

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Outcome:
    job: Job
    result: Any = None
    error: BaseException | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def execute(spec: QueueSpec, job: Job, watcher: ExecutionWatcher | None = None) -> Outcome:
    """Run `job` with the consumer of `spec` in the calling thread."""
    if spec.consumer is None:
        raise RuntimeError(f"queue {spec.name} has no consumer in this process")
    try:
        payload = spec.codec.decode(job.payload)
        if watcher is None:
            result = spec.consumer(payload)
        else:
            watcher.begin(spec.name, job.id, spec.max_execute_time)
            try:
                result = spec.consumer(payload)
            finally:
                watcher.end()
    except Exception as exc:
        logger.info(
            "outbox: job %s of queue %s failed (try %d): %s: %s",
            job.id,
            spec.name,
            job.tries,
            type(exc).__name__,
            exc,
        )
        return Outcome(job, error=exc)
    return Outcome(job, result=result)
