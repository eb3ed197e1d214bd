"""Kafka transactions (issue 29 §1, the log layer): `KafkaLogManager.transactions(id)` commits
appends to several logs and a group's input positions as one unit; read_committed readers see
a transaction's records only once it commits, never an aborted one's; a zombie (a producer
whose transactional id another one opened since) can commit nothing."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from kafka_broker import scratch_prefix

from streamcore.errors import (
    InvalidArgumentError,
    LogError,
    ProducerFencedError,
    TransactionTimeoutError,
)
from streamcore.log import LogPartition
from streamcore.log.capabilities import Transactional, transactions_of
from streamcore.log.kafka import KafkaLogManager

pytestmark = pytest.mark.kafka
FAST = {"fetch.wait.max.ms": 50}


@pytest.fixture
def prefix() -> str:
    return scratch_prefix()


@pytest.fixture
def kafka(kafka_bootstrap: str, prefix: str) -> Iterator[KafkaLogManager]:
    manager = KafkaLogManager(kafka_bootstrap, topic_prefix=prefix, config=FAST, timeout=10.0)
    yield manager
    manager.close()


@pytest.fixture
def uncommitted(kafka_bootstrap: str, prefix: str) -> Iterator[KafkaLogManager]:
    """A manager of the same topics whose readers read uncommitted (aborted records too)."""
    config = {**FAST, "isolation.level": "read_uncommitted"}
    manager = KafkaLogManager(kafka_bootstrap, topic_prefix=prefix, config=config, timeout=10.0)
    yield manager
    manager.close()


def read_all(manager: KafkaLogManager, group: str, name: str) -> list[bytes]:
    """Every record of a one-partition log a new reader sees, read until it is caught up."""
    tailer = manager.tailer(group, name)
    try:
        return [r.message for r in iter(lambda: tailer.read(0), None)]
    finally:
        tailer.close()


def test_a_committed_transaction_shows_its_records_in_every_log_at_once(
    kafka: KafkaLogManager,
) -> None:
    kafka.create("test/out", 1)
    kafka.create("test/changelog", 1)
    assert isinstance(kafka, Transactional) and transactions_of(kafka) is kafka
    tx = kafka.transactions("g/0")
    tx.begin()
    offsets = tx.appender("test/out").append_batch([("k", b"a"), ("k", b"b")])
    tx.appender("test/changelog").append("k", b"state")
    assert [o.offset for o in offsets] == [0, 1]  # delivered, but not visible yet:
    assert kafka.end_offsets("test/out") == [0]  # the last stable offset stops before them
    tx.commit()
    assert read_all(kafka, "reader", "test/out") == [b"a", b"b"]
    assert read_all(kafka, "reader", "test/changelog") == [b"state"]
    assert kafka.end_offsets("test/out") == [3]  # the two records and the commit marker


def test_an_aborted_transaction_is_invisible_to_read_committed_only(
    kafka: KafkaLogManager, uncommitted: KafkaLogManager
) -> None:
    kafka.create("test/out", 1)
    tx = kafka.transactions("g/0")
    with tx.transaction():
        tx.appender("test/out").append("k", b"kept")
    with pytest.raises(RuntimeError), tx.transaction():
        tx.appender("test/out").append_batch([("k", b"dropped-1"), ("k", b"dropped-2")])
        raise RuntimeError("the checkpoint failed")
    assert not tx.open
    with tx.transaction():
        tx.appender("test/out").append("k", b"after")
    assert read_all(kafka, "reader", "test/out") == [b"kept", b"after"]
    assert read_all(uncommitted, "reader2", "test/out") == [
        b"kept",
        b"dropped-1",
        b"dropped-2",
        b"after",
    ]


def test_the_group_offsets_sent_move_only_when_the_transaction_commits(
    kafka: KafkaLogManager,
) -> None:
    kafka.create("test/in", 1)
    kafka.create("test/out", 1)
    kafka.appender("test/in").append_batch([("k", bytes([i])) for i in range(5)])
    p0 = LogPartition.of("test/in", 0)
    tailer = kafka.tailer("g", "test/in")
    tx = kafka.transactions("g/0")
    for _ in range(3):
        assert tailer.read(5) is not None
    tx.begin()
    tx.appender("test/out").append("k", b"from 3 inputs")
    tx.send_offsets(tailer)
    tx.abort()
    assert kafka.committed("test/in", "g") == [None]
    tx.begin()
    tx.appender("test/out").append("k", b"from 3 inputs")
    tx.send_offsets(tailer)  # (reading the group's offsets now would wait for the commit)
    tx.commit()
    assert kafka.committed("test/in", "g") == [3]
    tx.begin()
    tx.send_offsets(tailer, {p0: 5})  # explicit positions
    tx.commit()
    assert kafka.committed("test/in", "g") == [5]
    tailer.close()
    assert read_all(kafka, "reader", "test/out") == [b"from 3 inputs"]


def test_a_subscribed_member_commits_its_positions_in_the_transaction(
    kafka: KafkaLogManager,
) -> None:
    kafka.create("test/in", 2)
    kafka.appender("test/in").append_batch([("k", b"x")], partition=1)
    member = kafka.subscribe("g", ["test/in"])
    try:
        assert member.read(10) is not None  # joins the group, gets both partitions
        tx = kafka.transactions("g/all")
        with tx.transaction():
            tx.send_offsets(member)
        assert kafka.committed("test/in", "g") == [0, 1]
    finally:
        member.close()


def test_a_zombie_whose_transactional_id_was_taken_over_can_commit_nothing(
    kafka: KafkaLogManager,
) -> None:
    kafka.create("test/out", 1)
    zombie = kafka.transactions("g/0")
    zombie.begin()
    zombie.appender("test/out").append("k", b"zombie")
    owner = kafka.transactions("g/0")  # the task's new owner: fences the zombie
    with pytest.raises(ProducerFencedError, match="another member opened transactions"):
        zombie.commit()
    with pytest.raises(ProducerFencedError):
        zombie.begin()  # and stays fenced
    assert not zombie.open
    zombie.close()
    with owner.transaction():
        owner.appender("test/out").append("k", b"owner")
    assert read_all(kafka, "reader", "test/out") == [b"owner"]


def test_misuse_says_what_to_do(kafka: KafkaLogManager) -> None:
    kafka.create("test/out", 1)
    tx = kafka.transactions("g/0")
    appender = tx.appender("test/out")
    with pytest.raises(LogError, match="no transaction is open; call begin"):
        appender.append("k", b"outside")
    tx.begin()
    with pytest.raises(LogError, match="a transaction is open already"):
        tx.begin()
    with pytest.raises(InvalidArgumentError, match="a tailer of the Kafka manager"):
        tx.send_offsets(object())  # type: ignore[arg-type]
    tx.close()  # aborts it
    assert not tx.open
    with pytest.raises(LogError, match="closed"):
        tx.begin()


def test_a_transaction_open_past_its_timeout_is_aborted_and_says_so(
    kafka: KafkaLogManager,
) -> None:
    kafka.create("test/out", 1)
    tx = kafka.transactions("g/0", transaction_timeout=1.0)
    tx.begin()
    tx.appender("test/out").append("k", b"too late")  # offset 0
    # The coordinator aborts expired transactions on its cleanup interval (10 s by default):
    # the abort marker then moves the last stable offset past the record.
    deadline = time.monotonic() + 60
    while kafka.end_offsets("test/out") == [0]:
        assert time.monotonic() < deadline, "the broker never aborted the expired transaction"
        tx.producer.poll(0.2)
    with pytest.raises(TransactionTimeoutError, match=r"longer than transaction\.timeout\.ms"):
        tx.commit()
    tx.close()
    again = kafka.transactions("g/0")  # a new producer of the id redoes the checkpoint
    with again.transaction():
        again.appender("test/out").append("k", b"redone")
    assert read_all(kafka, "reader", "test/out") == [b"redone"]


def test_appending_through_a_fenced_producer_raises_at_once_instead_of_hanging(
    kafka: KafkaLogManager,
) -> None:
    kafka.create("test/out", 1)
    zombie = kafka.transactions("g/0")
    appender = zombie.appender("test/out")
    with zombie.transaction():  # enough reports for the interpreter to specialize their code
        appender.append_batch([("k", b"committed")] * 50)
    owner = kafka.transactions("g/0")  # fences the zombie between its transactions
    zombie.begin()  # librdkafka learns of the fencing only from the broker's answers
    started = time.monotonic()
    with pytest.raises(ProducerFencedError):
        appender.append_batch([("k", bytes([i])) for i in range(50)])
    assert time.monotonic() - started < kafka.clients.timeout + 5  # bounded, not a hang
    with pytest.raises(ProducerFencedError):
        zombie.begin()  # and stays fenced
    zombie.close()
    with owner.transaction():
        owner.appender("test/out").append("k", b"owner")
    assert read_all(kafka, "reader", "test/out") == [b"committed"] * 50 + [b"owner"]
