"""Exactly-once faults (issue 29 §1): a keyed count with `processing_guarantee="exactly_once"` on
Kafka, its child process SIGKILLed 4 times, twice in the middle of a checkpoint's transaction
(outputs and changelog records appended, offsets sent, not committed) and twice at a random
record, once restarted without its local stores (a full restore from the changelog), then
drained: the output read committed holds every input's result exactly once, and each key's
counts run 1, 2, ... n without a gap or a repeat (the restored state is exactly-once too)."""

from __future__ import annotations

import json
import random
import shutil
import time
from pathlib import Path

import killed_child
import pytest

from streamcore.codecs import get_codec
from streamcore.computation import Processor, Settings, StreamProcessor, Topology
from streamcore.log.kafka import KafkaLogManager
from streamcore.record import Record

pytestmark = pytest.mark.kafka
IN, OUT, COMPUTATION, STORE = "app/in", "app/out", "app/count", "counts"
PARTITIONS, READ_BATCH, PER_TRIAL = 2, 20, 100
CODEC = get_codec("avro")

CHILD = """
import sys, threading
sys.path[:0] = [sys.argv[3], sys.argv[3] + "/.."]
from kafka_broker import ensure_broker
from log_fixtures import KAFKA_TEST_CONFIG
from streamcore.log.kafka import KafkaLogManager, KafkaTransactions
from test_exactly_once_faults import count_processor

prefix, state, mode, n = sys.argv[1], sys.argv[2], sys.argv[4], int(sys.argv[5])
commit = KafkaTransactions.commit
commits = 0

def announced(self):
    global commits
    commits += 1
    print("tx", flush=True)  # appended and offsets sent, not committed
    if mode == "tx" and commits == n:
        threading.Event().wait()  # killed here, in the middle of the transaction
    commit(self)

KafkaTransactions.commit = announced
manager = KafkaLogManager(ensure_broker(), topic_prefix=prefix, config=KAFKA_TEST_CONFIG)
processor = count_processor(manager, state, announce=True).start()
threading.Event().wait()
"""


class CountAndTell(Processor):
    """Counts records per key and sends `{"id": input id, "n": the key's count}`; with
    `announce`, prints a line per record (for the test to kill at)."""

    announce = False

    def init(self, context) -> None:
        self.context = context

    def process(self, key, value) -> None:
        store = self.context.get_state_store(STORE)
        count = (store.get(key) or 0) + 1
        store.put(key, count)
        self.context.forward(key, {"id": value["id"], "n": count})
        if self.announce:
            print("rec", flush=True)


def count_processor(manager, state: str | Path, announce: bool = False) -> StreamProcessor:
    processor = type("Announced" if announce else "Quiet", (CountAndTell,), {"announce": announce})
    topology = (
        Topology.builder()
        .add_processor(
            COMPUTATION, processor, inputs=[IN], outputs=[OUT], codec="json", stores=[STORE]
        )
        .build()
    )
    settings = Settings(
        state_dir=state,
        read_batch=READ_BATCH,
        processing_guarantee="exactly_once",
        instance_id="child",  # the same transactional ids after each restart
    )
    settings.set_partitions(IN, PARTITIONS)
    return StreamProcessor(manager, topology, settings)


def committed_outputs(manager: KafkaLogManager) -> list[tuple[str, int, int]]:
    tailer = manager.tailer(f"reader{time.monotonic_ns()}", OUT, CODEC)
    try:
        out = []
        for rec in iter(lambda: tailer.read(0), None):
            value = json.loads(rec.message.data)
            out.append((rec.key, value["id"], value["n"]))
        return out
    finally:
        tailer.close()


def test_every_result_is_committed_once_across_4_kills_mid_transaction_and_mid_batch(
    tmp_path: Path,
) -> None:
    from kafka_broker import ensure_broker, scratch_prefix
    from log_fixtures import KAFKA_TEST_CONFIG

    prefix = scratch_prefix()
    manager = KafkaLogManager(
        ensure_broker(), topic_prefix=prefix, config=KAFKA_TEST_CONFIG, timeout=10.0
    )
    rng = random.Random(29)
    manager.create(IN, PARTITIONS)
    appender = manager.appender(IN, CODEC)
    state = tmp_path / "state"
    expected: dict[str, int] = {}
    here = str(Path(__file__).parent)
    trials = [("tx", 1), ("rec", rng.randint(20, 90)), ("tx", 2), ("rec", rng.randint(20, 90))]
    for trial, (mode, n) in enumerate(trials):
        first = trial * PER_TRIAL
        keys = [f"k{rng.randrange(13)}" for _ in range(PER_TRIAL)]
        appender.append_batch(
            [(k, Record(k, json.dumps({"id": first + i}).encode())) for i, k in enumerate(keys)]
        )
        for key in keys:
            expected[key] = expected.get(key, 0) + 1
        if trial == 2 and state.exists():
            shutil.rmtree(state)  # a new machine: the next start restores from the changelog
        killed_child.run_until_killed(
            tmp_path, CHILD, [prefix, str(state), here, mode, str(n)], (mode, n)
        )
    with count_processor(manager, state) as processor:
        assert processor.drain_and_stop(120.0)
    outputs = committed_outputs(manager)
    assert sorted(i for _, i, _ in outputs) == list(range(len(trials) * PER_TRIAL))
    per_key: dict[str, list[int]] = {}
    for key, _, count in outputs:
        per_key.setdefault(key, []).append(count)
    assert {k: len(v) for k, v in per_key.items()} == expected
    for key, counts in per_key.items():
        assert counts == list(range(1, expected[key] + 1)), key
    manager.close()
