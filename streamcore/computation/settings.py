"""`Settings`: how a topology runs — partitions and codec per stream, concurrency and policy per
computation, record filters per stream (Nuxeo's `Settings`). The name `default` sets the value of
every stream or computation without its own."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

from streamcore.computation.exactly_once import AT_LEAST_ONCE, GUARANTEES
from streamcore.computation.filters import FilterChain, RecordFilter
from streamcore.computation.policy import ComputationPolicy
from streamcore.computation.pool import STATIC, WORKER_ALLOCATIONS
from streamcore.computation.stream_time import (
    TimestampExtractor,
    TimestampFunction,
    WatermarkTimestamp,
    extractor_of,
)
from streamcore.errors import TopologyError
from streamcore.log.values import START_POSITIONS
from streamcore.names import Name
from streamcore.state.restore import RestoreSettings

__all__ = ["DEFAULT", "Settings"]

DEFAULT = "default"
_CODECS = ("json", "avro", "avro-binary", "avro-json", "avro-confluent")


def _stream_key(stream: str) -> str:
    return stream if stream == DEFAULT else Name.of(stream).urn


@dataclass
class Settings:
    """Per-stream and per-computation settings; every setter returns `self` for chaining.

    Example: `Settings(default_partitions=4).set_concurrency("enrich", 2).set_policy("enrich",
    ComputationPolicy(max_retries=3, dlq="app/dlq-enrich"))`.

    `checkpoint_retries` / `checkpoint_pause` (seconds): how often and how long apart a failed
    checkpoint is retried before the unit terminates (Nuxeo: 3 and 45 s). `read_batch`: records
    a unit reads at once; a requested checkpoint is taken at the latest after that many records.
    `checkpoint_interval` (seconds, default 0: off): a checkpoint asked for at the end of a read
    batch waits until that long after the previous one, or until a read finds nothing new
    (Kafka Streams' `commit.interval.ms`). Fewer checkpoints write a hot key once per interval
    instead of once per batch; a crash re-delivers up to an interval of records (outputs stay
    at-least-once, state stores count them once).
    `drain_quiet`: seconds without activity before `drain_and_stop` considers a topology done.
    `default_start` / `set_start(computation, start)`: where a computation's group reads a
    partition it has no committed position on, "earliest" (the default) or "latest" (Nuclio's
    "Seek To"; `LogManager.subscribe`); a group with committed positions resumes from them.
    `default_worker_allocation` / `set_worker_allocation(computation, allocation)`: "static"
    (the default: each of the `concurrency` units is a group member owning its partitions) or
    "pool" (Nuclio's `workerAllocationMode`: the units are workers sharing the partitions of
    one member, any free worker taking the next record, per-key order kept, only each
    partition's contiguous processed prefix committed; stateless computations at
    at-least-once only: `streamcore.computation.pool`, docs/operating.md).

    State stores (docs/state.md): `state_dir` holds the persistent stores (None: `state/` under
    the configured home); `state_engine` is the engine of stores that do not name one (None: the
    configuration's `[state] engine`); `state_lock_timeout` (seconds, None: `[state]
    lock_timeout`) bounds the wait for a store another process still holds; `restore` bounds and
    sizes restores (`streamcore.state.restore.RestoreSettings`). `standby_replicas` (default 0)
    is how many warm copies of each task's stores other processes keep by following its
    changelogs; when an owner dies, the group gives its tasks to a member holding them warm, so
    the failover restores only the changelog's tail (docs/state.md, "Standby replicas"; local
    and memory logs: Kafka's groups cannot prefer a warm copy, so it is refused there).

    Stream time (docs/state.md, "Stream time"): `set_timestamp_extractor` says where a
    computation reads its records' timestamps (default: the Record watermark);
    `max_task_idle_ms` is how long a task reading several partitions waits for one with
    nothing buffered before it processes the others (Kafka Streams' `max.task.idle.ms`; 0, the
    default, does not wait).

    Delivery (docs/delivery.md): `processing_guarantee` is `"at_least_once"` (the default) or
    `"exactly_once"` (Kafka Streams' `exactly_once_v2`: each checkpoint's outputs, changelog
    records and input positions in one Kafka transaction; refused on a log without
    transactions). `instance_id` names this process among those that run the same topology
    (None: the host name): the units' transactional ids are made of it, so two processes that
    run the same computation need different ones. `transaction_timeout` (seconds, None:
    librdkafka's 60 s) is each exactly-once checkpoint's `transaction.timeout.ms`: the broker
    aborts a checkpoint's transaction open longer, and the unit opens a new producer and
    processes those records again.
    """

    default_concurrency: int = 1
    default_partitions: int = 1
    default_codec: str = "avro"
    default_policy: ComputationPolicy = field(default_factory=ComputationPolicy)
    default_start: str = "earliest"
    default_worker_allocation: str = STATIC
    checkpoint_retries: int = 3
    checkpoint_pause: float = 10.0
    checkpoint_interval: float = 0.0
    read_batch: int = 500
    drain_quiet: float = 0.5
    state_dir: str | Path | None = None
    state_engine: str | None = None
    state_lock_timeout: float | None = None
    restore: RestoreSettings = field(default_factory=RestoreSettings)
    standby_replicas: int = 0
    max_task_idle_ms: int = 0
    processing_guarantee: str = AT_LEAST_ONCE
    instance_id: str | None = None
    transaction_timeout: float | None = None
    _partitions: dict[str, int] = field(default_factory=dict, repr=False)
    _codecs: dict[str, str] = field(default_factory=dict, repr=False)
    _concurrency: dict[str, int] = field(default_factory=dict, repr=False)
    _starts: dict[str, str] = field(default_factory=dict, repr=False)
    _allocations: dict[str, str] = field(default_factory=dict, repr=False)
    _policies: dict[str, ComputationPolicy] = field(default_factory=dict, repr=False)
    _filters: dict[str, list[RecordFilter]] = field(default_factory=dict, repr=False)
    _extractors: dict[str, TimestampExtractor] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        _positive("default_concurrency", self.default_concurrency)
        _positive("default_partitions", self.default_partitions)
        _positive("read_batch", self.read_batch)
        _codec(self.default_codec)
        _start("default_start", self.default_start)
        _allocation("default_worker_allocation", self.default_worker_allocation)
        if (
            min(
                self.checkpoint_retries,
                self.checkpoint_pause,
                self.checkpoint_interval,
                self.drain_quiet,
            )
            < 0
        ):
            raise TopologyError(
                "checkpoint_retries, checkpoint_pause, checkpoint_interval and drain_quiet must be "
                ">= 0"
            )
        if isinstance(self.max_task_idle_ms, bool) or not isinstance(self.max_task_idle_ms, int):
            raise TopologyError(f"max_task_idle_ms must be an int, got {self.max_task_idle_ms!r}")
        if self.max_task_idle_ms < 0:
            raise TopologyError(f"max_task_idle_ms must be >= 0, got {self.max_task_idle_ms}")
        replicas = self.standby_replicas
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
            raise TopologyError(
                f"standby_replicas must be an int >= 0, got {replicas!r}: the number of warm "
                "copies of each task kept besides its owner's (0: none)"
            )
        if self.processing_guarantee not in GUARANTEES:
            raise TopologyError(
                f"unknown processing_guarantee {self.processing_guarantee!r}; use one of "
                f"{', '.join(GUARANTEES)}"
            )
        if self.instance_id is not None and (
            not isinstance(self.instance_id, str) or not self.instance_id
        ):
            raise TopologyError(
                f"instance_id must be a non-empty str or None, got {self.instance_id!r}"
            )
        timeout = self.transaction_timeout
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0
        ):
            raise TopologyError(
                f"transaction_timeout must be > 0 seconds or None, got {self.transaction_timeout!r}"
            )

    # -- setters --------------------------------------------------------------------------------
    def set_partitions(self, stream: str, partitions: int) -> Self:
        _positive(f"partitions of {stream}", partitions)
        if stream == DEFAULT:
            self.default_partitions = partitions
        else:
            self._partitions[_stream_key(stream)] = partitions
        return self

    def set_codec(self, stream: str, codec: str) -> Self:
        _codec(codec)
        if stream == DEFAULT:
            self.default_codec = codec
        else:
            self._codecs[_stream_key(stream)] = codec
        return self

    def set_concurrency(self, computation: str, concurrency: int) -> Self:
        _positive(f"concurrency of {computation}", concurrency)
        if computation == DEFAULT:
            self.default_concurrency = concurrency
        else:
            self._concurrency[computation] = concurrency
        return self

    def set_start(self, computation: str, start: str) -> Self:
        """Where `computation`'s group reads a partition it has no committed position on:
        "earliest" (the default) or "latest" (`LogManager.subscribe`)."""
        _start(f"start of {computation}", start)
        if computation == DEFAULT:
            self.default_start = start
        else:
            self._starts[computation] = start
        return self

    def set_worker_allocation(self, computation: str, allocation: str) -> Self:
        """How `computation`'s units share its partitions: "static" (the default) or "pool"
        (`streamcore.computation.pool`)."""
        _allocation(f"worker_allocation of {computation}", allocation)
        if computation == DEFAULT:
            self.default_worker_allocation = allocation
        else:
            self._allocations[computation] = allocation
        return self

    def set_policy(self, computation: str, policy: ComputationPolicy) -> Self:
        if not isinstance(policy, ComputationPolicy):
            raise TopologyError(
                f"policy of {computation} must be a ComputationPolicy, got {type(policy).__name__}"
            )
        if computation == DEFAULT:
            self.default_policy = policy
        else:
            self._policies[computation] = policy
        return self

    def set_timestamp_extractor(
        self, computation: str, extractor: TimestampExtractor | TimestampFunction
    ) -> Self:
        """Where `computation` (or `default`) reads its records' timestamps: a
        `TimestampExtractor` (`WatermarkTimestamp`, `LogAppendTimestamp`, `FieldTimestamp`) or a
        function `(record, log_record) -> int` epoch ms."""
        self._extractors[computation] = extractor_of(extractor)
        return self

    def add_filter(self, stream: str, record_filter: RecordFilter) -> Self:
        if not isinstance(record_filter, RecordFilter):
            raise TopologyError(
                f"filter of {stream} must be a RecordFilter, got {type(record_filter).__name__}"
            )
        self._filters.setdefault(_stream_key(stream), []).append(record_filter)
        return self

    # -- getters --------------------------------------------------------------------------------
    def partitions(self, stream: str) -> int:
        return self._partitions.get(_stream_key(stream), self.default_partitions)

    def partitions_set(self, stream: str) -> bool:
        """True if `set_partitions` gave `stream` its own count (not the default)."""
        return _stream_key(stream) in self._partitions

    def codec(self, stream: str) -> str:
        return self._codecs.get(_stream_key(stream), self.default_codec)

    def concurrency(self, computation: str) -> int:
        return self._concurrency.get(computation, self.default_concurrency)

    def start(self, computation: str) -> str:
        return self._starts.get(computation, self.default_start)

    def worker_allocation(self, computation: str) -> str:
        return self._allocations.get(computation, self.default_worker_allocation)

    def policy(self, computation: str) -> ComputationPolicy:
        return self._policies.get(computation, self.default_policy)

    def timestamp_extractor(self, computation: str) -> TimestampExtractor:
        extractors = self._extractors
        return extractors.get(computation) or extractors.get(DEFAULT) or WatermarkTimestamp()

    def filter(self, stream: str) -> RecordFilter | None:
        """The filters of `stream` (and the `default` ones) as one, or None if there are none."""
        chain = self._filters.get(DEFAULT, []) + self._filters.get(_stream_key(stream), [])
        if not chain:
            return None
        return chain[0] if len(chain) == 1 else FilterChain(chain)


def _start(what: str, start: str) -> None:
    if start not in START_POSITIONS:
        raise TopologyError(
            f"{what} must be one of {', '.join(START_POSITIONS)}, got {start!r}: 'earliest' reads "
            "a new group's partitions from their first record, 'latest' from their end"
        )


def _allocation(what: str, allocation: str) -> None:
    if allocation not in WORKER_ALLOCATIONS:
        raise TopologyError(
            f"{what} must be one of {', '.join(WORKER_ALLOCATIONS)}, got {allocation!r}: "
            "'static' gives each unit its own partitions, 'pool' lets the units share the "
            "partitions of one member (stateless computations at at-least-once)"
        )


def _positive(what: str, value: int) -> None:
    if not isinstance(value, int) or value < 1:
        raise TopologyError(f"{what} must be a positive integer, got {value!r}")


def _codec(codec: str) -> None:
    if codec in _CODECS:
        return
    from streamcore.codecs.named import custom_codec_names

    custom = custom_codec_names()
    if codec not in custom:
        known = ", ".join((*_CODECS, *custom))
        raise TopologyError(
            f"unknown codec {codec!r}; use one of {known}, or register yours "
            "(streamcore.codecs.register_codec, [codec.custom], docs/codecs.md)"
        )
