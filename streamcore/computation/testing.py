"""`TopologyTestDriver`: run a topology synchronously, without a broker or threads (Kafka Streams'
test driver).

The driver keeps every stream in a `MemoryLogManager` and runs one unit per computation with the
same `ComputationRunner` the `StreamProcessor` uses: the same codecs, filters, retries, policies,
dead-letter format and checkpoints. Only the clock differs: it is virtual, moves only with
`advance_time` (and with retry backoff, which takes no real time), and starts at the current time
unless `start_ms` is given. After each `pipe` / `advance_time` the driver steps every computation
until none has anything left to do, so outputs are ready to read at once.

Outputs follow the processor's rules: a record produced by a computation is visible once the
computation checkpoints (asks for a checkpoint, or a batch flushes).

`Settings.processing_guarantee` (and `instance_id`, `transaction_timeout`) are accepted, so the
production Settings can be shared with tests, and make no difference here: in memory, in one
thread, a checkpoint's outputs, stores and positions are written together and nothing crashes
between them, so the results are those of `exactly_once` either way. What exactly_once adds on
Kafka (transactions, fencing, read_committed) is tested against a broker, not here.

    driver = TopologyTestDriver(topology, settings)
    driver.pipe("app/in", "key-1", b"hello")
    assert [r.data for r in driver.read_output("app/out")] == [b"HELLO"]
"""

from __future__ import annotations

from typing import Any

from streamcore.codecs import get_codec
from streamcore.computation.dlq import DeadLetter
from streamcore.computation.runner import ComputationRunner, InputStream, OutputStream
from streamcore.computation.settings import Settings
from streamcore.computation.stats import TERMINATED, SkipBudget, UnitStats
from streamcore.computation.task_stores import TaskStores
from streamcore.computation.tasks import check_copartitioned, created_partitions
from streamcore.computation.topology import Topology
from streamcore.errors import ComputationError, InvalidArgumentError, TopologyError
from streamcore.log import LogLag, LogPartition
from streamcore.log.memory import MemoryLogManager
from streamcore.names import Name
from streamcore.record import Flag, Record
from streamcore.state.changelog import changelog_name, ensure_changelog
from streamcore.state.store import KeyValueStore
from streamcore.watermark import Watermark

__all__ = ["TopologyTestDriver"]

_READER_GROUP = "streamcore/test-driver"
_MAX_ROUNDS = 100_000


class TopologyTestDriver:
    """Runs `topology` in this thread on an in-memory log with a virtual clock: `pipe` records in,
    `advance_time`, then `read_output` / `read_dead_letters`. `settings.processing_guarantee`
    is accepted and makes no difference (in memory; see the module doc)."""

    def __init__(
        self, topology: Topology, settings: Settings | None = None, *, start_ms: int | None = None
    ) -> None:
        self.topology = topology
        self.settings = settings or Settings()
        self.manager = MemoryLogManager()
        self._now = start_ms if start_ms is not None else Watermark.of_now().timestamp
        self._codecs: dict[str, Any] = {}
        self._appenders: dict[str, Any] = {}
        self._readers: dict[str, Any] = {}
        self._runners: list[ComputationRunner] = []
        self._closed = False
        partitions_of = created_partitions(topology, self.settings)
        check_copartitioned(topology, partitions_of)
        for stream in topology.streams():
            self.manager.create(stream, partitions_of(stream))
        for name in topology.computation_names():
            dlq = self.settings.policy(name).dlq
            if dlq is not None and not self.manager.exists(dlq):
                self.manager.create(dlq, 1)
        for name in topology.computation_names():
            tasks = max((self.manager.size(s) for s in topology.input_streams(name)), default=0)
            for spec in topology.stores(name):
                ensure_changelog(self.manager, changelog_name(name, spec.name), tasks)
        for name in topology.computation_names():
            self._runners.append(self._runner(name))
        for runner in self._runners:
            inputs = topology.input_streams(runner.name)
            tailer = None
            if inputs:
                partitions = [
                    LogPartition.of(s, p) for s in inputs for p in range(self.manager.size(s))
                ]
                tailer = self.manager.tailer(runner.name, partitions)
            runner.open(tailer)
        self._run()

    # -- wiring (the processor's, minus threads) -------------------------------------------------
    def _codec(self, stream: str) -> Any:
        if stream not in self._codecs:
            self._codecs[stream] = get_codec(self.settings.codec(stream))
        return self._codecs[stream]

    def _appender(self, stream: str) -> Any:
        if stream not in self._appenders:
            self._appenders[stream] = self.manager.appender(stream, self._codec(stream))
        return self._appenders[stream]

    def _runner(self, name: str) -> ComputationRunner:
        topology, settings = self.topology, self.settings
        policy = settings.policy(name)
        dlq = None
        if policy.dlq is not None:
            urn = Name.of(policy.dlq).urn
            dlq = OutputStream(urn, self._appender(urn), None)
        return ComputationRunner(
            topology.supplier(name)(),
            unit=0,
            policy=policy,
            inputs={
                urn: InputStream(urn, logical, self._codec(urn), settings.filter(urn))
                for logical, urn in topology.input_mapping(name).items()
            },
            outputs={
                logical: OutputStream(urn, self._appender(urn), settings.filter(urn))
                for logical, urn in topology.output_mapping(name).items()
            },
            dlq=dlq,
            clock_ms=lambda: self._now,
            sleep=self._sleep,
            skip_budget=SkipBudget(policy.skip_first_failures),
            read_batch=settings.read_batch,
            checkpoint_retries=settings.checkpoint_retries,
            checkpoint_pause=settings.checkpoint_pause,
            checkpoint_interval=settings.checkpoint_interval,
            stores=self._stores(name),
            timestamp_extractor=settings.timestamp_extractor(name),
            max_task_idle_ms=settings.max_task_idle_ms,
        )

    def _stores(self, name: str) -> TaskStores | None:
        """The computation's stores, all on the memory engine, their changelogs in the driver's
        memory log."""
        specs = self.topology.stores(name)
        if not specs:
            return None
        return TaskStores(
            name,
            specs,
            self.topology.input_streams(name),
            self.manager,
            name,
            state_dir=None,
            default_engine="memory",
            lock_timeout=0.0,
            restore_settings=self.settings.restore,
            engine="memory",
        )

    def _sleep(self, seconds: float) -> bool:
        self._now += int(seconds * 1000)
        return True

    def _run(self) -> None:
        """Step every computation until none reads a record or fires a timer."""
        for _ in range(_MAX_ROUNDS):
            if not sum(r.step(0.0) for r in self._runners if r.running):
                return
        raise ComputationError(
            f"the topology did not settle after {_MAX_ROUNDS} rounds: a computation keeps "
            "setting timers that are already due, or feeds records to itself"
        )

    # -- input --------------------------------------------------------------------------------
    @property
    def now_ms(self) -> int:
        """The virtual clock (epoch milliseconds)."""
        return self._now

    def _stream(self, stream: str) -> str:
        urn = Name.of(stream).urn
        known = set(self.topology.streams())
        known.update(
            Name.of(p.dlq).urn
            for n in self.topology.computation_names()
            if (p := self.settings.policy(n)).dlq is not None
        )
        if urn not in known:
            raise TopologyError(
                f"stream {stream!r} is not part of the topology (its streams: "
                f"{', '.join(sorted(known))})"
            )
        return urn

    def pipe(
        self,
        stream: str,
        key: str,
        data: bytes = b"",
        *,
        timestamp_ms: int | None = None,
        flags: Flag = Flag.DEFAULT,
    ) -> None:
        """Append a record (watermark = `timestamp_ms`, default the virtual clock) and run. The
        watermark is the record's timestamp for the default extractor: piping moves the stream
        time of its task (and fires its stream-time punctuation), `advance_time` does not."""
        watermark = Watermark.of(self._now if timestamp_ms is None else timestamp_ms).value
        self.pipe_record(stream, Record(key, data, watermark, flags))

    def pipe_record(self, stream: str, record: Record) -> None:
        self.pipe_records(stream, [record])

    def pipe_records(self, stream: str, records: list[Record]) -> None:
        """Append records in one batch, then run."""
        self._check_open()
        self._appender(self._stream(stream)).append_batch([(r.key, r) for r in records])
        self._run()

    def advance_time(self, ms: int) -> None:
        """Move the virtual clock forward; due timers (batch thresholds too) fire."""
        self._check_open()
        if ms < 0:
            raise InvalidArgumentError(f"time only moves forward; got {ms} ms")
        self._now += ms
        self._run()

    # -- output -------------------------------------------------------------------------------
    def read_output(self, stream: str) -> list[Record]:
        """Records appended to `stream` since the previous read of it."""
        self._check_open()
        urn = self._stream(stream)
        reader = self._readers.get(urn)
        if reader is None:
            reader = self._readers[urn] = self.manager.tailer(_READER_GROUP, urn, self._codec(urn))
        return [rec.message for rec in reader]

    def read_dlq(self, stream: str) -> list[Record]:
        """Dead-letter records of `stream` since the previous read: the failed records with the
        failure metadata in `trace_context` (see `streamcore.computation.dlq`)."""
        return self.read_output(stream)

    def read_dead_letters(self, stream: str) -> list[DeadLetter]:
        """`read_dlq`, decoded: each failed record with its failure metadata."""
        return [DeadLetter.of(r) for r in self.read_dlq(stream)]

    # -- state --------------------------------------------------------------------------------
    def _runner_of(self, computation: str) -> ComputationRunner:
        for runner in self._runners:
            if runner.name == computation:
                return runner
        raise TopologyError(f"no computation {computation!r} in this topology")

    def stats(self, computation: str) -> UnitStats:
        return self._runner_of(computation).stats

    def get_key_value_store(
        self, computation: str, store: str, task: int = 0
    ) -> KeyValueStore[Any]:
        """The state store `store` of `computation`'s task `task` (Kafka Streams' driver
        `getKeyValueStore`), with the writes of records not checkpointed yet."""
        stores = self._runner_of(computation).stores
        if stores is None:
            raise TopologyError(
                f"computation {computation!r} declares no state store; add stores=[...] to it"
            )
        return stores.store(store, task)

    def is_terminated(self, computation: str) -> bool:
        """True once the computation was terminated by a failure."""
        return self.stats(computation).state == TERMINATED

    def low_watermark(self, computation: str) -> int:
        """The watermark of the oldest record `computation` read and did not commit yet, else of
        the last one it committed (as `StreamProcessor.low_watermark`)."""
        return self._runner_of(computation).low_watermark()

    def lag(self, computation: str) -> LogLag:
        """What the computation has not committed yet, over its input streams."""
        return LogLag.aggregate(
            self.manager.lag(s, computation) for s in self.topology.input_streams(computation)
        )

    def _check_open(self) -> None:
        if self._closed:
            raise ComputationError("the TopologyTestDriver is closed; make a new one")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for runner in self._runners:
            runner.close()
        self.manager.close()

    def __enter__(self) -> TopologyTestDriver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
