"""The relay to Kafka loses nothing and keeps the order per key while its broker restarts.

The broker is a private one (scripts/kafka.sh on free ports with its own data folder) so the
shared broker on 9092 is never stopped. Delivery is at-least-once: a record whose delivery
report was lost in the restart may be appended twice; the test checks that every job's record
is there and that first occurrences keep the put order within each key.
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamcore.codecs import JsonCodec, get_codec
from streamcore.log.kafka.manager import KafkaLogManager
from streamcore.outbox import put, relay

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
KAFKA = ROOT / "scripts" / "kafka.sh"
JOBS = 300
KEYS = 5


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivateBroker:
    def __init__(self, home: Path) -> None:
        self.env = {
            **os.environ,
            "STREAMCORE_KAFKA_PORT": str(free_port()),
            "STREAMCORE_KAFKA_CONTROLLER_PORT": str(free_port()),
            "STREAMCORE_KAFKA_SASL_PORT": str(free_port()),
            "STREAMCORE_KAFKA_HOME": str(home),
            "STREAMCORE_KAFKA_START_TIMEOUT": "120",  # a loaded CI machine starts it slowly
        }
        self.address = f"127.0.0.1:{self.env['STREAMCORE_KAFKA_PORT']}"

    def run(self, command: str) -> None:
        result = subprocess.run(
            [str(KAFKA), command], env=self.env, capture_output=True, text=True, timeout=180
        )
        assert result.returncode == 0, f"kafka.sh {command} failed:\n{result.stdout}{result.stderr}"


@pytest.fixture(scope="module")
def private_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateBroker]:
    broker = PrivateBroker(tmp_path_factory.mktemp("kafka"))
    broker.run("start")
    try:
        yield broker
    finally:
        broker.run("stop")


def test_relay_to_kafka_survives_a_broker_restart(private_broker, make_outbox, registry):
    manager = KafkaLogManager(
        private_broker.address, topic_prefix=f"sctest-{uuid.uuid4().hex[:8]}-", timeout=3.0
    )
    relay(
        "audit",
        "audit/entries",
        manager=manager,
        key="doc",
        partitions=2,
        error_backoff=0.5,
        registry=registry,
    )
    outbox = make_outbox(poll_interval=0.2)
    put_done = threading.Event()

    def producer() -> None:
        for n in range(JOBS):
            with outbox.engine.begin() as conn:
                put(conn, "audit", {"doc": f"d{n % KEYS}", "n": n}, registry=registry)
            time.sleep(0.01)
        put_done.set()

    def done_jobs() -> int:
        return sum(s["done"] for s in outbox.queue_stats())

    with outbox:
        thread = threading.Thread(target=producer)
        thread.start()
        deadline = time.monotonic() + 60
        while done_jobs() < 50:
            assert time.monotonic() < deadline, "the relay did not start"
            time.sleep(0.05)
        private_broker.run("stop")
        deadline = time.monotonic() + 30
        while not (errors := outbox.get_errors("audit")):  # appends time out: the job errors
            assert time.monotonic() < deadline, "no append failed while the broker was down"
            time.sleep(0.1)
        assert errors[0].error_type == "BrokerUnavailableError"
        time.sleep(2.0)  # a few failing retries
        assert done_jobs() < JOBS
        private_broker.run("start")
        thread.join(120)
        assert put_done.is_set()
        deadline = time.monotonic() + 120
        while done_jobs() < JOBS:
            assert time.monotonic() < deadline, f"only {done_jobs()} of {JOBS} relayed"
            time.sleep(0.1)

    tailer = manager.tailer("test/reader", "audit/entries", get_codec("avro"))
    json_codec = JsonCodec()
    seen: dict[int, int] = {}
    per_key: dict[str, list[int]] = defaultdict(list)
    deadline = time.monotonic() + 60
    while len(seen) < JOBS and time.monotonic() < deadline:
        for record in tailer.read_batch(1000, timeout=0.5):
            payload = json_codec.decode(record.message.data)
            n = payload["n"]
            assert record.key == payload["doc"]
            if n not in seen:
                per_key[record.key].append(n)
            seen[n] = seen.get(n, 0) + 1
    tailer.close()
    manager.close()
    assert sorted(seen) == list(range(JOBS)), f"missing: {sorted(set(range(JOBS)) - set(seen))}"
    for key, numbers in per_key.items():
        assert numbers == sorted(numbers), f"order of {key} broken: {numbers}"
