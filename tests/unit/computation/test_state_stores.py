"""State stores reached from computations and processors: declared on the topology, one per task,
writes undone with a failed attempt's outputs, checkpointed with the changelog, and restored by
the next processor (docs/state.md). Driver tests run the runner's code with memory stores; the
processor tests run on the memory, local and Kafka logs."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from log_fixtures import make_config
from prometheus_client import generate_latest

from streamcore.codecs import get_codec
from streamcore.computation import (
    Computation,
    ComputationPolicy,
    Processor,
    Settings,
    StreamProcessor,
    Topology,
    TopologyTestDriver,
)
from streamcore.errors import TopologyError
from streamcore.log import LogManager
from streamcore.log.local.manager import LocalLogManager
from streamcore.log.memory import MemoryLogManager
from streamcore.names import Name
from streamcore.record import Record
from streamcore.state.changelog import changelog_name
from streamcore.state.engines import open_engine
from streamcore.state.restore import RestoreSettings, StateRestoreListener
from streamcore.state.spec import StoreSpec

IN, OUT = "app/in", "app/counts"


class Count(Processor):
    """Counts records per key in the store `counts` and forwards the new count."""

    def init(self, context) -> None:
        self.context = context

    def process(self, key, value) -> None:
        store = self.context.get_state_store("counts")
        count = (store.get(key) or 0) + 1
        store.put(key, count)
        self.context.forward(key, count)


def count_topology() -> Topology:
    return (
        Topology.builder()
        .add_processor(
            "app/count", Count, inputs=[IN], outputs=[OUT], codec="json", stores=["counts"]
        )
        .build()
    )


def test_a_processor_counts_per_key_in_its_task_store() -> None:
    settings = Settings().set_partitions(IN, 2)
    with TopologyTestDriver(count_topology(), settings, start_ms=1_000_000) as driver:
        for key in ["a", "b", "a", "c", "a", "b"]:
            driver.pipe(IN, key, b"1")
        counts = {r.key: int(r.data) for r in driver.read_output(OUT)}
        assert counts == {"a": 3, "b": 2, "c": 1}
        stored = {}
        for task in (0, 1):
            stored.update(driver.get_key_value_store("app/count", "counts", task).all())
        assert stored == {"a": 3, "b": 2, "c": 1}
        # Each key lives in the store of the task its partition maps to, and only there.
        in_both = set(dict(driver.get_key_value_store("app/count", "counts", 0).all())) & set(
            dict(driver.get_key_value_store("app/count", "counts", 1).all())
        )
        assert not in_both


def test_every_checkpointed_write_is_in_the_changelog_with_a_tombstone_for_a_delete() -> None:
    class CountThenForget(Count):
        def process(self, key, value) -> None:
            if value == "forget":
                self.context.get_state_store("counts").delete(key)
                return
            super().process(key, value)

    topology = (
        Topology.builder()
        .add_processor(
            "app/count",
            CountThenForget,
            inputs=[IN],
            outputs=[OUT],
            codec="json",
            stores=["counts"],
        )
        .build()
    )
    with TopologyTestDriver(topology, Settings(), start_ms=1_000_000) as driver:
        driver.pipe(IN, "a", b"1")
        driver.pipe(IN, "a", b"1")
        driver.pipe(IN, "b", b"1")
        driver.pipe(IN, "a", b'"forget"')
        assert dict(driver.get_key_value_store("app/count", "counts").all()) == {"b": 1}
        changelog = changelog_name("app/count", "counts")
        assert driver.manager.exists(changelog)
        assert driver.manager.end_offsets(changelog) == [4]


class FailOnce(Computation):
    """Increments the key's count, then fails the first attempt of every record whose data is
    b"fail" (always for b"always")."""

    def __init__(self) -> None:
        super().__init__("app/count", 1, 0)
        self.failed: set[str] = set()

    def process_record(self, context, input_stream, record) -> None:
        store = context.get_state_store("counts")
        store.put(record.key, (store.get(record.key) or 0) + 1)
        if record.data == b"always" or (record.data == b"fail" and record.key not in self.failed):
            self.failed.add(record.key)
            raise ValueError("try again")
        context.ask_for_checkpoint()


def fail_once_driver(policy: ComputationPolicy) -> TopologyTestDriver:
    topology = Topology.builder().add_computation(FailOnce, [f"i1:{IN}"], stores=["counts"]).build()
    return TopologyTestDriver(
        topology, Settings().set_policy("app/count", policy), start_ms=1_000_000
    )


def test_a_retried_record_does_not_count_twice() -> None:
    with fail_once_driver(ComputationPolicy(max_retries=2, delay=0.001, max_delay=0.001)) as driver:
        driver.pipe(IN, "a", b"ok")
        driver.pipe(IN, "a", b"fail")
        assert driver.get_key_value_store("app/count", "counts").get("a") == 2


def test_a_skipped_record_leaves_no_state_behind() -> None:
    policy = ComputationPolicy(
        max_retries=1, delay=0.001, max_delay=0.001, continue_on_failure=True
    )
    with fail_once_driver(policy) as driver:
        driver.pipe(IN, "a", b"ok")
        driver.pipe(IN, "a", b"always")
        driver.pipe(IN, "a", b"ok")
        assert driver.get_key_value_store("app/count", "counts").get("a") == 2


class Punctuating(Processor):
    """Counts, and on punctuation reads every task's store (naming the task)."""

    def init(self, context) -> None:
        self.context = context
        self.seen: dict[int, dict[str, int]] = {}
        context.schedule(1000)

    def process(self, key, value) -> None:
        store = self.context.get_state_store("counts")
        store.put(key, (store.get(key) or 0) + 1)

    def punctuate(self, timestamp) -> None:
        for task in self.context.tasks:
            self.seen[task] = dict(self.context.get_state_store("counts", task=task).all())
        with pytest.raises(TopologyError, match="needs task="):
            self.context.get_state_store("counts")


def test_punctuation_names_the_task_of_the_store_it_reads() -> None:
    made: list[Punctuating] = []

    def make() -> Punctuating:
        made.append(Punctuating())
        return made[-1]

    topology = (
        Topology.builder()
        .add_processor("app/count", make, inputs=[IN], codec="json", stores=["counts"])
        .build()
    )
    settings = Settings().set_partitions(IN, 2)
    with TopologyTestDriver(topology, settings, start_ms=1_000_000) as driver:
        for key in ["a", "b", "c", "d"]:
            driver.pipe(IN, key, b"1")
        driver.advance_time(1000)
        seen = made[-1].seen
        assert sorted(seen) == [0, 1]
        assert {k for task in seen.values() for k in task} == {"a", "b", "c", "d"}


def test_store_declarations_are_checked_when_the_topology_is_built() -> None:
    builder = Topology.builder()
    with pytest.raises(TopologyError, match="declares the state store 'counts' twice"):
        builder.add_processor("app/c", Count, inputs=[IN], stores=["counts", StoreSpec("counts")])
    with pytest.raises(TopologyError, match="is not valid"):
        builder.add_processor("app/c", Count, inputs=[IN], stores=["no/slash"])
    for cache in (-1, 1.5, None):
        with pytest.raises(TopologyError, match="give a number of keys >= 0"):
            StoreSpec("counts", cache=cache)  # type: ignore[arg-type]

    class Source(Computation):
        def __init__(self) -> None:
            super().__init__("app/source", 0, 1)

        def process_record(self, context, input_stream, record) -> None:
            return None

    with pytest.raises(TopologyError, match="no input stream"):
        builder.add_computation(Source, ["o1:app/out"], stores=["counts"])


def test_an_undeclared_store_names_the_declared_ones() -> None:
    class Other(Count):
        def process(self, key, value) -> None:
            self.context.get_state_store("other")

    topology = (
        Topology.builder()
        .add_processor("app/count", Other, inputs=[IN], codec="json", stores=["counts"])
        .build()
    )
    policy = ComputationPolicy(max_retries=0)
    settings = Settings().set_policy("app/count", policy)
    with TopologyTestDriver(topology, settings, start_ms=1_000_000) as driver:
        driver.pipe(IN, "a", b"1")
        assert driver.is_terminated("app/count")
        assert "has no state store 'other' (it declares counts)" in (
            driver.stats("app/count").failure or ""
        )


# -- the threaded processor on every backend ------------------------------------------------------
CODEC = get_codec("avro")


def last_counts(manager: LogManager) -> dict[str, int]:
    """The last count the processors sent for each key (outputs are at-least-once: a key's
    last count is its state's)."""
    reader = manager.tailer("test/reader", OUT, CODEC)
    last: dict[str, int] = {}
    while (record := reader.read(timeout=0.5)) is not None:
        last[record.key] = int(record.message.data)
    reader.close()
    return last


def run_counts(manager: LogManager, settings: Settings, keys: list[str]) -> None:
    if not manager.exists(IN):
        manager.create(IN, 2)
    appender = manager.appender(IN, CODEC)
    appender.append_batch([(key, Record(key, b"1")) for key in keys])
    with StreamProcessor(manager, count_topology(), settings) as processor:
        assert processor.drain_and_stop(60.0)


def test_a_new_processor_restores_the_counts_from_the_changelog(
    manager: LogManager, tmp_path: Path
) -> None:
    # Run 1 keeps its stores in memory, so run 2 (on disk) restores every key from the
    # changelog; run 3 starts from the checkpoint run 2 left in its stores on disk.
    for run, engine in enumerate(["memory", None, None]):
        settings = Settings(state_dir=tmp_path / "state", state_engine=engine)
        settings.set_partitions(IN, 2)
        run_counts(manager, settings, [f"k{i % 7}" for i in range(100 * run, 100 * (run + 1))])
    assert last_counts(manager) == {f"k{i}": len(range(i, 300, 7)) for i in range(7)}


def test_a_computation_reading_streams_of_different_partition_counts_is_refused(
    manager: LogManager,
) -> None:
    """Task p reads partition p of every input: inputs of 4 and 2 partitions cannot form tasks."""
    topology = (
        Topology.builder()
        .add_processor("app/join", Count, inputs=["app/left", "app/right"], stores=["counts"])
        .build()
    )
    settings = Settings().set_partitions("app/left", 4).set_partitions("app/right", 2)
    with pytest.raises(TopologyError, match=r"app/left.*4.*app/right.*2"):
        TopologyTestDriver(topology, settings)
    with pytest.raises(TopologyError, match=r"app/left.*4.*app/right.*2"):
        StreamProcessor(manager, topology, settings).start()
    assert not manager.exists("app/left")  # refused before anything was created


def test_a_store_of_a_computation_without_namespace_is_refused_at_build() -> None:
    with pytest.raises(TopologyError, match="has no namespace"):
        Topology.builder().add_processor("count", Count, inputs=[IN], stores=["counts"])


def test_a_group_behind_the_retention_goes_on_from_the_oldest_record(tmp_path: Path) -> None:
    """Records a forced purge took before the count read them are lost (the log reports them);
    the processor neither stalls nor voids the state it had: it counts what is left."""
    manager = LocalLogManager(tmp_path / "log", config=make_config(tmp_path))
    manager.create(IN, 1, segment_bytes=1024)
    settings = Settings(state_dir=tmp_path / "state").set_partitions(IN, 1)
    run_counts(manager, settings, ["k"] * 50)
    appender = manager.appender(IN, CODEC)
    for _ in range(20):  # batches of 10 records, so segments roll between them
        appender.append_batch([("k", Record("k", b"1")) for _ in range(10)])
    far_future = 2**62 // 1_000_000
    manager.purge(IN, now_ms=far_future, force=True)
    oldest = manager.start_offsets(IN)[0]
    assert oldest > 50  # the group's committed position is below the oldest record now
    listener = RecordingListener()
    with StreamProcessor(manager, count_topology(), settings, restore_listener=listener) as p:
        assert p.drain_and_stop(60.0)
    # The store starts from its own checkpoint, at the changelog's end: nothing voided.
    ((store, start, end),) = listener.starts
    assert store == "counts" and start == end > 0
    engine = open_engine("rocksdb", tmp_path / "state" / "app-count" / "0" / "counts", 5.0)
    try:
        assert engine.get(b"k") == str(50 + 250 - oldest).encode()
    finally:
        engine.close()
    manager.close()


class RecordingListener(StateRestoreListener):
    def __init__(self) -> None:
        self.starts: list[tuple[str, int, int]] = []
        self.ends: list[tuple[str, int]] = []

    def on_restore_start(self, changelog, store, start, end) -> None:
        self.starts.append((store, start, end))

    def on_restore_end(self, changelog, store, total) -> None:
        self.ends.append((store, total))


def test_restores_are_heard_by_the_listener_and_shown_in_the_metrics(tmp_path: Path) -> None:
    manager = MemoryLogManager()
    settings = Settings(state_engine="memory").set_partitions(IN, 2)
    run_counts(manager, settings, [f"k{i % 5}" for i in range(40)])
    listener = RecordingListener()
    with StreamProcessor(manager, count_topology(), settings, restore_listener=listener) as p:
        deadline = time.monotonic() + 30
        while len(listener.ends) < 2:  # both tasks restored (assignments show before that)
            assert time.monotonic() < deadline, f"restores heard: {listener.ends}"
            time.sleep(0.01)
        assert sorted(store for store, _, _ in listener.starts) == ["counts", "counts"]
        changelog = changelog_name("app/count", "counts")
        # Stores in memory: each task restores its whole changelog partition.
        assert sum(total for _, total in listener.ends) == sum(manager.end_offsets(changelog))
        scraped = generate_latest(p.metrics).decode()
        assert (
            'streamcore_computation_restoring{computation="app/count",store="counts",task="0"} 0.0'
            in scraped
        )
        assert "streamcore_computation_restore_remaining" in scraped


def test_a_task_moves_to_a_second_processor_with_its_state(
    manager: LogManager, tmp_path: Path
) -> None:
    """Two processors on two machines (their own state folders): the tasks the second takes over
    are restored from their changelogs, and every key's final count is its number of records."""
    manager.create(IN, 4)
    appender = manager.appender(IN, CODEC)
    keys = [f"k{i % 50}" for i in range(2000)]

    def settings(machine: str) -> Settings:
        return Settings(state_dir=tmp_path / machine, read_batch=50, drain_quiet=0.3)

    appender.append_batch([(k, Record(k, b"1")) for k in keys])
    first = StreamProcessor(manager, count_topology(), settings("one")).start()
    deadline = time.monotonic() + 60
    while first.lag("app/count").lag or not first.is_drained():  # every task has state
        assert time.monotonic() < deadline, "the first processor did not count everything"
        time.sleep(0.01)
    listener = RecordingListener()
    second = StreamProcessor(
        manager, count_topology(), settings("two"), restore_listener=listener
    ).start()
    assert second.wait_for_assignments(30) and first.wait_for_assignments(30)
    appender.append_batch([(k, Record(k, b"1")) for k in keys])
    assert first.drain_and_stop(60) and second.drain_and_stop(60)
    assert sum(s.processed for s in second.unit_stats()) > 0
    assert sum(total for _, total in listener.ends) > 0  # it restored what the first had counted
    assert last_counts(manager) == {f"k{i}": 80 for i in range(50)}


class HoldFirstBatch(RecordingListener):
    """Holds the first restored batch until `until()` is true (bounded), so a rebalance lands in
    the middle of a restore."""

    def __init__(self, until) -> None:
        super().__init__()
        self.until = until
        self.held = False

    def on_batch_restored(self, changelog, store, batch_end, count) -> None:
        if self.held:
            return
        self.held = True
        deadline = time.monotonic() + 30
        while not self.until():
            assert time.monotonic() < deadline, "no rebalance came during the restore"
            time.sleep(0.01)


@pytest.mark.parametrize("backend", ["memory", "local"])
def test_a_rebalance_during_a_restore_abandons_it_and_the_counts_stay_right(
    backend: str, tmp_path: Path
) -> None:
    if backend == "memory":
        manager: LogManager = MemoryLogManager()
    else:
        manager = LocalLogManager(tmp_path / "log", config=make_config(tmp_path))
    manager.heartbeat_interval, manager.session_timeout = 0.1, 0.8
    keys = [f"k{i}" for i in range(2000)]
    run_counts(manager, Settings(state_engine="memory").set_partitions(IN, 2), keys)

    def settings(machine: str) -> Settings:
        return Settings(
            state_dir=tmp_path / machine, restore=RestoreSettings(batch_size=100), drain_quiet=0.3
        ).set_partitions(IN, 2)

    first: StreamProcessor | None = None

    def rebalance_due() -> bool:
        units = [] if first is None else first._all_units()
        return any(u.runner.tailer is not None and u.runner.tailer.rebalance_pending for u in units)

    listener = HoldFirstBatch(rebalance_due)
    first = StreamProcessor(manager, count_topology(), settings("one"), restore_listener=listener)
    first.start()
    deadline = time.monotonic() + 30
    while not listener.held:  # the first is restoring from scratch (a new machine)
        assert time.monotonic() < deadline, "the first processor did not start restoring"
        time.sleep(0.01)
    second = StreamProcessor(manager, count_topology(), settings("two")).start()
    assert first.wait_for_assignments(30) and second.wait_for_assignments(30)
    manager.appender(IN, CODEC).append_batch([(k, Record(k, b"1")) for k in keys])
    assert first.drain_and_stop(60) and second.drain_and_stop(60)
    assert len(listener.starts) > len(listener.ends)  # the held restore was given up
    assert last_counts(manager) == dict.fromkeys(keys, 2)
    manager.close()


class Crash(BaseException):
    """Ends a unit's thread where it is raised, as a kill would end the process: no except
    clause of the runner catches it, nothing more is appended or committed."""


def test_a_crash_between_the_store_flush_and_the_input_commit_counts_once(
    manager: LogManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The in-process counterpart of the fault suite's SIGKILLs, on every backend (the memory log
    dies with its process, so only a thread can crash here): the third checkpoint crashes after
    the stores appended their changelog and flushed, before the inputs are committed. The next
    processor, its stores in memory, restores them from the changelogs, voids what the crash
    left beyond the committed positions, and every key counts once."""
    from streamcore.computation.task_stores import TaskStores

    checkpoint, calls, crashed = TaskStores.checkpoint, [], []

    def crash_on_third(self, positions, journal_tail=None) -> None:
        checkpoint(self, positions, journal_tail)
        calls.append(1)
        if len(calls) == 3:
            raise Crash

    monkeypatch.setattr(TaskStores, "checkpoint", crash_on_third)
    monkeypatch.setattr(threading, "excepthook", lambda args: crashed.append(args.exc_type))
    manager.create(IN, 2)
    keys = [f"k{i % 10}" for i in range(600)]
    manager.appender(IN, CODEC).append_batch([(k, Record(k, b"1")) for k in keys])
    settings = Settings(state_engine="memory", read_batch=50, drain_quiet=0.3)
    crashing = StreamProcessor(manager, count_topology(), settings).start()
    deadline = time.monotonic() + 60
    while not crashing.is_terminated():
        assert time.monotonic() < deadline, "the unit did not crash"
        time.sleep(0.01)
    assert crashed == [Crash]
    assert manager.lag(IN, "app/count").lag > 0  # the crashed checkpoint committed nothing
    monkeypatch.setattr(TaskStores, "checkpoint", checkpoint)
    with StreamProcessor(manager, count_topology(), settings) as processor:
        assert processor.drain_and_stop(60)
    assert last_counts(manager) == {f"k{i}": 60 for i in range(10)}


class CountAskingOnDone(Computation):
    """Counts per key in the store `counts`; asks for a checkpoint only after a record whose data
    is b"done", so a checkpoint can fall in the middle of a read batch."""

    def __init__(self) -> None:
        super().__init__("app/count", 1, 0)

    def process_record(self, context, input_stream, record) -> None:
        store = context.get_state_store("counts")
        store.put(record.key, (store.get(record.key) or 0) + 1)
        if record.data == b"done":
            context.ask_for_checkpoint()


def test_writes_of_records_after_a_mid_batch_checkpoint_wait_for_the_next_one(
    tmp_path: Path,
) -> None:
    """A checkpoint asked for in the middle of a batch commits the records up to the ask; the
    store writes of the records after it must not reach the changelog or the store with it (they
    are delivered again after a stop or crash), else they would count twice."""
    manager = LocalLogManager(tmp_path / "log", config=make_config(tmp_path))
    topology = (
        Topology.builder()
        .add_computation(CountAskingOnDone, [f"i1:{IN}"], stores=["counts"])
        .build()
    )
    settings = Settings(read_batch=100, drain_quiet=0.3, state_dir=tmp_path / "state")
    manager.create(IN, 1)
    appender = manager.appender(IN, CODEC)
    appender.append_batch([("a", Record("a", b"done")), ("b", Record("b", b"hold"))])
    appender.append_batch([("b", Record("b", b"hold")), ("a", Record("a", b"hold"))])
    first = StreamProcessor(manager, topology, settings).start()
    deadline = time.monotonic() + 60
    while manager.lag(IN, "app/count").pos < 1:  # the checkpoint after the first record
        assert time.monotonic() < deadline, "no checkpoint after the record that asked for it"
        time.sleep(0.01)
    first.stop()  # the records after the ask are not committed: they come again
    assert manager.lag(IN, "app/count").pos == 1
    changelog = changelog_name("app/count", "counts")
    with manager.tailer("test/changelog", changelog, None) as tailer:
        assert [rec.key for rec in tailer] == ["a"]  # b's writes waited for their checkpoint
    appender.append_batch([("c", Record("c", b"done"))])
    with StreamProcessor(manager, topology, settings) as second:
        assert second.drain_and_stop(60)
    path = tmp_path / "state" / Name.of("app/count").id / "0" / "counts"
    engine = open_engine("rocksdb", path, 5.0)
    try:
        counts = {key.decode(): int(value) for key, value in engine.items()}
    finally:
        engine.close()
    assert counts == {"a": 2, "b": 2, "c": 1}
    manager.close()
