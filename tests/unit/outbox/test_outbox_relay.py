"""The relay from an outbox queue to a streamcore log (local and memory backends here; Kafka
with a broker restart in tests/integration/test_outbox_relay_kafka.py)."""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

import pytest

from streamcore.codecs import get_codec
from streamcore.config import LogDefaults, StreamcoreConfig
from streamcore.log import LogManager
from streamcore.log.local.manager import LocalLogManager
from streamcore.log.memory import MemoryLogManager
from streamcore.log.partitioner import partition_for_key
from streamcore.outbox import ERROR, VirtualQueue, put, put_many, relay
from streamcore.record import Record

AUDIT = {
    "type": "record",
    "name": "Audit",
    "namespace": "test.outbox",
    "fields": [{"name": "doc", "type": "string"}, {"name": "n", "type": "int"}],
}


def read_all(manager: LogManager, stream: str, expected: int) -> list[tuple[str, Record]]:
    tailer = manager.tailer("test/reader", stream, get_codec("avro"))
    out: list[tuple[str, Record]] = []
    deadline = time.monotonic() + 20
    while len(out) < expected and time.monotonic() < deadline:
        out.extend((r.key, r.message) for r in tailer.read_batch(1000, timeout=0.2))
    tailer.close()
    return out


@pytest.fixture(params=["local", "memory"])
def log_manager(request, tmp_path):
    if request.param == "memory":
        manager: LogManager = MemoryLogManager()
    else:
        config = StreamcoreConfig(home=tmp_path, log=LogDefaults(fsync="always"))
        manager = LocalLogManager(tmp_path / "log", config=config)
    yield manager
    manager.close()


def test_relay_appends_payloads_in_order_per_key(make_outbox, registry, log_manager):
    relay(
        "audit",
        "audit/entries",
        manager=log_manager,
        key="doc",
        codec="avro",
        schema=AUDIT,
        partitions=2,
        registry=registry,
    )
    outbox = make_outbox(workers=4)
    payloads = [{"doc": f"d{n % 3}", "n": n} for n in range(60)]
    with outbox:
        with outbox.engine.begin() as conn:
            put_many(conn, "audit", payloads[:30], registry=registry)
        with outbox.engine.begin() as conn:
            for payload in payloads[30:]:
                put(conn, "audit", payload, registry=registry)
        records = read_all(log_manager, "audit/entries", 60)
    codec = get_codec("avro", AUDIT)
    per_key: dict[str, list[int]] = defaultdict(list)
    for key, record in records:
        datum = codec.decode(record.data)
        assert record.key == key == datum["doc"]
        per_key[key].append(datum["n"])
    assert len(records) == 60
    assert dict(per_key) == {f"d{k}": list(range(k, 60, 3)) for k in range(3)}
    assert outbox.queue_stats()[0]["done"] == 60


def test_a_failed_append_is_retried_and_nothing_overtakes_it(make_outbox, registry, log_manager):
    failures = {5}

    def message(key: str, payload: dict) -> Record:
        if payload["n"] in failures:
            failures.discard(payload["n"])
            raise ConnectionError("log unavailable")
        return Record.of(key, str(payload["n"]).encode())

    relay(
        "events",
        "app/events",
        manager=log_manager,
        key=lambda p: "k",
        message=message,
        log_codec=get_codec("avro"),
        error_backoff=0.3,
        registry=registry,
    )
    outbox = make_outbox(workers=3, batch_size=4)
    with outbox:
        with outbox.engine.begin() as conn:
            put_many(conn, "events", [{"n": n} for n in range(12)], registry=registry)
        records = read_all(log_manager, "app/events", 12)
    assert [int(r.data) for _, r in records] == list(range(12))
    [stats] = outbox.retry_stats()
    assert stats["retried_jobs"] == 1


def test_relay_in_the_virtual_queue(make_outbox, registry, log_manager):
    relay("audit", "audit/entries", manager=log_manager, registry=registry)
    outbox = make_outbox()
    with outbox.engine.begin() as conn:
        put(conn, "audit", {"what": "login"}, registry=registry)
    offset = VirtualQueue(outbox).consume_one("audit")
    assert offset.startswith("audit-entries-") and offset.endswith(":+0")
    [(key, record)] = read_all(log_manager, "audit/entries", 1)
    assert (key, record.data) == ("audit", b'{"what":"login"}')
    assert not [s for s in outbox.queue_stats() if s[ERROR]]


class OptionsSpy:
    """A log manager whose appenders record the options of each `append_batch`."""

    def __init__(self, manager: LogManager) -> None:
        self.manager = manager
        self.options: list[dict] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.manager, name)

    def appender(self, name: str, codec: Any = None) -> Any:
        real = self.manager.appender(name, codec)
        spy = self

        class Appender:
            def __getattr__(self, attribute: str) -> Any:
                return getattr(real, attribute)

            def append_batch(self, items: Any, **options: Any) -> Any:
                spy.options.append(options)
                return real.append_batch(items, **options)

        return Appender()


@pytest.mark.parametrize("partitions", [1, 2])
def test_a_batch_relay_appends_to_the_partition_of_each_key(
    make_outbox, registry, log_manager, partitions
):
    spy = OptionsSpy(log_manager)
    relay(
        "events",
        "app/events",
        manager=spy,
        key="doc",
        partitions=partitions,
        batch_capacity=6,
        registry=registry,
    )
    outbox = make_outbox(workers=1)
    with outbox.engine.begin() as conn:
        put_many(conn, "events", [{"doc": f"d{n}"} for n in range(6)], registry=registry)
    VirtualQueue(outbox).consume_one("events")
    tailer = log_manager.tailer("test/reader", "app/events", get_codec("avro"))
    records = []
    deadline = time.monotonic() + 20
    while len(records) < 6 and time.monotonic() < deadline:
        records.extend(tailer.read_batch(100, timeout=0.2))
    tailer.close()
    assert sorted(r.key for r in records) == [f"d{n}" for n in range(6)]
    for record in records:
        assert record.partition.partition == partition_for_key(record.key, partitions)
    # One partition: the appender is told it, and hashes no key.
    assert spy.options == [{"partition": 0 if partitions == 1 else None}]
