"""Log descriptions: what executors open logs from. The local one opens cursors and appenders
with the describing manager's options; the Kafka one maps librdkafka properties to Spark's
`kafka.*` options; `jobs/` never dispatches on backend classes."""

from __future__ import annotations

import dataclasses
import pickle
import re
from pathlib import Path

import pytest

from streamcore.config import load_config
from streamcore.errors import ConfigError, RecordTooLargeError
from streamcore.log import LocalLogManager
from streamcore.log.kafka.description import KafkaLogDescription
from streamcore.log.local.description import LocalLogDescription

ROOT = Path(__file__).resolve().parents[2]
BACKEND_CLASSES = ("LocalLogManager", "KafkaLogManager", "MemoryLogManager", "UnifiedLogManager")


def test_local_description_opens_cursors_and_appenders_with_its_options(tmp_path: Path) -> None:
    config = load_config()
    config = dataclasses.replace(config, log=dataclasses.replace(config.log, max_record_bytes=64))
    with LocalLogManager(tmp_path / "log", config=config) as manager:
        manager.create("test/d", 2)
        description = manager.describe("test/d")
    copy = LocalLogDescription.from_json(pickle.loads(pickle.dumps(description)).to_json())
    assert copy == description and copy.options["max_record_bytes"] == 64
    with copy.open_manager() as opened:
        appender = opened.appender("test/d")
        appender.append_to(1, "k", b"v")
        with pytest.raises(RecordTooLargeError):
            appender.append_to(1, "k", b"x" * 100)
    cursor = copy.open_cursor(1)
    try:
        assert [(r[0], r[2], bytes(r[3])) for r in cursor.next_records(10)] == [(0, "k", b"v")]
    finally:
        cursor.close()


def test_local_description_refuses_another_backend() -> None:
    with pytest.raises(ConfigError, match="not a local log description"):
        LocalLogDescription.from_json('{"backend": "kafka", "name": "a/b", "partitions": 1}')


def kafka(**properties: object) -> KafkaLogDescription:
    return KafkaLogDescription("kafka", "a/b", 1, "h:9094", "p-a-b", properties)


def test_kafka_spark_options_map_librdkafka_properties() -> None:
    options = kafka(
        **{
            "security.protocol": "SASL_SSL",
            "sasl.mechanisms": "SCRAM-SHA-512",
            "sasl.username": "me",
            "sasl.password": 'p"w\\',
            "ssl.ca.location": "/ca.pem",
            "enable.idempotence": True,
            "fetch.wait.max.ms": 50,
            "session.timeout.ms": 3000,
            "debug": "all",
        }
    ).spark_options()
    assert options == {
        "kafka.bootstrap.servers": "h:9094",
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.ssl.truststore.location": "/ca.pem",
        "kafka.ssl.truststore.type": "PEM",
        "kafka.enable.idempotence": "true",
        "kafka.fetch.max.wait.ms": "50",
        "kafka.isolation.level": "read_committed",  # the Java client reads uncommitted
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
        'required username="me" password="p\\"w\\\\";',
    }


def test_kafka_spark_options_read_committed_unless_the_config_says_otherwise() -> None:
    assert kafka().spark_options() == {
        "kafka.bootstrap.servers": "h:9094",
        "kafka.isolation.level": "read_committed",
    }
    options = kafka(**{"isolation.level": "read_uncommitted"}).spark_options()
    assert options["kafka.isolation.level"] == "read_uncommitted"


@pytest.mark.parametrize(
    ("properties", "message"),
    [
        ({"ssl.certificate.location": "/c.pem"}, '"ssl.certificate.location" .* no equivalent'),
        ({"sasl.username": "me"}, 'set "sasl.username" but not "sasl.password"'),
        (
            {"sasl.mechanisms": "OAUTHBEARER", "sasl.username": "u", "sasl.password": "p"},
            "credentials for PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 only",
        ),
    ],
)
def test_kafka_spark_options_refuse_what_cannot_be_mapped(properties, message) -> None:
    with pytest.raises(ConfigError, match=message):
        kafka(**properties).spark_options()


def test_jobs_never_dispatch_on_backend_classes() -> None:
    """Jobs open logs from `describe()`; which backend a manager is stays its own business."""
    pattern = re.compile(r"isinstance\([^)]*\b(" + "|".join(BACKEND_CLASSES) + r")\b")
    offenders = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((ROOT / "jobs").rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line) or re.search(r"\bP-\{", line)
    ]
    assert offenders == []
