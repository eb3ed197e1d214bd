"""`Settings(processing_guarantee="exactly_once")` on Kafka (issue 29 §1): a keyed count whose
outputs, changelog records and input positions are committed in one transaction per checkpoint.
Its output read committed holds each input's result once; a unit whose transactional id another
producer opened (a zombie) commits nothing, stops naming the fix, and its work is redone once by
the next owner. The SIGKILL runs are in tests/faults/test_exactly_once_faults.py."""

from __future__ import annotations

import json
import logging
import time
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import IsolationLevel, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from kafka_broker import scratch_prefix
from log_fixtures import KAFKA_TEST_CONFIG

from streamcore.codecs import get_codec
from streamcore.computation import Processor, Settings, StreamProcessor, Topology
from streamcore.computation.exactly_once import transactional_id
from streamcore.config import LogDefaults, StreamcoreConfig
from streamcore.errors import UnsupportedOperationError
from streamcore.log.config import LogConfig
from streamcore.log.kafka import KafkaLogManager, KafkaTransactions
from streamcore.log.unified import UnifiedLogManager
from streamcore.record import Record

pytestmark = pytest.mark.kafka
IN, OUT, COMPUTATION, STORE = "app/in", "app/out", "app/count", "counts"
CODEC = get_codec("avro")


class CountAndTell(Processor):
    """Counts records per key in `counts` and sends `{"id": input id, "n": the key's count}`."""

    def init(self, context) -> None:
        self.context = context

    def process(self, key, value) -> None:
        store = self.context.get_state_store(STORE)
        count = (store.get(key) or 0) + 1
        store.put(key, count)
        self.context.forward(key, {"id": value["id"], "n": count})


def count_processor(
    manager: KafkaLogManager,
    state: Path,
    instance: str = "test",
    interval: float = 0.0,
    transaction_timeout: float | None = None,
) -> StreamProcessor:
    topology = (
        Topology.builder()
        .add_processor(
            COMPUTATION, CountAndTell, inputs=[IN], outputs=[OUT], codec="json", stores=[STORE]
        )
        .build()
    )
    settings = Settings(
        state_dir=state,
        read_batch=50,
        checkpoint_interval=interval,
        processing_guarantee="exactly_once",
        instance_id=instance,
        checkpoint_pause=0.1,
        transaction_timeout=transaction_timeout,
    )
    settings.set_partitions(IN, 2)
    return StreamProcessor(manager, topology, settings)


def append_inputs(manager: KafkaLogManager, ids: range) -> None:
    if not manager.exists(IN):
        manager.create(IN, 2)
    appender = manager.appender(IN, CODEC)
    appender.append_batch(
        [(f"k{i % 7}", Record(f"k{i % 7}", json.dumps({"id": i}).encode())) for i in ids]
    )


def committed_outputs(manager: KafkaLogManager) -> list[tuple[str, int, int]]:
    """(key, id, n) of every output record a read_committed reader sees, until caught up."""
    tailer = manager.tailer(f"reader{time.monotonic_ns()}", OUT, CODEC)
    try:
        out = []
        for rec in iter(lambda: tailer.read(0), None):
            value = json.loads(rec.message.data)
            out.append((rec.key, value["id"], value["n"]))
        return out
    finally:
        tailer.close()


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not {what} within {timeout:g} s"
        time.sleep(0.05)


@pytest.fixture
def kafka(kafka_bootstrap: str) -> Iterator[KafkaLogManager]:
    manager = KafkaLogManager(
        kafka_bootstrap, topic_prefix=scratch_prefix(), config=KAFKA_TEST_CONFIG, timeout=10.0
    )
    yield manager
    manager.close()


def check_exactly_once(outputs: list[tuple[str, int, int]], ids: range) -> None:
    """Each input id once, and each key's counts 1..n in order: state and outputs agree."""
    assert sorted(i for _, i, _ in outputs) == list(ids)
    per_key: dict[str, list[int]] = {}
    for key, _, n in outputs:
        per_key.setdefault(key, []).append(n)
    for key, counts in per_key.items():
        assert counts == list(range(1, len(counts) + 1)), key


def test_each_result_is_committed_once_with_its_input_positions(
    kafka: KafkaLogManager, tmp_path: Path
) -> None:
    append_inputs(kafka, range(500))
    with count_processor(kafka, tmp_path / "state") as processor:
        assert processor.drain_and_stop(120.0)
        assert processor.unit_stats()[0].checkpoints >= 1
    check_exactly_once(committed_outputs(kafka), range(500))
    assert kafka.lag(IN, COMPUTATION).lag == 0
    # Written in transactions: each commit left a marker after the records.
    assert kafka.end_offsets(OUT)[0] > 500
    # Restarted: the restore reads the committed changelog past its markers, the counts go on.
    append_inputs(kafka, range(500, 600))
    with count_processor(kafka, tmp_path / "state2") as processor:  # no local state: restore
        assert processor.drain_and_stop(120.0)
    check_exactly_once(committed_outputs(kafka), range(600))


def test_a_fenced_zombie_commits_nothing_and_stops_naming_the_fix(
    kafka: KafkaLogManager,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    append_inputs(kafka, range(100))
    zombie = count_processor(kafka, tmp_path / "zombie", instance="a").start()
    usurper: list[KafkaTransactions] = []
    try:
        assert zombie.wait_for_assignments(60.0)
        wait_until(lambda: kafka.lag(IN, COMPUTATION).lag == 0, "caught up")
        commit = KafkaTransactions.commit

        def fenced_commit(self: KafkaTransactions) -> None:
            """Another producer opens the unit's transactional id after the unit appended its
            outputs and changelog records and sent its offsets: the unit is now a zombie."""
            if not usurper:
                usurper.append(kafka.transactions(transactional_id(COMPUTATION, 0, "a")))
            commit(self)

        monkeypatch.setattr(KafkaTransactions, "commit", fenced_commit)
        with caplog.at_level(logging.ERROR, logger="streamcore.computation.exactly_once"):
            append_inputs(kafka, range(100, 200))
            wait_until(lambda: zombie.failed_computations() == [COMPUTATION], "fenced")
        monkeypatch.undo()
        assert "Settings(instance_id=...)" in caplog.text
        assert "fenced" in (zombie.unit_stats()[0].failure or "")
    finally:
        zombie.stop()
        for tx in usurper:
            tx.close()
    # Nothing of the zombie's last checkpoint is visible, nor are its input positions committed.
    check_exactly_once(committed_outputs(kafka), range(100))
    assert kafka.lag(IN, COMPUTATION).lag == 100
    # The next owner processes them once, with the counts the zombie's changelog did not move.
    with count_processor(kafka, tmp_path / "zombie", instance="a") as processor:
        assert processor.drain_and_stop(120.0)
    check_exactly_once(committed_outputs(kafka), range(200))


def test_a_checkpoint_outliving_its_transaction_timeout_is_redone_once(
    kafka: KafkaLogManager,
    kafka_bootstrap: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A checkpoint held past `Settings(transaction_timeout=)`: the broker aborts its
    transaction and fences the producer; the commit raises TransactionTimeoutError, the unit
    opens a new producer of the same id, rewinds and processes the records again, once."""
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})

    def end(isolation: IsolationLevel) -> int:
        topic = kafka.topic(OUT)
        spec = {TopicPartition(topic, p): OffsetSpec.latest() for p in range(kafka.size(OUT))}
        found = admin.list_offsets(spec, isolation_level=isolation, request_timeout=10)
        return sum(f.result(timeout=10).offset for f in found.values())

    append_inputs(kafka, range(200))
    commit = KafkaTransactions.commit
    held: list[str] = []
    released: list[bool] = []

    def open_records() -> bool:
        """Records of a transaction still open in the output (high watermark past the last
        stable offset)."""
        return end(IsolationLevel.READ_UNCOMMITTED) > end(IsolationLevel.READ_COMMITTED)

    def held_commit(self: KafkaTransactions) -> None:
        """The first commit of a transaction with outputs waits until the broker aborted it."""
        if not held and open_records():
            held.append(self.transactional_id)

            def aborted() -> bool:
                self.producer.poll(0.1)  # (the producer learns of the abort from the broker)
                return not open_records()

            # The coordinator aborts expired transactions on its cleanup interval (10 s).
            wait_until(aborted, "the expired transaction aborted by the broker")
            released.append(True)
        commit(self)

    monkeypatch.setattr(KafkaTransactions, "commit", held_commit)
    with caplog.at_level(logging.WARNING, logger="streamcore.computation.exactly_once"):
        processor = count_processor(kafka, tmp_path / "state", transaction_timeout=2.0).start()
        try:
            # Not drain_and_stop yet: it reads the group's offsets, which wait for the end of
            # the held transaction that holds them (KIP-447), past the manager's timeout.
            wait_until(lambda: bool(released), "the held checkpoint released", timeout=90.0)
            assert processor.drain_and_stop(120.0)
            stats = processor.unit_stats()[0]
        finally:
            processor.stop()
        assert not processor.failed_computations()
    assert held == [kafka.topic_prefix + transactional_id(COMPUTATION, 0, "test")]
    assert stats.checkpoint_failures >= 1
    assert "TransactionTimeoutError" in caplog.text
    check_exactly_once(committed_outputs(kafka), range(200))
    assert kafka.lag(IN, COMPUTATION).lag == 0


def test_results_stay_exactly_once_while_tasks_move_between_two_processes(
    kafka: KafkaLogManager, tmp_path: Path
) -> None:
    """Two processors (instances a and b) of one computation: b joins while a works, then a
    leaves; the tasks and their stores move twice (rebalances, restores from the changelog)."""
    append_inputs(kafka, range(400))
    first = count_processor(kafka, tmp_path / "a", instance="a").start()
    second = None
    try:
        wait_until(lambda: kafka.lag(IN, COMPUTATION).lag < 400, "started")
        second = count_processor(kafka, tmp_path / "b", instance="b").start()
        append_inputs(kafka, range(400, 800))
        assert first.stop(60.0)  # its tasks move to b
        append_inputs(kafka, range(800, 1000))
        assert second.drain_and_stop(120.0)
    finally:
        first.stop()
        if second is not None:
            second.stop()
    assert not first.failed_computations() and not second.failed_computations()
    check_exactly_once(committed_outputs(kafka), range(1000))


def unified(home: Path, bootstrap: str, namespace: str) -> UnifiedLogManager:
    """Logs of `namespace` routed to Kafka, the others to the local log (as `streamcore run`
    opens them from the configuration)."""
    text = f"""
[log.configs.default]
type = "local"
[log.configs.kafka]
type = "kafka"
bootstrap_servers = "{bootstrap}"
topic_prefix = "{scratch_prefix()}"
timeout = "10s"
[[log.match]]
namespace = "{namespace}"
config = "kafka"
"""
    config = StreamcoreConfig(home=home, log=LogDefaults(partitions=1), table=tomllib.loads(text))
    return UnifiedLogManager(config, LogConfig.from_settings(config, environ={}))


def test_a_routing_manager_runs_exactly_once_on_its_kafka_backend(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    manager = unified(tmp_path, kafka_bootstrap, "app")
    try:
        kafka = manager.backend_for(IN)
        assert isinstance(kafka, KafkaLogManager)
        append_inputs(kafka, range(200))
        with count_processor(manager, tmp_path / "state") as processor:  # type: ignore[arg-type]
            assert processor.drain_and_stop(120.0)
        check_exactly_once(committed_outputs(kafka), range(200))
    finally:
        manager.close()


def test_a_computation_whose_logs_are_on_two_backends_is_refused(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    manager = unified(tmp_path, kafka_bootstrap, "app")
    try:
        topology = (
            Topology.builder()
            .add_processor("app/echo", CountAndTell, inputs=[IN], outputs=["local/out"])
            .build()
        )
        settings = Settings(processing_guarantee="exactly_once")
        with pytest.raises(UnsupportedOperationError, match="routed to several backends"):
            StreamProcessor(manager, topology, settings)
        local = unified(tmp_path, kafka_bootstrap, "other")  # every log on the local log
        try:
            with pytest.raises(UnsupportedOperationError, match="LocalLogManager has no trans"):
                StreamProcessor(local, topology, settings)
        finally:
            local.close()
    finally:
        manager.close()
