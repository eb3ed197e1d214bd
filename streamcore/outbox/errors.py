"""Errors of the outbox queue. Every message names the queue/job and says what to do."""

from __future__ import annotations

from streamcore.errors import StreamcoreError

__all__ = [
    "ConcurrentUpdateError",
    "ConsumerFailedError",
    "DependencyCycleError",
    "DependencyNotFoundError",
    "DuplicateJobError",
    "InvalidPayloadError",
    "NoConsumerError",
    "NoJobError",
    "NotBatchQueueError",
    "OutboxError",
    "SchemaMissingError",
    "UnknownQueueError",
]


class OutboxError(StreamcoreError):
    """Base of the outbox errors."""

    retryable = False


class UnknownQueueError(OutboxError):
    """A queue was used before a consumer (or a queue definition) was registered for it."""


class InvalidPayloadError(OutboxError):
    """`put` was given a payload the queue's `valid_payload` rejects or its codec cannot encode."""


class DuplicateJobError(OutboxError):
    """A job with the same `(queue, id)` exists already."""


class DependencyNotFoundError(OutboxError):
    """`depends_on` names a job that does not exist."""


class DependencyCycleError(OutboxError):
    """`depends_on` makes jobs of one put wait for each other (or a job for itself) forever."""


class SchemaMissingError(OutboxError):
    """The jobs table does not exist in the database `put` writes to."""


class ConsumerFailedError(OutboxError):
    """The test harness ran a job whose consumer raised; the consumer's exception is the cause.
    Not an `AssertionError` (it was one): pytest reports any exception as a failed test, and an
    `except AssertionError` meant for a test's own checks must not catch a library error."""


class NoJobError(OutboxError):
    """There is no job to run in the queue (test harness, `retry_one_error`)."""


class NoConsumerError(OutboxError, RuntimeError):
    """A job was run in a process where its queue has no consumer: register one (`register`)
    in the process that runs the queue's jobs."""


class NotBatchQueueError(OutboxError, RuntimeError):
    """Several jobs were given to one consumer call of a queue that runs one job at a time (no
    `batch_capacity`)."""


class ConcurrentUpdateError(OutboxError):
    """Raised by a consumer whose optimistic-concurrency write lost: the row it read was updated
    by someone else before it wrote (a version or compare-and-swap check failed). A queue
    registered with `allow_cas_failure=True` counts the job as done (the other writer's update
    stands); otherwise it is an ordinary failure, retried."""

    retryable = True
