"""`BatchComputation`: processes records in batches (Nuxeo's `AbstractBatchComputation`).

Records are buffered and handed to `batch_process` when the batch reaches the policy's
`batch_capacity`, when the `batch_threshold` timer fires (every threshold seconds), or when the next
record comes from another input stream; a record flagged COMMIT or POISON_PILL flushes its batch
at once. A checkpoint is asked after each successful batch. The buffered records are its
`held_records`: no checkpoint (asked by a batch, a timer, a flag or a dead-lettered record)
commits a partition past them before their batch is processed, so a stop, crash or rebalance
delivers them again.

A failing `batch_process` follows the computation's policy. The record whose arrival triggered the
flush is taken back out of the batch before the retry (it is re-added when processed again). When
the retries are exhausted `batch_failure` is called, and the records of the batch are dead-lettered
(each with its own stream, partition and offset) or skipped with the failed record (or, on
termination, left uncommitted). When the flush was triggered by a record of another input, that
record did not fail: it stays held as the first record of the next batch."""

from __future__ import annotations

import abc
from collections.abc import Iterable, Sequence

from streamcore.computation.computation import Computation, FailedRecord
from streamcore.computation.context import ComputationContext
from streamcore.log import LogOffset
from streamcore.record import Flag, Record

__all__ = ["BatchComputation"]

BATCH_TIMER = "batch"
_DEFAULT_FLAGS = int(Flag.DEFAULT)
_FLUSH_FLAGS = int(Flag.COMMIT | Flag.POISON_PILL)  # the runner checkpoints at these records


class BatchComputation(Computation):
    """A computation that processes its records in batches: subclasses implement `batch_process`
    (and may override `batch_failure`)."""

    def __init__(self, name: str, inputs: int = 1, outputs: int = 0) -> None:
        super().__init__(name, inputs, outputs)
        self._batch: list[Record] = []
        self._origins: list[LogOffset | None] = []  # where each buffered record was read
        # The record of another input whose arrival flushes the batch: if that flush fails for
        # good, the failure is the batch's, so this record starts the next batch instead.
        self._arriving: tuple[str, Record, LogOffset | None] | None = None
        self._stream: str | None = None
        self._capacity = 1
        self._threshold_ms = 1000

    @abc.abstractmethod
    def batch_process(
        self, context: ComputationContext, input_stream: str, records: list[Record]
    ) -> None:
        """Process a batch of records of one logical input stream."""

    def batch_failure(
        self, context: ComputationContext, input_stream: str, records: list[Record]
    ) -> None:
        """The retries of a batch are exhausted (before the policy's fallback)."""

    def init(self, context: ComputationContext) -> None:
        # After a rebalance the buffered records may belong to partitions given away; they are
        # not committed, so their new owner processes them again.
        self._batch = []
        self._origins = []
        self._arriving = None
        self._stream = None
        policy = context.policy
        self._capacity = policy.batch_capacity
        self._threshold_ms = max(1, int(policy.batch_threshold * 1000))
        context.set_timer(BATCH_TIMER, context.now_ms() + self._threshold_ms)

    def process_record(
        self, context: ComputationContext, input_stream: str, record: Record
    ) -> None:
        if self._batch and input_stream != self._stream:
            self._arriving = (input_stream, record, context.last_offset)
            self._flush(context)
            self._arriving = None
        self._stream = input_stream
        self._batch.append(record)
        self._origins.append(context.last_offset)
        flags = record.flags
        if len(self._batch) >= self._capacity or (flags != _DEFAULT_FLAGS and flags & _FLUSH_FLAGS):
            try:
                self._flush(context)
            except BaseException:
                self._batch.pop()  # processed again on retry, which re-adds it
                self._origins.pop()
                raise

    def process_timer(self, context: ComputationContext, key: str, timestamp_ms: int) -> None:
        if key != BATCH_TIMER:
            return
        if self._batch:
            self._flush(context)
        context.set_timer(BATCH_TIMER, max(timestamp_ms, context.now_ms()) + self._threshold_ms)

    def _flush(self, context: ComputationContext) -> None:
        self.batch_process(context, self._stream or "i1", self._batch)
        self._batch = []
        self._origins = []
        context.ask_for_checkpoint()

    def held_records(self) -> Iterable[tuple[Record, LogOffset | None]]:
        return zip(self._batch, self._origins, strict=True)

    def process_failure(
        self, context: ComputationContext, failure: BaseException
    ) -> Sequence[FailedRecord]:
        batch, self._batch = self._batch, []
        origins, self._origins = self._origins, []
        context.set_timer(BATCH_TIMER, context.now_ms() + self._threshold_ms)  # if a timer failed
        self.batch_failure(context, self._stream or "i1", batch)
        if self._arriving is not None:
            self._stream, record, origin = self._arriving
            self._arriving = None
            self._batch, self._origins = [record], [origin]
        return list(zip(batch, origins, strict=True))
