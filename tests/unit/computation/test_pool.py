"""Pool worker allocation (streamcore.computation.pool; docs/operating.md, "Pool worker
allocation"): per-key order without concurrency of a key, the contiguous-prefix commit, the
policies per record, the bounded handover and the refusals, on the memory, local and Kafka logs."""

from __future__ import annotations

import json
import random
import threading
from collections import defaultdict
from pathlib import Path

import pytest
from audit_support import wait_until

from streamcore.codecs import get_codec
from streamcore.computation import (
    BatchComputation,
    Computation,
    ComputationPolicy,
    DeadLetter,
    Settings,
    StreamProcessor,
    Topology,
)
from streamcore.computation.declared import declared_processors
from streamcore.computation.pool import KeyQueue, PoolMember, PrefixTracker
from streamcore.config import load_config
from streamcore.errors import ConfigError, TopologyError
from streamcore.log import LogManager, LogPartition, LogRecord
from streamcore.log.memory import MemoryLogManager
from streamcore.names import Name
from streamcore.record import Flag, Record

CODEC = get_codec("avro")
WAIT = 60.0
FAST = dict(delay=0.001, max_delay=0.002)


class Journal:
    """What the workers did, shared by every worker's computation instance (under a lock)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.in_flight: set[str] = set()
        self.most_in_flight = 0
        self.overlaps: list[str] = []  # keys seen running twice at once
        self.seen: dict[str, list[int]] = defaultdict(list)
        self.order: list[str] = []
        self.block: dict[str, threading.Event] = {}  # key -> released when set
        self.fail: set[str] = set()  # keys whose record raises
        self.entered: set[str] = set()


class Worker(Computation):
    """Records what runs when; waits a little (an I/O-like wait) or on an Event; may fail."""

    def __init__(self, journal: Journal, name: str = "pooled") -> None:
        super().__init__(name, 1, 1)
        self.journal = journal

    def process_record(self, context, input_stream, record) -> None:
        journal = self.journal
        key = record.key
        with journal.lock:
            if key in journal.in_flight:
                journal.overlaps.append(key)
            journal.in_flight.add(key)
            journal.most_in_flight = max(journal.most_in_flight, len(journal.in_flight))
            journal.entered.add(key)
        try:
            gate = journal.block.get(key)
            if gate is not None:
                gate.wait(WAIT)
            else:
                threading.Event().wait(random.random() * 0.002)
            if key in journal.fail or record.data == b"bad":
                raise ValueError(f"cannot process {key}")
            with journal.lock:
                journal.seen[key].append(int(record.data))
                journal.order.append(key)
        finally:
            with journal.lock:
                journal.in_flight.discard(key)
        context.produce_record("o1", record)
        context.ask_for_checkpoint()


def topology(journal: Journal, name: str = "pooled") -> Topology:
    return (
        Topology.builder()
        .add_computation(lambda: Worker(journal, name), ["i1:app/in", "o1:app/out"])
        .build()
    )


def pooled(workers: int = 4, **settings) -> Settings:
    settings.setdefault("drain_quiet", 0.3)
    return Settings(default_concurrency=workers, **settings).set_worker_allocation(
        "default", "pool"
    )


def feed(manager: LogManager, items: list[tuple[str, int]], partitions: int) -> None:
    if not manager.exists("app/in"):
        manager.create("app/in", partitions)
    manager.appender("app/in", CODEC).append_batch(
        [(key, Record.of(key, b"%d" % seq)) for key, seq in items]
    )


def read_all(manager: LogManager, stream: str) -> list[Record]:
    with manager.tailer("test/reader", stream, CODEC) as tailer:
        return [rec.message for rec in tailer]


def test_records_of_a_key_run_in_order_and_never_at_once(manager: LogManager) -> None:
    keys = [f"key-{k}" for k in range(40)]
    items = [(key, seq) for seq in range(12) for key in keys]
    feed(manager, items, 2)
    journal = Journal()
    processor = StreamProcessor(manager, topology(journal), pooled(4)).start()
    assert processor.wait_for_assignments(WAIT)
    assert processor.drain_and_stop(WAIT)
    assert journal.overlaps == []
    assert journal.most_in_flight > 1  # the workers did share the partitions
    assert {key: journal.seen[key] for key in keys} == {key: list(range(12)) for key in keys}
    assert processor.lag("pooled").lag == 0
    assert len(read_all(manager, "app/out")) == len(items)
    stats = processor.unit_stats("pooled")
    assert len(stats) == 4 and sum(s.processed for s in stats) == len(items)


def test_a_slow_record_holds_back_its_partition_commit_and_nothing_after_it_is_lost(
    manager: LogManager,
) -> None:
    feed(manager, [(f"k{i}", i) for i in range(20)], 1)
    journal = Journal()
    journal.block["k3"] = gate = threading.Event()
    journal.fail.add("k3")  # once released, it fails: the computation terminates without it
    settings = pooled(3).set_policy("pooled", ComputationPolicy.NONE)
    processor = StreamProcessor(manager, topology(journal), settings).start()
    wait_until(lambda: len(journal.order) == 19, WAIT, "every record but the slow one")
    wait_until(
        lambda: manager.committed("app/in", "pooled") == [3], WAIT, "the commit before the hole"
    )
    assert "k3" in journal.entered and journal.seen.get("k3") is None
    gate.set()
    wait_until(lambda: processor.failed_computations() == ["pooled"], WAIT, "the termination")
    assert processor.stop(WAIT)
    assert manager.committed("app/in", "pooled") == [3]  # never past the failed record

    again = Journal()
    restarted = StreamProcessor(manager, topology(again), pooled(3)).start()
    assert restarted.drain_and_stop(WAIT)
    # Everything from the hole on is delivered again (k4..k19 a second time: at-least-once).
    assert sorted(again.order, key=lambda k: int(k[1:])) == [f"k{i}" for i in range(3, 20)]
    assert manager.committed("app/in", "pooled") == [20]


def test_policies_apply_per_record_retry_then_dead_letter(manager: LogManager) -> None:
    items = [(f"k{i % 7}", i) for i in range(60)]
    feed(manager, items, 2)
    manager.appender("app/in", CODEC).append_batch(
        [("k1", Record.of("k1", b"bad")), ("k5", Record.of("k5", b"bad"))]
    )
    journal = Journal()
    settings = pooled(3).set_policy(
        "pooled", ComputationPolicy(max_retries=2, dlq="app/dlq-pooled", **FAST)
    )
    processor = StreamProcessor(manager, topology(journal), settings).start()
    assert processor.drain_and_stop(WAIT)
    letters = sorted(
        (d.record.key, d.attempts) for d in map(DeadLetter.of, read_all(manager, "app/dlq-pooled"))
    )
    assert letters == [("k1", 3), ("k5", 3)]
    stats = processor.unit_stats("pooled")
    assert sum(s.retried for s in stats) == 4 and sum(s.dead_lettered for s in stats) == 2
    assert sum(len(v) for v in journal.seen.values()) == 60
    assert processor.lag("pooled").lag == 0


def test_a_poison_pill_stops_every_worker(manager: LogManager) -> None:
    feed(manager, [(f"k{i}", i) for i in range(10)], 1)
    manager.appender("app/in", CODEC).append_batch(
        [
            ("pill", Record("pill", b"0", flags=Flag.POISON_PILL)),
            ("after", Record.of("after", b"1")),
        ]
    )
    journal = Journal()
    processor = StreamProcessor(manager, topology(journal), pooled(3)).start()
    wait_until(processor.is_terminated, WAIT, "every worker to stop")
    assert processor.failed_computations() == [] and "pill" in journal.order
    committed = manager.committed("app/in", "pooled")[0] or 0
    assert committed <= 12  # the prefix: never past a record not processed
    processed = {int(d) for key, values in journal.seen.items() for d in values if key != "after"}
    assert set(range(min(committed, 10))) <= processed
    assert processor.stop(WAIT)


def test_a_revoked_partition_waits_for_its_records_in_flight_then_moves(
    manager: LogManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pool member with a record in flight on each partition while a second member joins:
    the handover waits (within rebalance_wait, 300 s here) for the records in flight on what it
    gives up, commits them, and the joiner reads from there: each record is delivered once."""
    revoking = threading.Event()
    original = PoolMember.on_revoked

    def on_revoked(self, tailer, partitions) -> None:
        revoking.set()
        original(self, tailer, partitions)

    monkeypatch.setattr(PoolMember, "on_revoked", on_revoked)
    manager.create("app/in", 2)
    appender = manager.appender("app/in", CODEC)
    appender.append_batch([("a0", Record.of("a0", b"0"))], partition=0)
    appender.append_batch([("b0", Record.of("b0", b"0"))], partition=1)
    journal = Journal()
    gates = {key: threading.Event() for key in ("a0", "b0")}
    journal.block.update(gates)
    first = StreamProcessor(manager, topology(journal), pooled(2)).start()
    wait_until(lambda: journal.entered == {"a0", "b0"}, WAIT, "both records in flight")
    second_journal = Journal()
    second = StreamProcessor(manager, topology(second_journal), pooled(2)).start()
    wait_until(revoking.is_set, WAIT, "the revoke")
    assert manager.committed("app/in", "pooled") == [None, None]  # the handover waits
    for gate in gates.values():
        gate.set()
    assert second.wait_for_assignments(WAIT) and first.wait_for_assignments(WAIT)
    wait_until(lambda: manager.committed("app/in", "pooled") == [1, 1], WAIT, "the handover")
    for partition, key in ((0, "a1"), (1, "b1")):
        appender.append_batch([(key, Record.of(key, b"1"))], partition=partition)
    wait_until(
        lambda: sorted(journal.order + second_journal.order) == ["a0", "a1", "b0", "b1"],
        WAIT,
        "one delivery of each record",
    )
    assert first.stop(WAIT) and second.stop(WAIT)
    assert len(second_journal.order) == 1  # the joiner took one partition, after its commit


class Ticking(Computation):
    """Sets a wall-clock timer at init; its timer produces a record and asks for a checkpoint."""

    def __init__(self) -> None:
        super().__init__("ticking", 1, 1)

    def init(self, context) -> None:
        context.set_timer("tick", context.now_ms())

    def process_record(self, context, input_stream, record) -> None:
        context.ask_for_checkpoint()

    def process_timer(self, context, key, timestamp_ms) -> None:
        context.produce_record("o1", "tick", b"")
        context.ask_for_checkpoint()


def test_wall_clock_timers_run_on_the_worker_that_set_them() -> None:
    manager = MemoryLogManager()
    manager.create("app/in", 1)
    ticking = Topology.builder().add_computation(Ticking, ["i1:app/in", "o1:app/ticks"]).build()
    processor = StreamProcessor(manager, ticking, pooled(3)).start()
    wait_until(
        lambda: manager.exists("app/ticks") and manager.end_offsets("app/ticks") == [3],
        WAIT,
        "one tick per worker",
    )
    assert processor.stop(WAIT)
    manager.close()


class Counted(Computation):
    def __init__(self) -> None:
        super().__init__("test/counted", 1, 0)

    def process_record(self, context, input_stream, record) -> None:
        context.get_state_store("counts")


class Timed(Computation):
    def __init__(self) -> None:
        super().__init__("timed", 1, 0)

    def process_record(self, context, input_stream, record) -> None:
        context.set_stream_timer("tick", 0)


class Batched(BatchComputation):
    def __init__(self) -> None:
        super().__init__("batched", 1, 0)

    def batch_process(self, context, input_stream, records) -> None:
        pass


def test_pool_allocation_is_refused_where_it_needs_one_owner_per_partition() -> None:
    manager = MemoryLogManager()
    stateful = Topology.builder().add_computation(Counted, ["i1:app/in"], stores=["counts"]).build()
    with pytest.raises(TopologyError) as caught:
        StreamProcessor(manager, stateful, pooled())
    message = str(caught.value)
    assert "computation 'test/counted': worker_allocation \"pool\" is for stateless" in message
    assert "state stores (counts)" in message and 'use worker_allocation "static"' in message
    plain = topology(Journal())
    with pytest.raises(TopologyError, match='processing_guarantee is "exactly_once"'):
        StreamProcessor(manager, plain, pooled(processing_guarantee="exactly_once"))
    batched = Topology.builder().add_computation(Batched, ["i1:app/in"]).build()
    settings = pooled().set_policy("batched", ComputationPolicy(batch_capacity=10))
    with pytest.raises(TopologyError, match="batches records"):
        StreamProcessor(manager, batched, settings)
    with pytest.raises(TopologyError) as wrong:
        Settings().set_worker_allocation("x", "shared")
    assert "worker_allocation of x must be one of static, pool, got 'shared'" in str(wrong.value)
    assert Settings().worker_allocation("x") == "static"  # the default, today's behaviour


def test_a_stream_time_timer_stops_a_pooled_computation_naming_the_fix() -> None:
    manager = MemoryLogManager()
    manager.create("app/in", 1)
    manager.appender("app/in", CODEC).append_batch([("k", Record.of("k", b"1"))])
    timed = Topology.builder().add_computation(Timed, ["i1:app/in"]).build()
    processor = StreamProcessor(manager, timed, pooled(2)).start()
    wait_until(lambda: processor.failed_computations() == ["timed"], WAIT, "the refusal")
    assert processor.stop(WAIT)
    failure = next(s.failure for s in processor.unit_stats("timed") if s.failure)
    assert "stream-time timer" in failure and 'worker_allocation "static"' in failure
    assert manager.committed("app/in", "timed") == [None]


def _part(partition: int) -> LogPartition:
    return LogPartition(Name.of("app/in"), partition)


def test_the_prefix_tracker_commits_only_the_contiguous_processed_prefix() -> None:
    tracker = PrefixTracker()
    p0, p1 = _part(0), _part(1)
    slots = {o: tracker.add(p0, o) for o in (10, 11, 13, 14)}  # 12: a gap (compacted away)
    other = tracker.add(p1, 0)
    for offset in (11, 13):
        tracker.done(slots[offset], offset)
    assert tracker.positions() == {} and tracker.pending == 5
    tracker.done(slots[10], 10)
    assert tracker.positions() == {p0: 14}  # 10, 11, 13 done; 14 still running
    tracker.committed({p0: 14})
    assert tracker.positions() == {}
    tracker.drop([p1])
    tracker.done(other, 0)  # finished after its partition was given up: commits nothing
    assert tracker.positions([p1]) == {} and tracker.pending == 1


def test_the_key_queue_hands_a_key_to_one_worker_at_a_time() -> None:
    queue, tracker = KeyQueue(), PrefixTracker()
    p0 = _part(0)

    def rec(key: str, offset: int) -> tuple[LogRecord[bytes], object]:
        return LogRecord(b"", p0, offset, 0, key), tracker.add(p0, offset)

    queue.put([rec("a", 0), rec("b", 1), rec("a", 2)])
    first = queue.take(0)
    second = queue.take(0)
    assert first is not None and second is not None
    assert (first[0], [r.offset for r, _ in first[1]]) == ("a", [0, 2])
    assert second[0] == "b" and queue.take(0) is None
    queue.put([rec("a", 3)])
    assert queue.take(0) is None  # "a" is in flight: its next record waits
    assert queue.running([p0]) == 3
    queue.finish(*first)
    third = queue.take(0)
    assert third is not None and [r.offset for r, _ in third[1]] == [3]
    queue.put([rec("c", 4)])
    queue.drop({p0})
    assert queue.take(0) is None and queue.size == 0


CLI_APP = """
from streamcore.computation import Computation, Settings, Topology

class Upper(Computation):
    def __init__(self):
        super().__init__("upper", 1, 1)

    def process_record(self, context, input_stream, record):
        context.produce_record("o1", record.key, record.data.upper())
        context.ask_for_checkpoint()

def flow():
    topology = Topology.builder().add_computation(Upper, ["i1:cli/in", "o1:cli/out"]).build()
    return topology, Settings(drain_quiet=0.2)
"""


def test_worker_allocation_from_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from streamcore.cli.main import main
    from streamcore.log import open_log_manager

    (tmp_path / "pool_cli_app.py").write_text(CLI_APP)
    with open_log_manager() as manager:
        manager.create("cli/in", 2)
        manager.appender("cli/in", CODEC).append_batch(
            [(f"k{i % 5}", Record.of(f"k{i % 5}", b"v")) for i in range(30)]
        )
    argv = ["run", "pool_cli_app:flow", "--app-dir", str(tmp_path), "--drain", "--timeout", "60"]
    assert main([*argv, "--worker-allocation", "upper=shared"]) == 2
    assert "--worker-allocation 'upper=shared': worker_allocation of upper must be one of " in (
        capsys.readouterr().err
    )
    assert main([*argv, "--json", "--concurrency", "3", "--worker-allocation", "pool"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["computations"]
    assert (row["units"], row["processed"], row["lag"]) == (3, 30, 0)


def test_worker_allocation_declared_for_a_processor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "streamcore.toml"
    path.write_text(
        '[processors.tagger]\ntopology = "app:flow"\nworker_allocation = "pool"\n'
        '[processors.other]\ntopology = "app:flow"\n'
    )
    declared = declared_processors(load_config(path))
    assert declared["tagger"].worker_allocation == "pool"
    assert declared["other"].worker_allocation is None  # the factory's settings decide
    monkeypatch.setenv("STREAMCORE_PROCESSORS_OTHER_WORKER_ALLOCATION", "pool")
    assert declared_processors(load_config(path))["other"].worker_allocation == "pool"
    path.write_text('[processors.tagger]\ntopology = "app:flow"\nworker_allocation = "shared"\n')
    with pytest.raises(ConfigError) as caught:
        declared_processors(load_config(path))
    assert str(caught.value) == (
        "processors.tagger.worker_allocation must be one of static, pool, got 'shared'"
    )
