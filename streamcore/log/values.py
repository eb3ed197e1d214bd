"""The value objects of the log API: where a record is (`LogPartition`, `LogOffset`,
`AppendedOffsets`), what a read returns (`LogRecord`), what a group's position is worth (`LogLag`,
`Latency`, `LiveMember`), and what a manager tells about a log (`LogInfo`, `LogDescription`).

Plain data: tuples and frozen dataclasses that every backend builds and every caller may keep;
the contracts that produce them are in `streamcore.log.api`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, NamedTuple, Self, TypeVar, overload

from streamcore.names import Name

__all__ = [
    "START_POSITIONS",
    "AppendedOffsets",
    "Latency",
    "LiveMember",
    "LogDescription",
    "LogInfo",
    "LogLag",
    "LogOffset",
    "LogPartition",
    "LogRecord",
    "check_start",
]

M = TypeVar("M")

# Where a subscribed group with no committed position on a partition starts reading it.
START_POSITIONS = ("earliest", "latest")


def check_start(start: str) -> str:
    """`start` if it is a start position; `InvalidArgumentError` naming the allowed ones."""
    if start not in START_POSITIONS:
        from streamcore.errors import InvalidArgumentError

        raise InvalidArgumentError(
            f"unknown start position {start!r}: use 'earliest' (the first retained record, the "
            "default) or 'latest' (only records appended after the group first reads the "
            "partition)"
        )
    return start


class LogPartition(NamedTuple):
    """One partition of a log. Printed as `<log-id>-NN` like Nuxeo.

    A NamedTuple, not a frozen dataclass: one is made per appended record, and tuples build three
    times faster."""

    name: Name
    partition: int

    @classmethod
    def of(cls, name: str | Name, partition: int) -> LogPartition:
        return cls(Name.of(name), partition)

    def __str__(self) -> str:
        return f"{self.name.id}-{self.partition:02d}"


class LogOffset(NamedTuple):
    """A position in a partition. Printed as `<log-id>-<partition>:+<offset>` like Nuxeo."""

    partition: LogPartition
    offset: int

    def next_offset(self) -> LogOffset:
        return LogOffset(self.partition, self.offset + 1)

    def __str__(self) -> str:
        return f"{self.partition}:+{self.offset}"


class AppendedOffsets(Sequence[LogOffset]):
    """Where each record of a batch append went, in input order.

    Building one `LogOffset` per record would cost more than writing the batch, so the positions
    are kept as two integer arrays and a `LogOffset` is made only when an item is accessed."""

    __slots__ = ("_name", "_offsets", "_partitions")

    def __init__(self, name: Name, partitions: Any, offsets: Any) -> None:
        self._name = name
        self._partitions = partitions
        self._offsets = offsets

    def __len__(self) -> int:
        return len(self._offsets)

    @overload
    def __getitem__(self, index: int) -> LogOffset: ...

    @overload
    def __getitem__(self, index: slice) -> list[LogOffset]: ...

    def __getitem__(self, index: int | slice) -> LogOffset | list[LogOffset]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        partition = LogPartition(self._name, int(self._partitions[index]))
        return LogOffset(partition, int(self._offsets[index]))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence):
            return NotImplemented
        return len(self) == len(other) and list(self) == list(other)

    def __repr__(self) -> str:
        return f"AppendedOffsets({list(self)!r})"


@dataclass(slots=True)
class LogRecord(Generic[M]):
    """One record read from a log: its message, where it is, when it was appended, its key."""

    message: M
    partition: LogPartition
    offset: int
    timestamp: int
    key: str

    @property
    def log_offset(self) -> LogOffset:
        return LogOffset(self.partition, self.offset)


@dataclass(frozen=True, slots=True)
class LogLag:
    """Committed position `pos`, end offset `end`, `lag = end - pos`; `lost` counts records a group
    never read because retention purged them first."""

    pos: int
    end: int
    lag: int
    lost: int = 0

    @classmethod
    def of(cls, pos: int, end: int, lost: int = 0) -> LogLag:
        return cls(pos, end, max(0, end - pos), lost)

    @classmethod
    def aggregate(cls, lags: Iterable[LogLag]) -> LogLag:
        """The lag of a whole log: every field summed over partitions. For a log whose offsets
        still start at 0, pos then reads as records processed and end as records appended.

        Nuxeo's `LogLag.of(list)` takes min/max of pos/end instead; sums read better in a table,
        and lag, the number that matters, is the same either way."""
        items = list(lags)
        return cls(
            sum(x.pos for x in items),
            sum(x.end for x in items),
            sum(x.lag for x in items),
            sum(x.lost for x in items),
        )


@dataclass(frozen=True, slots=True)
class Latency:
    """How far a group is behind in time: `latency_ms = now - timestamp of the last processed
    record` while it has lag, 0 when it is caught up (Nuxeo semantics)."""

    lower: int  # timestamp (ms) of the last processed record, 0 if none
    upper: int  # time of measurement (ms)
    lag: LogLag
    key: str | None = None

    @property
    def latency_ms(self) -> int:
        if self.lag.lag <= 0 or self.lower <= 0:
            return 0
        return max(0, self.upper - self.lower)

    @classmethod
    def aggregate(cls, items: Iterable[Latency]) -> Latency:
        values = list(items)
        lowers = [x.lower for x in values if x.lower > 0 and x.lag.lag > 0]
        return cls(
            min(lowers) if lowers else 0,
            max((x.upper for x in values), default=0),
            LogLag.aggregate(x.lag for x in values),
        )


@dataclass(frozen=True)
class LogDescription:
    """How another process (a Spark executor) opens a log without the manager that described
    it: primitives only, so it pickles. Made by `LogManager.describe`; each backend subclasses it
    with its own fields and knows how to open it (see docs/spark-jobs.md and
    `streamcore.log.capabilities`). `backend` is the backend's type (`local`, `kafka`); `name` is
    the log's URN."""

    backend: str
    name: str
    partitions: int

    def to_json(self) -> str:
        """This description as text, e.g. for a Spark data source option;
        `streamcore.log.registry.description_from_json` reads it back as its backend's class."""
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Self:
        return cls(**json.loads(text))


@dataclass(frozen=True)
class LogInfo:
    """What `LogManager.info` reports about one log."""

    name: Name
    partitions: int
    records: int
    size_bytes: int
    retention_ms: int
    first_offsets: Sequence[int] = field(default=())
    end_offsets: Sequence[int] = field(default=())


@dataclass(frozen=True, slots=True)
class LiveMember:
    """A live member of a consumer group, as `LogManager.group_members` reports it: its id, the
    host it runs on (None when the backend does not know), and the URNs of the logs it consumes
    as far as the backend knows (empty when it cannot tell)."""

    member_id: str
    host: str | None
    logs: tuple[str, ...]
