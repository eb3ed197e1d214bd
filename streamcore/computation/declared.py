"""Processors and logs declared in the configuration (Nuxeo's `<streamProcessor>` and
`<logConfig><log name size>` contributions), so an operator runs them with `streamcore run
--processor NAME` (or `streamcore run` for all) without writing Python (docs/operating.md,
"Declared processors and logs").

    [logs."app/orders"]                  # created when missing
    partitions = 4
    retention = "7d"                     # as `create(retention=)`; default: the backend's
    compact = false                      # keep the latest record per key (docs/log.md)
    backend = "kafka"                    # a [log.configs.*] name; default: LogConfig's route

    [processors.enrich]
    topology = "myapp.flows:enrich"      # module:function: a Topology or (Topology, Settings)
    concurrency = 2                      # every computation of the topology
    start = "earliest"                   # or "latest": where a new group starts
    worker_allocation = "static"         # or "pool": the units share the member's partitions
    [processors.enrich.options]          # keyword arguments of the function
    threshold = 3
    [processors.enrich.policy]           # ComputationPolicy of every computation
    max_retries = 3
    delay = "1s"
    max_delay = "1m"
    continue_on_failure = false
    skip_first_failures = 0
    dlq = "app/enrich-dlq"
    batch_capacity = 1
    batch_threshold = "1s"

A declared value overrides what the factory's Settings say for every computation of the
topology: the operator's knob wins over the code's default. The environment overrides the file
as for every key: `STREAMCORE_PROCESSORS_<NAME>_<KEY>` and
`STREAMCORE_PROCESSORS_<NAME>_POLICY_<KEY>` (the name upper-cased, `-` as `_`). Every unknown
key, wrong type or value out of range is a `ConfigError` naming the key and what it accepts.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from streamcore.computation.loader import load_topology
from streamcore.computation.policy import ComputationPolicy
from streamcore.computation.pool import WORKER_ALLOCATIONS
from streamcore.computation.settings import Settings
from streamcore.computation.topology import Topology
from streamcore.config import StreamcoreConfig, parse_duration_ms
from streamcore.errors import ConfigError, TopologyError
from streamcore.log import LogManager
from streamcore.log.values import START_POSITIONS
from streamcore.names import Name

__all__ = [
    "DeclaredLog",
    "DeclaredProcessor",
    "declared_logs",
    "declared_processors",
    "ensure_logs",
]

_PROCESSOR_KEYS = ("topology", "concurrency", "start", "worker_allocation", "options", "policy")
_LOG_KEYS = ("partitions", "retention", "compact", "backend")  # the last two: LogConfig's
_DURATIONS = ("delay", "max_delay", "batch_threshold")


@dataclass(frozen=True)
class DeclaredLog:
    """A `[logs."<name>"]` table."""

    name: str
    partitions: int | None = None
    retention: str | None = None

    def create_options(self) -> dict[str, Any]:
        return {} if self.retention is None else {"retention": self.retention}


@dataclass(frozen=True)
class DeclaredProcessor:
    """A `[processors.<name>]` table."""

    name: str
    topology: str
    concurrency: int | None = None
    start: str | None = None
    worker_allocation: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    policy: dict[str, Any] = field(default_factory=dict)  # ComputationPolicy fields to set

    def load(self, app_dir: str = ".") -> tuple[Topology, Settings]:
        """The topology and its settings, the declared values applied to every computation."""
        topology, settings = load_topology(self.topology, app_dir, self.options)
        for name in topology.computation_names():
            try:
                if self.concurrency is not None:
                    settings.set_concurrency(name, self.concurrency)
                if self.start is not None:
                    settings.set_start(name, self.start)
                if self.worker_allocation is not None:
                    settings.set_worker_allocation(name, self.worker_allocation)
                if self.policy:
                    settings.set_policy(name, replace(settings.policy(name), **self.policy))
            except TopologyError as exc:
                raise ConfigError(f"processors.{self.name}: {exc}") from None
        return topology, settings


def _env(name: str, *keys: str) -> str:
    parts = ["STREAMCORE_PROCESSORS", name, *keys]
    return "_".join(p.upper().replace("-", "_") for p in parts)


def _table(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{what} must be a table, got {value!r}")
    return value


def _unknown(table: Mapping[str, Any], known: tuple[str, ...], what: str) -> None:
    unknown = sorted(set(table) - set(known))
    if unknown:
        raise ConfigError(f"unknown key(s) {unknown} in [{what}]; the keys are {', '.join(known)}")


def _int(value: Any, what: str, least: int) -> int:
    try:
        number = int(value) if not isinstance(value, bool | float) else None
    except (TypeError, ValueError):
        number = None
    if number is None or number < least:
        raise ConfigError(f"{what} must be an integer >= {least}, got {value!r}")
    return number


def _bool(value: Any, what: str) -> bool:
    if isinstance(value, bool):
        return value
    if str(value).lower() in ("true", "false"):
        return str(value).lower() == "true"
    raise ConfigError(f"{what} must be true or false, got {value!r}")


def _policy(name: str, table: dict[str, Any]) -> dict[str, Any]:
    known = tuple(f.name for f in fields(ComputationPolicy))
    keys = {k: os.environ.get(_env(name, "policy", k), table.get(k)) for k in known}
    _unknown(table, known, f"processors.{name}.policy")
    out: dict[str, Any] = {}
    for key, value in keys.items():
        if value is None:
            continue
        what = f"processors.{name}.policy.{key}"
        if key in _DURATIONS:
            out[key] = parse_duration_ms(value, what) / 1000.0 if isinstance(value, str) else value
        elif key == "continue_on_failure":
            out[key] = _bool(value, what)
        elif key == "dlq":
            out[key] = str(value)
        else:
            out[key] = _int(value, what, 0 if key != "batch_capacity" else 1)
    try:
        replace(ComputationPolicy(), **out)  # its own checks, with the processor named
    except TopologyError as exc:
        raise ConfigError(f"processors.{name}.policy: {exc}") from None
    return out


def declared_processors(config: StreamcoreConfig) -> dict[str, DeclaredProcessor]:
    """The `[processors.*]` tables, checked, by name."""
    out = {}
    for name, raw in _table(config.table.get("processors", {}), "[processors]").items():
        table = _table(raw, f"[processors.{name}]")
        _unknown(table, _PROCESSOR_KEYS, f"processors.{name}")
        topology = os.environ.get(_env(name, "topology"), table.get("topology"))
        if not isinstance(topology, str) or ":" not in topology:
            raise ConfigError(
                f"processors.{name}.topology must name the factory as 'module:function', got "
                f"{topology!r}"
            )
        concurrency = os.environ.get(_env(name, "concurrency"), table.get("concurrency"))
        start = os.environ.get(_env(name, "start"), table.get("start"))
        if start is not None and start not in START_POSITIONS:
            raise ConfigError(
                f"processors.{name}.start must be one of {', '.join(START_POSITIONS)}, got "
                f"{start!r}"
            )
        allocation = os.environ.get(_env(name, "worker_allocation"), table.get("worker_allocation"))
        if allocation is not None and allocation not in WORKER_ALLOCATIONS:
            raise ConfigError(
                f"processors.{name}.worker_allocation must be one of "
                f"{', '.join(WORKER_ALLOCATIONS)}, got {allocation!r}"
            )
        out[name] = DeclaredProcessor(
            name,
            topology,
            None if concurrency is None else _int(concurrency, f"processors.{name}.concurrency", 1),
            start,
            allocation,
            dict(_table(table.get("options", {}), f"[processors.{name}.options]")),
            _policy(name, _table(table.get("policy", {}), f"[processors.{name}.policy]")),
        )
    return out


def declared_logs(config: StreamcoreConfig) -> list[DeclaredLog]:
    """The `[logs."<name>"]` tables, checked."""
    out = []
    for name, raw in _table(config.table.get("logs", {}), "[logs]").items():
        table = _table(raw, f'[logs."{name}"]')
        _unknown(table, _LOG_KEYS, f'logs."{name}"')
        try:
            Name.of(name)
        except Exception as exc:
            raise ConfigError(f'[logs."{name}"]: {exc}') from None
        partitions = table.get("partitions")
        retention = table.get("retention")
        if retention is not None:
            parse_duration_ms(retention, f'logs."{name}".retention')
        out.append(
            DeclaredLog(
                name,
                None if partitions is None else _int(partitions, f'logs."{name}".partitions', 1),
                None if retention is None else str(retention),
            )
        )
    return out


def ensure_logs(manager: LogManager, logs: list[DeclaredLog]) -> list[str]:
    """Create the declared logs that do not exist; their names."""
    created = []
    for log in logs:
        if not manager.exists(log.name) and manager.create(
            log.name, log.partitions, **log.create_options()
        ):
            created.append(log.name)
    return created
