"""`KafkaLogDescription`: a Kafka-backed log as a Spark job opens it (Spark's Kafka source and
sink, in the JVM): bootstrap servers, topic and every librdkafka property of the log config."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from streamcore.log.api import LogDescription
from streamcore.log.kafka.java_client import java_client_properties

BACKEND = "kafka"


@dataclass(frozen=True)
class KafkaLogDescription(LogDescription):
    """A Kafka log: `bootstrap_servers`, `topic` and `properties`, the librdkafka properties of
    the describing manager (security.protocol, sasl.*, ...)."""

    bootstrap_servers: str = ""
    topic: str = ""
    properties: Mapping[str, Any] = field(default_factory=dict)

    def spark_options(self) -> dict[str, str]:
        """Spark Kafka source / sink options reaching this cluster as the describing manager
        does: `kafka.bootstrap.servers` and `kafka.<Java client property>` for every property
        (mapped by `streamcore.log.kafka.java_client`; `ConfigError` for one that cannot be)."""
        options = {"kafka.bootstrap.servers": self.bootstrap_servers}
        for key, value in java_client_properties(self.properties).items():
            options[f"kafka.{key}"] = value
        return options
