"""What the Kafka backend does beyond (or differently from) the log contract that
tests/unit/test_log_contract.py checks on every backend: naming, partitioner, topic options,
retention loss, timestamps, client settings, errors."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from kafka_broker import scratch_prefix

from streamcore.errors import (
    BrokerUnavailableError,
    ConfigError,
    LogError,
    LogExistsError,
    LogNotFoundError,
    RecordTooLargeError,
)
from streamcore.log import LogLag, LogOffset, LogPartition
from streamcore.log.kafka import KafkaLogManager, kafka_partition_for_key, murmur2
from streamcore.log.partitioner import partition_for_key
from streamcore.names import Name

pytestmark = pytest.mark.kafka
FAST = {"fetch.wait.max.ms": 50}


@pytest.fixture
def kafka(kafka_bootstrap: str) -> Iterator[KafkaLogManager]:
    manager = KafkaLogManager(
        kafka_bootstrap, topic_prefix=scratch_prefix(), config=FAST, timeout=10.0
    )
    yield manager
    manager.close()


@pytest.fixture
def admin(kafka_bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": kafka_bootstrap})


def drain(tailer) -> list:
    return list(tailer)


class TestPartitioner:
    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ("21", -973932308),
            ("foobar", -790332482),
            ("a-little-bit-long-string", -985981536),
            ("a-little-bit-longer-string", -1486304829),
            ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
            ("abc", 479470107),
        ],
    )
    def test_murmur2_matches_the_java_client(self, text: str, expected: int) -> None:
        # Kafka's UtilsTest vectors (signed Java ints)
        assert murmur2(text.encode()) == expected & 0xFFFFFFFF

    def test_keyed_appends_use_kafkas_partitioner_not_nuxeos(self, kafka: KafkaLogManager) -> None:
        """The documented difference: the local log puts a key where Nuxeo's Java hashCode
        partitioner says; Kafka where its murmur2 partitioner says."""
        kafka.create("test/keys", 5)
        app = kafka.appender("test/keys")
        keys = [f"user-{i}" for i in range(100)] + ["", "é日本", "\U0001f600"]
        offsets = app.append_batch([(k, b"x") for k in keys])
        differ = 0
        for key, offset in zip(keys, offsets, strict=True):
            assert offset.partition.partition == kafka_partition_for_key(key, 5)
            assert app.partition_for(key) == kafka_partition_for_key(key, 5)
            differ += kafka_partition_for_key(key, 5) != partition_for_key(key, 5)
        last = app.append("user-7", b"y")
        assert last.partition.partition == kafka_partition_for_key("user-7", 5)
        assert differ > 50  # most keys land in another partition number than on the local log
        # same key, same partition, in order
        same = [app.append("fixed", str(i).encode()) for i in range(5)]
        assert len({o.partition for o in same}) == 1
        assert [o.offset for o in same] == list(range(same[0].offset, same[0].offset + 5))


class TestNaming:
    def test_topics_and_groups_carry_the_prefix(
        self, kafka: KafkaLogManager, admin: AdminClient
    ) -> None:
        prefix = kafka.topic_prefix
        kafka.create("bulk/command", 2)
        kafka.create("plain", 1)
        topics = admin.list_topics(timeout=10).topics
        assert f"{prefix}bulk-command" in topics and f"{prefix}plain" in topics
        assert kafka.topic("bulk/command") == f"{prefix}bulk-command"
        assert kafka.group_id("audit/writer") == f"{prefix}audit-writer"
        with kafka.tailer("audit/writer", "bulk/command") as tailer:
            tailer.commit()
        groups = [g.group_id for g in admin.list_consumer_groups().result(timeout=10).valid]
        assert f"{prefix}audit-writer" in groups
        assert kafka.list_groups("bulk/command") == ["audit/writer"]

    def test_list_logs_sees_only_its_prefix(
        self, kafka: KafkaLogManager, admin: AdminClient
    ) -> None:
        prefix = kafka.topic_prefix
        other = KafkaLogManager(
            kafka.bootstrap_servers, topic_prefix=scratch_prefix(), config=FAST, timeout=10.0
        )
        kafka.create("test/mine", 1)
        other.create("test/theirs", 1)
        # a topic of the prefix whose rest is no valid name is not a log
        admin.create_topics([NewTopic(f"{prefix}-bad", 1, 1)])[f"{prefix}-bad"].result(10)
        assert kafka.list_logs() == [Name.of("test/mine")]
        assert other.list_logs() == [Name.of("test/theirs")]
        assert not kafka.exists("test/theirs")
        other.close()

    def test_static_groups_appear_only_once_they_committed(self, kafka: KafkaLogManager) -> None:
        kafka.create("test/a", 1)
        kafka.appender("test/a").append("k", b"v")
        with kafka.tailer("reader", "test/a") as tailer:
            assert tailer.read(5) is not None
            assert kafka.list_groups("test/a") == []  # Kafka knows nothing of it yet
            tailer.commit()
            assert kafka.list_groups("test/a") == ["reader"]


class TestCreate:
    def test_default_partitions_and_options(self, kafka_bootstrap: str, admin: AdminClient) -> None:
        manager = KafkaLogManager(kafka_bootstrap, topic_prefix=scratch_prefix(), partitions=3)
        assert manager.create("test/a") is True
        assert manager.size("test/a") == 3
        assert manager.create(
            "test/b", 1, retention="2h", topic_config={"cleanup.policy": "compact"}
        )
        resource = ConfigResource(ConfigResource.Type.TOPIC, manager.topic("test/b"))
        configs = admin.describe_configs([resource])[resource].result(timeout=10)
        assert configs["retention.ms"].value == str(2 * 3600 * 1000)
        assert configs["cleanup.policy"].value == "compact"
        info = manager.info("test/b")
        assert (info.partitions, info.records, info.retention_ms) == (1, 0, 2 * 3600 * 1000)
        manager.close()

    def test_bad_options(self, kafka: KafkaLogManager) -> None:
        with pytest.raises(ConfigError, match=r"unknown Kafka log option\(s\) \['segment_bytes'\]"):
            kafka.create("test/a", 1, segment_bytes=10)
        with pytest.raises(LogError, match=r"INVALID_REPLICATION_FACTOR|replication factor"):
            kafka.create("test/a", 1, replication_factor=3)  # one broker only
        assert not kafka.exists("test/a")

    def test_delete_refuses_while_in_use(self, kafka: KafkaLogManager) -> None:
        kafka.create("test/a", 1)
        tailer = kafka.tailer("g", "test/a")
        with pytest.raises(LogExistsError, match="is in use in this process"):
            kafka.delete("test/a")
        tailer.close()
        assert kafka.delete("test/a") is True


class TestRecords:
    def test_batch_timestamps_are_kept(self, kafka: KafkaLogManager) -> None:
        kafka.create("test/a", 1)
        stamps = [1_600_000_000_000 + 1000 * i for i in range(5)]
        offsets = kafka.appender("test/a").append_batch(
            [(f"k{i}", bytes([i])) for i in range(5)], timestamps=stamps
        )
        assert [o.offset for o in offsets] == [0, 1, 2, 3, 4]
        p0 = LogPartition.of("test/a", 0)
        with kafka.tailer("g", "test/a") as tailer:
            assert [r.timestamp for r in drain(tailer)] == stamps
            assert tailer.offset_for_timestamp(p0, stamps[2] - 1) == LogOffset(p0, 2)
            assert tailer.offset_for_timestamp(p0, stamps[-1] + 1) is None
        assert kafka.record_at(p0, 3) == ("k3", b"\x03", stamps[3])
        assert kafka.record_at(p0, 5) is None

    def test_large_batch_through_a_small_producer_queue(self, kafka_bootstrap: str) -> None:
        manager = KafkaLogManager(
            kafka_bootstrap,
            topic_prefix=scratch_prefix(),
            config={**FAST, "queue.buffering.max.messages": 500},
        )
        manager.create("test/big", 3)
        items = [(f"key-{i}", i.to_bytes(4, "big")) for i in range(5000)]
        offsets = manager.appender("test/big").append_batch(items)
        assert len(offsets) == 5000
        per_partition: dict[int, list[int]] = {}
        for (key, _), offset in zip(items, offsets, strict=True):
            assert offset.partition.partition == kafka_partition_for_key(key, 3)
            per_partition.setdefault(offset.partition.partition, []).append(offset.offset)
        for found in per_partition.values():
            assert found == list(range(len(found)))  # input order kept within a partition
        assert sum(manager.end_offsets("test/big")) == 5000
        manager.close()

    def test_record_too_large(self, kafka: KafkaLogManager) -> None:
        kafka.create("test/a", 1, topic_config={"max.message.bytes": "2000"})
        app = kafka.appender("test/a")
        with pytest.raises(RecordTooLargeError, match=r"0 of 1 records landed.*max.message.bytes"):
            app.append("k", b"x" * 5000)
        assert app.append("k", b"small").offset >= 0


class TestRetentionLoss:
    def test_lag_and_tailer_count_records_deleted_before_the_group_read_them(
        self, kafka: KafkaLogManager, admin: AdminClient
    ) -> None:
        kafka.create("test/a", 1)
        kafka.appender("test/a").append_batch([("k", bytes([i])) for i in range(10)], partition=0)
        p0 = LogPartition.of("test/a", 0)
        with kafka.tailer("slow", "test/a") as tailer:
            tailer.read(5)
            tailer.read(0)
            tailer.commit()  # committed 2
        # what retention does: records before offset 6 are deleted
        tp = TopicPartition(kafka.topic("test/a"), 0, 6)
        admin.delete_records([tp])[tp].result(timeout=10)
        assert kafka.start_offsets("test/a") == [6]
        assert kafka.lag_per_partition("test/a", "slow") == [LogLag(6, 10, 4, lost=4)]
        with kafka.tailer("slow", "test/a") as tailer:
            assert tailer.position(p0) == 2
            assert [r.offset for r in drain(tailer)] == [6, 7, 8, 9]
            assert tailer.lost == 4
            tailer.commit()
        assert kafka.lag("test/a", "slow") == LogLag(10, 10, 0, 0)
        # a new group starts at the first retained record and lost nothing
        with kafka.tailer("fresh", "test/a") as tailer:
            assert tailer.position(p0) == 6
            assert len(drain(tailer)) == 4
            assert tailer.lost == 0


class TestSettings:
    def test_properties_pass_through_to_every_client(self, kafka_bootstrap: str) -> None:
        # A security protocol the loopback listener does not speak: the setting is applied, so
        # every call fails, within the timeout, with a message naming what to check.
        manager = KafkaLogManager(
            kafka_bootstrap,
            topic_prefix=scratch_prefix(),
            timeout=1.5,
            config={
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.username": "u",
                "sasl.password": "p",
            },
        )
        started = time.monotonic()
        with pytest.raises(BrokerUnavailableError, match="security settings"):
            manager.list_logs()
        assert time.monotonic() - started < 3.5
        manager.close()

    def test_unknown_property_is_a_config_error(self, kafka_bootstrap: str) -> None:
        manager = KafkaLogManager(kafka_bootstrap, config={"no.such.property": 1})
        with pytest.raises(
            ConfigError, match=r'No such configuration property: "no\.such\.property"'
        ):
            manager.list_logs()

    def test_consumer_and_producer_properties_go_to_their_clients(
        self, kafka_bootstrap: str
    ) -> None:
        from streamcore.log.kafka.client import KafkaClients

        clients = KafkaClients(
            kafka_bootstrap,
            {"linger.ms": 20, "session.timeout.ms": 6000, "client.rack": "r1"},
            timeout=30,
        )
        producer = clients.producer_config()
        consumer = clients.consumer_config("g", "c", static=False)
        admin = clients.admin_config()
        assert producer["linger.ms"] == 20 and "session.timeout.ms" not in producer
        assert consumer["session.timeout.ms"] == 6000 and "linger.ms" not in consumer
        assert "linger.ms" not in admin and "session.timeout.ms" not in admin
        assert producer["client.rack"] == consumer["client.rack"] == admin["client.rack"] == "r1"
        assert producer["partitioner"] == "murmur2_random"
        assert producer["enable.idempotence"] is True
        # a static tailer's sync commit waits at most the timeout for the coordinator
        short = KafkaClients(kafka_bootstrap, {}, timeout=2)
        assert short.consumer_config("g", "c")["session.timeout.ms"] == 2000
        assert short.consumer_config("g", "c", static=False)["session.timeout.ms"] == 10_000


class TestTopicGone:
    def test_unknown_topic_errors(self, kafka: KafkaLogManager) -> None:
        with pytest.raises(LogNotFoundError, match=r"log test/missing does not exist in Kafka"):
            kafka.size("test/missing")
        with pytest.raises(
            LogNotFoundError, match=r"log test/missing does not exist.*create it first"
        ):
            kafka.subscribe("g", ["test/missing"])


class TestGroupOffsets:
    def test_read_through_a_consumer_not_the_admin_api(
        self, kafka: KafkaLogManager, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """librdkafka 2.16 crashes the process (SIGSEGV in its main thread) when the admin
        ListConsumerGroupOffsets call meets a coordinator error, which a broker that just
        started or restarted sends: the manager must never call it (CI died of it once)."""

        def crash(*args: object, **kwargs: object) -> None:
            raise AssertionError("AdminClient.list_consumer_group_offsets must not be used")

        monkeypatch.setattr(AdminClient, "list_consumer_group_offsets", crash)
        kafka.create("test/offsets", 2)
        assert kafka.committed("test/offsets", "app/fresh") == [None, None]
        kafka.commit_position(LogPartition.of("test/offsets", 1), "app/fresh", 0)
        assert kafka.committed("test/offsets", "app/fresh") == [None, 0]
        assert kafka.list_groups("test/offsets") == ["app/fresh"]

    def test_keeps_only_the_recently_used_readers(self, kafka: KafkaLogManager) -> None:
        kafka.create("test/readers", 1)
        for i in range(10):
            assert kafka.committed("test/readers", f"app/g{i}") == [None]
        assert len(kafka.clients._readers) == 8
        assert next(iter(kafka.clients._readers)) == kafka.group_id("app/g2")  # g0, g1 were closed
        kafka.close()
        assert kafka.clients._readers == {}

    def test_a_reader_in_use_is_closed_by_its_last_user(self, kafka: KafkaLogManager) -> None:
        kafka.create("test/in-use", 1)
        tp = [TopicPartition(kafka.topic("test/in-use"), 0)]
        with kafka.clients.offsets_reader(kafka.group_id("app/busy")) as busy:
            kafka.close()  # another thread closing the manager mid-read: the read goes on
            assert busy.committed(tp, timeout=10)[0].offset < 0
        with pytest.raises(RuntimeError, match="closed"):
            busy.committed(tp, timeout=10)
