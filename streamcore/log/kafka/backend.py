"""The Kafka log in the backend registry (`type = "kafka"`): the options of a
`[log.configs.<name>]` table of that type, the environment that overrides them, and how a
configuration opens it. Importing this module does not import confluent-kafka: a configuration
naming Kafka loads where it is not installed, and fails only when the backend is opened.

    [log.configs.kafka]
    type = "kafka"
    bootstrap_servers = "127.0.0.1:9092"
    topic_prefix = "streamcore-"    # topic = prefix + name id: streamcore-bulk-command
    timeout = "30s"                 # broker operations give up after this (number = seconds)
    replication_factor = 1          # for topics it creates
    partitions = 4                  # for topics created without a count (default: [log] partitions)
    [log.configs.kafka.properties]  # any librdkafka property, passed through as is
    # "sasl.password" = "${KAFKA_PASSWORD}"   # from the environment (streamcore.log.environ)

`STREAMCORE_KAFKA_BOOTSTRAP_SERVERS` and `STREAMCORE_KAFKA_TOPIC_PREFIX` override the
`bootstrap_servers` and `topic_prefix` of every kafka config.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamcore.errors import ConfigError
from streamcore.log.config import BackendConfig
from streamcore.log.environ import Unresolved, UnsetVariable, substitute
from streamcore.log.options import int_option, seconds_option, str_option
from streamcore.log.registry import Backend

if TYPE_CHECKING:
    from streamcore.config import StreamcoreConfig
    from streamcore.log.kafka.description import KafkaLogDescription
    from streamcore.log.kafka.manager import KafkaLogManager

__all__ = [
    "BACKEND",
    "ENV_KAFKA_BOOTSTRAP",
    "ENV_KAFKA_PREFIX",
    "KAFKA_DEFAULTS",
    "KafkaBackend",
    "kafka_kwargs",
]

ENV_KAFKA_BOOTSTRAP = "STREAMCORE_KAFKA_BOOTSTRAP_SERVERS"
ENV_KAFKA_PREFIX = "STREAMCORE_KAFKA_TOPIC_PREFIX"
KAFKA_DEFAULTS: dict[str, Any] = {
    "bootstrap_servers": "127.0.0.1:9092",
    "topic_prefix": "streamcore-",
    "timeout": 30.0,
    "replication_factor": 1,
    "partitions": None,  # None = the [log] partitions setting
    "properties": {},
}


def kafka_kwargs(config: BackendConfig, settings: StreamcoreConfig) -> dict[str, Any]:
    """The `KafkaLogManager(...)` keyword arguments of a kafka config."""
    options = config.options
    return {
        "bootstrap_servers": options["bootstrap_servers"],
        "topic_prefix": options["topic_prefix"],
        "config": dict(options["properties"]),
        "timeout": float(options["timeout"]),
        "replication_factor": int(options["replication_factor"]),
        "partitions": int(options["partitions"] or settings.log.partitions),
    }


class KafkaBackend(Backend):
    """The `type = "kafka"` backend: reads a config's options and opens a `KafkaLogManager` on
    them."""

    type = "kafka"
    options = tuple(KAFKA_DEFAULTS)
    retention_by = "the broker applies retention.ms"

    def parse_options(self, key: str, raw: Mapping[str, Any]) -> dict[str, Any]:
        out = dict(KAFKA_DEFAULTS)
        out["properties"] = {}
        if "bootstrap_servers" in raw:
            out["bootstrap_servers"] = str_option(
                raw["bootstrap_servers"], f"{key}.bootstrap_servers"
            )
        if "topic_prefix" in raw:
            out["topic_prefix"] = str_option(raw["topic_prefix"], f"{key}.topic_prefix", empty=True)
        if "timeout" in raw:
            out["timeout"] = seconds_option(raw["timeout"], f"{key}.timeout")
        if "replication_factor" in raw:
            out["replication_factor"] = int_option(
                raw["replication_factor"], f"{key}.replication_factor", 1, 32767
            )
        if "partitions" in raw:
            # Topics created without a count; `create` still refuses more than MAX_PARTITIONS.
            out["partitions"] = int_option(raw["partitions"], f"{key}.partitions", 1, 100_000)
        props = raw.get("properties", {})
        if not isinstance(props, Mapping):
            raise ConfigError(
                f"{key}.properties must be a table of librdkafka properties, e.g. "
                f'[{key}.properties] with "security.protocol" = "SASL_SSL"'
            )
        for prop, value in props.items():
            if isinstance(value, Mapping | list) or value is None:
                raise ConfigError(
                    f'{key}.properties."{prop}" = {value!r}: a librdkafka property is a string, '
                    "number or boolean"
                )
        if "bootstrap.servers" in props:
            raise ConfigError(
                f'{key}.properties."bootstrap.servers": set {key}.bootstrap_servers instead (one '
                "place, and STREAMCORE_KAFKA_BOOTSTRAP_SERVERS overrides it)"
            )
        out["properties"] = dict(props)
        return out

    def environment(self, environ: Mapping[str, str]) -> None:
        bootstrap = environ.get(ENV_KAFKA_BOOTSTRAP)
        if bootstrap is not None and not bootstrap.strip():
            raise ConfigError(
                f"{ENV_KAFKA_BOOTSTRAP} is empty; unset it or give host:port[,host:port]"
            )

    def configure(
        self, config: BackendConfig, environ: Mapping[str, str], reachable: bool
    ) -> BackendConfig:
        """The defaults under the config's options, the environment's bootstrap servers and
        topic prefix over them, and `${NAME}` resolved in the properties' string values: an
        unset variable raises for a config calls can reach; for another, reading its properties
        raises (`Unresolved`)."""
        options = dict(KAFKA_DEFAULTS) | dict(config.options)
        bootstrap = environ.get(ENV_KAFKA_BOOTSTRAP)
        if bootstrap is not None:
            options["bootstrap_servers"] = bootstrap.strip()
        prefix = environ.get(ENV_KAFKA_PREFIX)
        if prefix is not None:
            options["topic_prefix"] = prefix
        resolved: dict[str, Any] = {}
        unset: UnsetVariable | None = None
        for prop, value in options.get("properties", {}).items():
            if not isinstance(value, str) or "${" not in value:
                resolved[prop] = value
                continue
            try:
                resolved[prop] = substitute(value, environ, f'{config.key}.properties."{prop}"')
            except UnsetVariable as exc:  # go on: a malformed reference elsewhere fails at load
                unset = unset or exc
        if unset is not None:
            if reachable:
                raise ConfigError(str(unset)) from None
            options["properties"] = Unresolved(unset)
        else:
            options["properties"] = resolved
        return BackendConfig(config.name, config.type, options, config.builtin)

    def open(self, config: BackendConfig, settings: StreamcoreConfig) -> KafkaLogManager:
        try:
            from streamcore.log.kafka.manager import KafkaLogManager
        except ImportError as exc:
            raise ConfigError(
                f"{config.key} is a kafka config but the Kafka backend cannot be loaded "
                f"({exc}); install the kafka extra (pip install 'streamcore[kafka]'), or route "
                "these logs to a local config"
            ) from exc
        return KafkaLogManager(**kafka_kwargs(config, settings))

    def description(self) -> builtins.type[KafkaLogDescription]:
        from streamcore.log.kafka.description import KafkaLogDescription

        return KafkaLogDescription

    def where(self, config: BackendConfig, home: Path) -> str:
        options = config.options
        return f"{options['bootstrap_servers']} topics {options['topic_prefix']}<log-id>"

    def compacted(self, options: dict[str, Any]) -> dict[str, Any]:
        """A compacted log is a topic with `cleanup.policy=compact` (unless `topic_config`
        sets a policy)."""
        topic_config = {"cleanup.policy": "compact", **options.get("topic_config", {})}
        return {**options, "topic_config": topic_config}


BACKEND = KafkaBackend()
