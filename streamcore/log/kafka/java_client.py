"""librdkafka properties (what a kafka log config's `properties` table holds) → the Java Kafka
client's properties, which Spark's Kafka source and sink take as `kafka.<property>` options.

The two clients share most names but not all, so each property is handled by one rule:

- **same name**: `SAME` (security, client identity, timeouts, batching and fetch sizes);
- **renamed**: `RENAMED`, e.g. `sasl.mechanisms` → `sasl.mechanism`, `ssl.ca.location` →
  `ssl.truststore.location` with `ssl.truststore.type = PEM`;
- **credentials**: `sasl.username` + `sasl.password` → `sasl.jaas.config` with the login module of
  the mechanism (`PlainLoginModule` for PLAIN, `ScramLoginModule` for SCRAM-SHA-256/512);
- **dropped**: `DROPPED`, librdkafka's own diagnostics and the consumer-group settings Spark
  manages itself (it reads explicit offset ranges and never commits);
- anything else is **refused** with a `ConfigError`: a silently ignored security setting would
  make the executors connect differently from the driver.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from streamcore.errors import ConfigError

__all__ = ["java_client_properties"]

SAME = frozenset(
    {
        "security.protocol",
        "sasl.mechanism",
        "sasl.kerberos.service.name",
        "ssl.key.password",
        "ssl.keystore.location",
        "ssl.keystore.password",
        "ssl.cipher.suites",
        "ssl.endpoint.identification.algorithm",
        "client.id",
        "client.rack",
        "request.timeout.ms",
        "retry.backoff.ms",
        "reconnect.backoff.ms",
        "reconnect.backoff.max.ms",
        "socket.connection.setup.timeout.ms",
        "metadata.max.age.ms",
        "connections.max.idle.ms",
        "acks",
        "linger.ms",
        "batch.size",
        "compression.type",
        "enable.idempotence",
        "fetch.min.bytes",
        "fetch.max.bytes",
        "max.partition.fetch.bytes",
        "isolation.level",
    }
)
RENAMED = {
    "sasl.mechanisms": "sasl.mechanism",
    "fetch.wait.max.ms": "fetch.max.wait.ms",
    "queue.buffering.max.ms": "linger.ms",
    "ssl.ca.location": "ssl.truststore.location",
}
DROPPED = frozenset(
    {
        "debug",
        "log_level",
        "log.connection.close",
        "statistics.interval.ms",
        "api.version.request",
        "broker.address.family",
        "socket.timeout.ms",
        "auto.offset.reset",
        "enable.auto.commit",
        "enable.auto.offset.store",
        "enable.partition.eof",
        "auto.commit.interval.ms",
        "session.timeout.ms",
        "heartbeat.interval.ms",
        "max.poll.interval.ms",
        "partition.assignment.strategy",
    }
)
CREDENTIALS = ("sasl.username", "sasl.password")
_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
_WHERE = "the kafka log config's properties ([log.configs.<name>.properties])"


def java_client_properties(properties: Mapping[str, Any]) -> dict[str, str]:
    """The Java client's properties for librdkafka `properties` (see the module docstring);
    `ConfigError` for one that has no Java equivalent."""
    out: dict[str, str] = {}
    for key, value in properties.items():
        if key in CREDENTIALS or key in DROPPED:
            continue
        text = _text(value)
        if key in SAME:
            out[key] = text
        elif key in RENAMED:
            out[RENAMED[key]] = text
        else:
            raise ConfigError(
                f'librdkafka property "{key}" in {_WHERE} has no equivalent in the Java Kafka '
                "client that Spark jobs use, so the executors would connect without it; remove "
                "it, or map it in streamcore/log/kafka/java_client.py. Passed on: "
                f"{', '.join(sorted(SAME | set(RENAMED)))}, sasl.username/sasl.password; "
                f"ignored: {', '.join(sorted(DROPPED))}"
            )
    if "ssl.ca.location" in properties:
        out["ssl.truststore.type"] = "PEM"
    if out.get("ssl.endpoint.identification.algorithm") == "none":
        out["ssl.endpoint.identification.algorithm"] = ""
    jaas = _jaas_config(properties, out.get("sasl.mechanism", "GSSAPI"))
    if jaas is not None:
        out["sasl.jaas.config"] = jaas
    return out


def _text(value: Any) -> str:
    # TOML booleans are Python booleans; the Java client reads "true" / "false".
    return str(value).lower() if isinstance(value, bool) else str(value)


def _jaas_config(properties: Mapping[str, Any], mechanism: str) -> str | None:
    given = [key for key in CREDENTIALS if key in properties]
    if not given:
        return None
    if len(given) == 1:
        missing = next(key for key in CREDENTIALS if key not in given)
        raise ConfigError(f'{_WHERE} set "{given[0]}" but not "{missing}"; set both, or neither')
    module = _LOGIN_MODULES.get(mechanism.upper())
    if module is None:
        raise ConfigError(
            f"{_WHERE} set sasl.username/sasl.password with sasl.mechanisms = {mechanism!r}; Spark "
            f"jobs pass credentials for {', '.join(_LOGIN_MODULES)} only: set sasl.mechanisms to "
            "one of them"
        )
    user = _quoted(_text(properties["sasl.username"]))
    password = _quoted(_text(properties["sasl.password"]))
    return f"{module} required username={user} password={password};"


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
