"""`ComputationContext`: what a computation uses to produce records, set timers and ask for
checkpoints (Nuxeo's `ComputationContext`). The processor and the test driver provide the
implementation (`streamcore.computation.runner`)."""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any

from streamcore.errors import TopologyError

if TYPE_CHECKING:
    from streamcore.computation.policy import ComputationPolicy
    from streamcore.log import LogOffset
    from streamcore.record import Record
    from streamcore.state.store import KeyValueStore

__all__ = ["ComputationContext"]


class ComputationContext(abc.ABC):
    """The context of one concurrency unit of a computation. Not thread-safe: use it only from
    the calls the runner makes (`init`, `process_record`, `process_timer`, ...)."""

    @abc.abstractmethod
    def produce_record(
        self, output_stream: str, record_or_key: Record | str, data: bytes | None = None
    ) -> None:
        """Buffer a record for `output_stream` (logical "o1".. or the mapped stream name). It is
        appended at the next checkpoint, to the partition of its key. A `Record` with watermark 0
        gets the low watermark of the records being checkpointed; `(key, data)` makes a Record
        stamped like that."""

    @abc.abstractmethod
    def set_timer(self, key: str, timestamp_ms: int) -> None:
        """Call `process_timer(context, key, timestamp_ms)` once the clock reaches
        `timestamp_ms` (epoch milliseconds). Setting a key again replaces its timer."""

    def set_stream_timer(self, key: str, timestamp_ms: int, task: int | None = None) -> None:
        """Call `process_timer(context, key, timestamp_ms)` once the stream time of `task`
        reaches `timestamp_ms`, right after the record that moves it there (docs/state.md,
        "Stream time"). `task` None: the current record's task (or the stream-time timer's).
        Setting a key of a task again replaces its timer; wall-clock time never fires it."""
        raise TopologyError(
            f"computation {self.computation_name!r}: this context has no stream time"
        )

    @property
    def stream_time_ms(self) -> int:
        """The stream time (epoch ms) of the current record's task, or of the stream-time
        timer's: the largest timestamp the task has processed, this record's included; -1 before
        any record, and outside a record or stream-time timer (use `stream_time_of`)."""
        return -1

    def stream_time_of(self, task: int) -> int:
        """The stream time of `task` (-1 before any record of it)."""
        return -1

    @property
    def record_times(self) -> tuple[int, int, int] | None:
        """`(task_id, record_timestamp_ms, stream_time_ms)` of the record being processed, in
        one call (a windowed aggregation reads the three for every record); None outside a
        record."""
        return None

    @property
    def task_id(self) -> int | None:
        """The task (input partition number) of the record being processed, or of the
        stream-time timer running; None outside them."""
        return None

    @property
    def record_timestamp_ms(self) -> int:
        """The timestamp (epoch ms) the computation's timestamp extractor gave the record being
        processed (the Record watermark's by default; docs/state.md, "Stream time"); -1 outside
        a record."""
        return -1

    def count_late_record(self) -> None:  # noqa: B027 (optional: contexts without metrics)
        """Count a record a windowed aggregation sent to its late stream (the metric
        `streamcore_computation_late_total`)."""

    @abc.abstractmethod
    def ask_for_checkpoint(self) -> None:
        """The current record (and every one before it) is done: append what was produced and
        commit the input positions up to here. Taken at the latest at the end of the current
        read batch."""

    @abc.abstractmethod
    def cancel_ask_for_checkpoint(self) -> None:
        """Withdraw `ask_for_checkpoint` made while processing the current record."""

    @abc.abstractmethod
    def set_source_low_watermark(self, watermark: int) -> None:
        """For sources (no input stream): the watermark up to which everything was produced."""

    @abc.abstractmethod
    def ask_for_termination(self) -> None:
        """Stop this concurrency unit after the current record (checkpointing if asked)."""

    @abc.abstractmethod
    def now_ms(self) -> int:
        """The processor's clock in epoch milliseconds (virtual in the test driver): use it, not
        `time.time()`, to compute timer times."""

    @property
    @abc.abstractmethod
    def last_offset(self) -> LogOffset | None:
        """Where the record being processed was read; None in timers before any record."""

    def get_state_store(self, name: str, task: int | None = None) -> KeyValueStore[Any]:
        """The state store `name` of the task of the record being processed (docs/state.md);
        in a timer or `init`, name the `task` (one of `tasks`) unless the unit has exactly one.
        The store must be declared on the topology (`stores=` of `add_computation` /
        `add_processor`)."""
        raise TopologyError(
            f"computation {self.computation_name!r} has no state store {name!r}: declare it on "
            "the topology with stores=[...] in add_computation or add_processor"
        )

    @property
    def tasks(self) -> tuple[int, ...]:
        """The tasks (input partition numbers) this unit owns now, in order."""
        return ()

    @property
    @abc.abstractmethod
    def policy(self) -> ComputationPolicy: ...

    @property
    @abc.abstractmethod
    def computation_name(self) -> str: ...
