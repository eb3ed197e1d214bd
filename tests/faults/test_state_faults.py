"""State faults: a keyed count in a processor SIGKILLed at random points, 30 times on the local log
(and 12 more with a checkpoint interval, so that a kill drops a whole interval of processed
records) and 10 times on Kafka, with the persistent store, some restarts without the local
stores (full restores from the changelog), then drained: every key's stored count equals the
number of its input records (state exactly-once, docs/state.md "Checkpoints")."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import killed_child
import pytest

from streamcore.codecs import get_codec
from streamcore.computation import Processor, Settings, StreamProcessor, Topology
from streamcore.computation.dsl_values import resolve_value_codec
from streamcore.config import LogDefaults, StreamcoreConfig
from streamcore.log import LogManager
from streamcore.log.local.manager import LocalLogManager
from streamcore.names import Name
from streamcore.record import Record
from streamcore.state.engines import open_engine
from streamcore.state.store import KeyValueStore

IN, COMPUTATION, STORE = "app/in", "app/count", "counts"
PARTITIONS, READ_BATCH = 2, 20
CODEC = get_codec("avro")

CHILD = """
import sys, threading
from streamcore.computation.task_stores import TaskStores
from streamcore.config import LogDefaults, StreamcoreConfig
from streamcore.log import LogManager
from streamcore.log.local.manager import LocalLogManager
sys.path[:0] = [sys.argv[3], sys.argv[3] + "/.."]
from test_state_faults import count_processor

root, state, kafka_prefix, interval = sys.argv[1], sys.argv[2], sys.argv[4], float(sys.argv[5])
checkpoint = TaskStores.checkpoint

def announced(self, positions, journal_tail=None):
    checkpoint(self, positions, journal_tail)
    print("ckpt", flush=True)  # the stores are flushed; the inputs are not committed yet

TaskStores.checkpoint = announced
if kafka_prefix:
    from kafka_broker import ensure_broker
    from log_fixtures import KAFKA_TEST_CONFIG
    from streamcore.log.kafka import KafkaLogManager

    manager = KafkaLogManager(ensure_broker(), topic_prefix=kafka_prefix, config=KAFKA_TEST_CONFIG)
else:
    manager = LocalLogManager(root + "/log", config=StreamcoreConfig(home=root, log=LogDefaults()))
    manager.heartbeat_interval, manager.session_timeout = 0.1, 0.8  # a killed member leaves fast
processor = count_processor(manager, state, announce=True, interval=interval).start()
print("ready", flush=True)
threading.Event().wait()
"""


class Count(Processor):
    """Counts records per key in the store `counts`; with `announce`, prints a line per record
    once its count is written (for the test to kill at)."""

    announce = False

    def init(self, context) -> None:
        self.context = context

    def process(self, key, value) -> None:
        store = self.context.get_state_store(STORE)
        store.put(key, (store.get(key) or 0) + 1)
        if self.announce:
            print("rec", flush=True)


def count_processor(
    manager, state: str | Path, announce: bool = False, interval: float = 0.0
) -> StreamProcessor:
    processor = type("Announced" if announce else "Quiet", (Count,), {"announce": announce})
    topology = (
        Topology.builder()
        .add_processor(COMPUTATION, processor, inputs=[IN], codec="json", stores=[STORE])
        .build()
    )
    settings = Settings(state_dir=state, read_batch=READ_BATCH, checkpoint_interval=interval)
    settings.set_partitions(IN, PARTITIONS)
    return StreamProcessor(manager, topology, settings)


def run_until_killed(
    root: Path, state: Path, kill_at: tuple[str, int], kafka_prefix: str = "", interval: float = 0.0
) -> None:
    """Start the child processor and SIGKILL it at its `n`-th line of `kind` ("rec" or "ckpt")."""
    here = str(Path(__file__).parent)
    killed_child.run_until_killed(
        root, CHILD, [str(root), str(state), here, kafka_prefix, str(interval)], kill_at
    )


def stored_counts(state: Path) -> dict[str, int]:
    codec = resolve_value_codec("json", where="test")
    counts: dict[str, int] = {}
    for task in range(PARTITIONS):
        path = state / Name.of(COMPUTATION).id / str(task) / STORE
        engine = open_engine("rocksdb", path, 5.0)
        try:
            counts.update(KeyValueStore(STORE, engine, codec).all())
        finally:
            engine.close()
    return counts


def kill_trials(
    manager: LogManager, tmp_path: Path, trials: int, kafka_prefix: str = "", interval: float = 0.0
) -> dict[str, int]:
    """Append 100 records, start the child, SIGKILL it at a random record or between a store
    flush and its input commit; `trials` times, the stores deleted before every fourth start.
    With a checkpoint `interval` longer than a trial, the one checkpoint is when the child has
    read everything (so the kill at a checkpoint is at the first). Returns the number of records
    per key."""
    rng = random.Random(27)
    manager.create(IN, PARTITIONS)
    appender = manager.appender(IN, CODEC)
    state = tmp_path / "state"
    expected: dict[str, int] = {}
    for trial in range(trials):
        keys = [f"k{rng.randrange(13)}" for _ in range(100)]
        appender.append_batch([(k, Record(k, b"1")) for k in keys])
        for key in keys:
            expected[key] = expected.get(key, 0) + 1
        if trial % 4 == 3 and state.exists():
            shutil.rmtree(state)  # a new machine: the next start restores from the changelogs
        # A third of the kills fall between the stores' flush and the input commit, where a
        # store holds changes of records that will be delivered again.
        at_checkpoint = 1 if interval else rng.randint(1, 3)
        kill_at = ("ckpt", at_checkpoint) if trial % 3 == 0 else ("rec", rng.randint(1, 90))
        run_until_killed(tmp_path, state, kill_at, kafka_prefix, interval)
    with count_processor(manager, state, interval=interval) as processor:
        assert processor.drain_and_stop(120.0)
    return expected


def test_a_keyed_count_survives_30_kills_without_loss_or_double_count(tmp_path: Path) -> None:
    manager = LocalLogManager(
        tmp_path / "log", config=StreamcoreConfig(home=tmp_path, log=LogDefaults())
    )
    manager.heartbeat_interval, manager.session_timeout = 0.1, 0.8
    expected = kill_trials(manager, tmp_path, 30)
    assert stored_counts(tmp_path / "state") == expected
    manager.close()


def test_a_keyed_count_with_a_checkpoint_interval_survives_12_kills(tmp_path: Path) -> None:
    manager = LocalLogManager(
        tmp_path / "log", config=StreamcoreConfig(home=tmp_path, log=LogDefaults())
    )
    manager.heartbeat_interval, manager.session_timeout = 0.1, 0.8
    expected = kill_trials(manager, tmp_path, 12, interval=3600.0)
    assert stored_counts(tmp_path / "state") == expected
    manager.close()


@pytest.mark.kafka
def test_a_keyed_count_on_kafka_survives_10_kills_without_loss_or_double_count(
    tmp_path: Path,
) -> None:
    from kafka_broker import ensure_broker, scratch_prefix
    from log_fixtures import KAFKA_TEST_CONFIG

    from streamcore.log.kafka import KafkaLogManager

    prefix = scratch_prefix()
    manager = KafkaLogManager(
        ensure_broker(), topic_prefix=prefix, config=KAFKA_TEST_CONFIG, timeout=10.0
    )
    expected = kill_trials(manager, tmp_path, 10, prefix)
    assert stored_counts(tmp_path / "state") == expected
    manager.close()
