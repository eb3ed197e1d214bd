"""`KafkaLogDescription`: a Kafka-backed log as a Spark job opens it (Spark's Kafka source and
sink, in the JVM): bootstrap servers, topic and every librdkafka property of the log config.

The properties are the resolved ones: a `${NAME}` in the config's properties (e.g. the
`sasl.password`) was replaced from the environment of the process that loaded the config, the
driver, so the description carries the value and executors need no such variable (they get it
inside `kafka.sasl.jaas.config`). Secret values never show in the repr (`redact_properties`);
`spark_options()` holds them in clear, as Spark needs them: pass it to Spark, never log it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from streamcore.log.kafka.java_client import java_client_properties
from streamcore.log.values import LogDescription
from streamcore.redact import redact_properties

__all__ = ["BACKEND", "KafkaLogDescription"]

BACKEND = "kafka"


@dataclass(frozen=True)
class KafkaLogDescription(LogDescription):
    """A Kafka log: `bootstrap_servers`, `topic` and `properties`, the librdkafka properties of
    the describing manager (security.protocol, sasl.*, ...); `compacted` when the topic's
    `cleanup.policy` includes compact (its offsets then have gaps)."""

    bootstrap_servers: str = ""
    topic: str = ""
    properties: Mapping[str, Any] = field(default_factory=dict)
    compacted: bool = False

    def __repr__(self) -> str:
        return (
            f"KafkaLogDescription(backend={self.backend!r}, name={self.name!r}, "
            f"partitions={self.partitions!r}, bootstrap_servers={self.bootstrap_servers!r}, "
            f"topic={self.topic!r}, properties={redact_properties(self.properties)!r}, "
            f"compacted={self.compacted!r})"
        )

    def spark_options(self) -> dict[str, str]:
        """Spark Kafka source / sink options reaching this cluster as the describing manager
        does: `kafka.bootstrap.servers` and `kafka.<Java client property>` for every property
        (mapped by `streamcore.log.kafka.java_client`; `ConfigError` for one that cannot be).

        `kafka.isolation.level` is `read_committed` unless the properties set `isolation.level`:
        the Java consumer's default is `read_uncommitted`, which would land the records of
        aborted transactions (an exactly-once processor's); this backend's readers read
        committed too. The sink passes it to its producer, which ignores a consumer setting
        (Spark's sink refuses only `kafka.key.serializer` / `kafka.value.serializer`)."""
        options = {"kafka.bootstrap.servers": self.bootstrap_servers}
        for key, value in java_client_properties(self.properties).items():
            options[f"kafka.{key}"] = value
        options.setdefault("kafka.isolation.level", "read_committed")
        return options
