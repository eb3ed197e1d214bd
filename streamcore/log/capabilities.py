"""What some backends can do beyond the contracts of `streamcore.log.api`, as runtime-checkable
protocols: a caller tests `isinstance(manager, Purgeable)` rather than the backend's type name or
`getattr`, so a new backend with the method gets the feature, and one without it gets the
caller's "not here" path.

| protocol | of | who has it today |
|---|---|---|
| `Purgeable` | manager | local: retention on demand, with the groups' guard |
| `Compactable` | manager | local: key compaction (Kafka's broker compacts its topics itself) |
| `TopicConfigurable` | manager | Kafka: the topic's configs as the broker reports them |
| `Transactional` | manager | Kafka: transactions for exactly-once checkpoints (`transactions_of`) |
| `StandbyGroups` | manager | local, memory: groups preferring warm copies (`standby_groups_of`) |
| `GroupRouting` | manager | `UnifiedLogManager`: the backend of each log and group |
| `WriterLocks` | manager | local: one writing process per partition, released on demand |
| `Inspectable` | manager | local, Kafka: `info(name)` (records, bytes, retention) |
| `Segmented` | manager | local: per-log retention and segment roll times |
| `OnDisk` | manager | local: the folder of the logs and of each log |
| `Configured` | manager | local, `UnifiedLogManager`: the settings it was made with |
| `ArrowAppender` | appender | local: whole Arrow columns as one batch |
| `ColumnReader` | tailer | Kafka: raw records as Python lists, without Arrow (`RawColumns`) |
| `CursorDescription` | description | local: another process reads partitions with cursors |
| `ManagerDescription` | description | local: another process opens a manager to append |
| `TopicDescription` | description | Kafka: Spark's Kafka source and sink reach the topic |

A protocol checks that the members exist, not their signatures: the signatures below are the
contract an implementation keeps.

`transactions_of(manager)` and `standby_groups_of(manager)` name what a backend without the
feature gives instead of failing on a missing attribute; `writer_locks_of(manager, name)` finds
the backend of a log whose partitions must be released.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from streamcore.config import StreamcoreConfig
    from streamcore.log.api import LogManager
    from streamcore.log.values import LogInfo
    from streamcore.names import Name

__all__ = [
    "ArrowAppender",
    "ColumnReader",
    "Compactable",
    "Configured",
    "CursorDescription",
    "GroupRouting",
    "Inspectable",
    "ManagerDescription",
    "OnDisk",
    "Purgeable",
    "RawColumns",
    "Segmented",
    "StandbyGroups",
    "TopicConfigurable",
    "TopicDescription",
    "Transactional",
    "WriterLocks",
    "standby_groups_of",
    "transactions_of",
    "writer_locks_of",
]


@runtime_checkable
class Purgeable(Protocol):
    """Retention applied on demand: expired segments go once every group has read past them."""

    def purge_plan(self, name: str | Name, now_ms: int | None = None) -> Sequence[Any]:
        """Per partition, what `purge` would remove and which groups hold the rest (nothing
        changes); local: `streamcore.log.local.retention.PartitionPurge`."""
        ...

    def purge(
        self, name: str | Name, now_ms: int | None = None, *, force: bool = False
    ) -> dict[int, list[int]]:
        """Remove expired segments (also those groups have not read, with `force`); the removed
        segment bases per partition."""
        ...


@runtime_checkable
class Compactable(Protocol):
    """Key compaction run by the caller (the retention job), not by a broker."""

    def compact(
        self,
        name: str | Name,
        now_ms: int | None = None,
        *,
        min_lag_ms: int = 0,
        delete_retention_ms: int = ...,
        dry_run: bool = False,
    ) -> Sequence[Any]:
        """Keep the latest record per key in sealed segments; per partition what it did
        (local: `streamcore.log.local.compaction.PartitionCompaction`)."""
        ...


@runtime_checkable
class TopicConfigurable(Protocol):
    """Logs that carry broker-side configs (Kafka topics: `cleanup.policy`, `retention.ms`)."""

    def topic_config(self, name: str | Name) -> dict[str, str]:
        """The log's configs as the broker reports them."""
        ...


@runtime_checkable
class Transactional(Protocol):
    """Appends to several logs and a group's input positions committed as one atomic unit
    (Kafka transactions, `streamcore.log.kafka.transaction.KafkaTransactions`): what
    `processing_guarantee = "exactly_once"` needs. The local and memory logs have none."""

    def transactions(
        self, transactional_id: str, *, transaction_timeout: float | None = None
    ) -> Any:
        """A transactional producer of that stable id (group + task); opening it fences any
        other producer of the same id."""
        ...


@runtime_checkable
class WriterLocks(Protocol):
    """Partitions written by one process at a time (the local log: the first append locks the
    partition until the manager closes): a task's changelog partition must be released when the
    task moves to another process, or the new owner's checkpoints fail."""

    def release_writer(self, name: str | Name, partition: int) -> None:
        """Release this process's lock of the partition (reacquired by its next append)."""
        ...


def writer_locks_of(manager: Any, name: str | Name) -> WriterLocks | None:
    """The backend of log `name` (through a `GroupRouting` manager) when its partitions are
    written by one process at a time; None otherwise."""
    if isinstance(manager, GroupRouting):
        manager = manager.backend_for(name)
    return manager if isinstance(manager, WriterLocks) else None


@runtime_checkable
class GroupRouting(Protocol):
    """A manager that routes each log, and each group's reads, to a backend
    (`UnifiedLogManager`): a feature of the backend is checked on `backend_for`'s answer."""

    def backend_for(self, name: str | Name, group: str | None = None) -> LogManager: ...


@runtime_checkable
class StandbyGroups(Protocol):
    """Consumer groups that place standby copies of tasks on members of other locations and,
    when an owner dies, leave its tasks to a member holding them warm
    (`streamcore.log.cursor.standby`): what `Settings.standby_replicas` needs."""

    def subscribe_with_standby(
        self,
        group: str,
        names: Sequence[Any],
        listener: Any,
        *,
        standby_replicas: int,
        location: str,
        start: str = "earliest",
    ) -> Any:
        """`subscribe` as a member that asks for `standby_replicas` copies of each task and
        whose state lives at `location`; the tailer has `standby_tasks()`, `owned_tasks()` and
        `set_warm(tasks)`."""
        ...


def standby_groups_of(manager: Any) -> StandbyGroups:
    """`manager` as `StandbyGroups`; raises `UnsupportedOperationError` saying why a backend
    without them cannot keep standby replicas, and what to do."""
    if isinstance(manager, StandbyGroups):
        return manager
    from streamcore.errors import UnsupportedOperationError

    raise UnsupportedOperationError(
        f"{type(manager).__name__} cannot keep standby replicas: a standby copy only shortens a "
        "failover if the group gives a dead owner's tasks to the member holding them warm, and "
        "this backend's groups assign partitions by their own protocol (Kafka: the broker's "
        "group protocol with librdkafka's built-in assignors, which take no custom "
        "preference). Set standby_replicas=0 here (a new owner restores from the changelog), "
        "or run the computation on the local log"
    )


def transactions_of(manager: Any) -> Transactional:
    """`manager` as a `Transactional`; raises `UnsupportedOperationError` saying what the
    backend guarantees instead (at-least-once outputs, exactly-once state) and what to do."""
    if isinstance(manager, Transactional):
        return manager
    from streamcore.errors import UnsupportedOperationError

    raise UnsupportedOperationError(
        f"{type(manager).__name__} has no transactions, so exactly-once outputs cannot be "
        "promised on it: its guarantee is at-least-once outputs (a crash between appending a "
        "checkpoint's records and committing its input positions appends them again) and "
        "exactly-once state (the restore drops the changes of inputs processed again). Use "
        "processing_guarantee='at_least_once' on this log, or a Kafka log for 'exactly_once'"
    )


@runtime_checkable
class Inspectable(Protocol):
    """A summary of one log in one call."""

    def info(self, name: str | Name) -> LogInfo: ...


@runtime_checkable
class Segmented(Protocol):
    """Per-log retention and segment roll, set when the log is created (its manager's `create`
    takes the options `retention` and `segment_roll`)."""

    def retention_ms(self, name: str | Name) -> int: ...

    def segment_roll_ms(self, name: str | Name) -> int: ...


@runtime_checkable
class OnDisk(Protocol):
    """Logs in folders of this machine."""

    root: Path

    def folder(self, name: str | Name) -> Path:
        """The folder of log `name`."""
        ...


@runtime_checkable
class Configured(Protocol):
    """A manager made from the project's settings (home, log defaults, codecs)."""

    config: StreamcoreConfig


@runtime_checkable
class ArrowAppender(Protocol):
    """An appender that takes Arrow columns without per-record Python work."""

    def append_arrow(self, partition: int, keys: Any, values: Any) -> int:
        """Append pyarrow string/binary arrays to `partition` as one batch; its first offset."""
        ...


@dataclass(slots=True)
class RawColumns:
    """Raw records (no codec) as Python lists, one entry per record: partition numbers, offsets,
    timestamps (ms; empty when the reader was not asked for them), keys (UTF-8 checked bytes,
    b"" for no key) and values (b"" for no value)."""

    partitions: list[int] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)
    keys: list[bytes] = field(default_factory=list)
    values: list[bytes] = field(default_factory=list)


@runtime_checkable
class ColumnReader(Protocol):
    """A tailer that hands `read_arrow`'s records over as Python lists: for a reader that turns
    them into Python objects anyway (the restore), where building Arrow arrays only to convert
    them back costs more than the lists. Where the backend's records are Arrow already (the local
    log maps its segments), `read_arrow` is the cheaper read, so it has no such method."""

    def read_columns(self, max_records: int = 65536, timeout: float = 0.0) -> RawColumns | None:
        """Up to `max_records` records as `read_arrow` takes them (the same records, positions
        and errors), without timestamps; None if none arrives within `timeout` s."""
        ...


@runtime_checkable
class CursorDescription(Protocol):
    """A description from which any process reads partitions through cursors
    (`streamcore.log.cursor.tailer.Cursor`; Spark's streamcore_log data source also takes Arrow
    batches from them, `next_arrow`)."""

    name: str
    partitions: int

    def open_cursor(self, partition: int) -> Any:
        """A read-only cursor on one partition; close it."""
        ...

    def label(self, partition: int) -> str:
        """How messages name a partition."""
        ...

    def to_json(self) -> str:
        """The description as text (`streamcore.log.registry.description_from_json` reads it)."""
        ...


@runtime_checkable
class ManagerDescription(Protocol):
    """A description from which any process opens a manager of the log's backend (to append)."""

    name: str
    partitions: int

    def open_manager(self) -> LogManager:
        """A manager on the log's backend; close it."""
        ...


@runtime_checkable
class TopicDescription(Protocol):
    """A log that is a Kafka topic: Spark's Kafka source and sink reach it with these options."""

    name: str
    topic: str
    compacted: bool

    def spark_options(self) -> dict[str, str]:
        """`kafka.*` options for Spark's Kafka source and sink (secrets in clear: never log)."""
        ...
