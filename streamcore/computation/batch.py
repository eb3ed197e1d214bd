"""`BatchComputation`: processes records in batches (Nuxeo's `AbstractBatchComputation`).

Records are buffered and handed to `batch_process` when the batch reaches the policy's
`batch_capacity`, when the `batch_threshold` timer fires (every threshold seconds), or when the next
record comes from another input stream. A checkpoint is asked after each successful batch, so a
record is committed only once its batch was processed.

A failing `batch_process` follows the computation's policy. The record whose arrival triggered the
flush is taken back out of the batch before the retry (it is re-added when processed again). When
the retries are exhausted `batch_failure` is called, and the records of the batch are dead-lettered
or skipped with the failed record (or, on termination, left uncommitted)."""

from __future__ import annotations

import abc
from collections.abc import Sequence

from streamcore.computation.computation import Computation
from streamcore.computation.context import ComputationContext
from streamcore.record import Record

__all__ = ["BatchComputation"]

BATCH_TIMER = "batch"


class BatchComputation(Computation):
    def __init__(self, name: str, inputs: int = 1, outputs: int = 0) -> None:
        super().__init__(name, inputs, outputs)
        self._batch: list[Record] = []
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
        self._stream = None
        policy = context.policy
        self._capacity = policy.batch_capacity
        self._threshold_ms = max(1, int(policy.batch_threshold * 1000))
        context.set_timer(BATCH_TIMER, context.now_ms() + self._threshold_ms)

    def process_record(
        self, context: ComputationContext, input_stream: str, record: Record
    ) -> None:
        if self._batch and input_stream != self._stream:
            self._flush(context)
        self._stream = input_stream
        self._batch.append(record)
        if len(self._batch) >= self._capacity:
            try:
                self._flush(context)
            except BaseException:
                self._batch.pop()  # processed again on retry, which re-adds it
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
        context.ask_for_checkpoint()

    def process_failure(
        self, context: ComputationContext, failure: BaseException
    ) -> Sequence[Record]:
        batch, self._batch = self._batch, []
        context.set_timer(BATCH_TIMER, context.now_ms() + self._threshold_ms)  # if a timer failed
        self.batch_failure(context, self._stream or "i1", batch)
        return batch
