"""`UnifiedLogManager`: one `LogManager` over every backend of a `LogConfig`.

Each call goes to the backend its log routes to (see `streamcore.log.config` for the rules):
calls naming only a log by the log's name; group calls (tailer, subscribe, committed, lag,
latency) by the log and the group. Appenders and tailers are the backend's own objects, so reading
and writing cost nothing extra; only the routing of the call that makes them does.

Backends are built on first use, by the registry's `Backend` of the config's type
(`streamcore.log.registry`): a local config becomes a `LocalLogManager` on its root folder (with
its own log defaults), a memory config one `MemoryLogManager` per config name, a kafka config a
`KafkaLogManager` (imported only then, so confluent-kafka is not loaded by local-only runs).
`list_logs` merges the backends calls can reach (the default and every rule's config); `close`
closes every backend built.

One method answers which backend serves a log (for a group): `backend_for(name, group)`; tools
reach backend-specific features through it (the local log's `info`, `purge`), `route()` says why,
and `locations()` shows where each log lives. `describe` and `commit_position` are forwarded like
any other call; `group_members`, which names no log, asks every backend calls can reach.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from streamcore.config import StreamcoreConfig, load_config
from streamcore.errors import ArgumentTypeError, ConfigError, InvalidArgumentError, LogClosedError
from streamcore.log.api import LogAppender, LogManager, LogTailer, RebalanceListener
from streamcore.log.capabilities import standby_groups_of
from streamcore.log.config import BackendConfig, LogConfig, Route
from streamcore.log.registry import backend_type
from streamcore.log.values import Latency, LiveMember, LogDescription, LogLag, LogPartition
from streamcore.names import Name

if TYPE_CHECKING:
    from streamcore.codecs import Codec

__all__ = ["UnifiedLogManager"]

logger = logging.getLogger(__name__)


def _source_names(source: Any) -> list[Name]:
    if isinstance(source, LogPartition):
        return [source.name]
    if isinstance(source, str | Name):
        return [Name.of(source)]
    names: dict[Name, None] = {}
    for partition in source:
        if not isinstance(partition, LogPartition):
            raise ArgumentTypeError(
                f"a tailer reads a name, a LogPartition or a list of LogPartition, got "
                f"{type(partition).__name__}"
            )
        names[partition.name] = None
    return list(names)


class UnifiedLogManager(LogManager):
    """Routes every call to the backend of its log. `config` is the settings object (default:
    `load_config()`); `log_config` the routing (default: read from those settings + env)."""

    def __init__(
        self, config: StreamcoreConfig | None = None, log_config: LogConfig | None = None
    ) -> None:
        self.config = config or load_config()
        self.log_config = log_config or LogConfig.from_settings(self.config)
        self._managers: dict[str, LogManager] = {}
        self._lock = threading.RLock()
        self._closed = False
        self._verified: set[tuple[Name, str]] = set()
        self._check_folders()

    def _check_folders(self) -> None:
        """Two configs that keep their logs in one folder would see each other's logs."""
        seen: dict[Any, BackendConfig] = {}
        for backend in self.log_config.used():
            folder = backend_type(backend.type).folder(backend, self.config.home)
            if folder is None:
                continue
            root = folder.resolve()
            other = seen.get(root)
            if other is not None:
                raise ConfigError(
                    f"{other.key} and {backend.key} both keep their logs in {root}; give one of "
                    f'them its own folder, e.g. {backend.key}.root = "log-{backend.name}"'
                )
            seen[root] = backend

    # -- routing ---------------------------------------------------------------------------------
    def route(self, name: str | Name, group: str | None = None) -> Route:
        """Which config a call on `name` (by `group`) goes to, and why."""
        return self.log_config.route(name, group)

    def backend_for(self, name: str | Name, group: str | None = None) -> LogManager:
        """The backend manager that serves log `name`: for calls naming only the log, or, with
        `group`, for that group's calls (with the same checks as the group calls themselves).
        Tools reach backend-specific features through it (the local log's `info`, `purge`)."""
        if group is None:
            return self.backend_manager(self.route(name).config)
        return self._group_manager(Name.of(name), group)

    def backend_manager(self, config_name: str) -> LogManager:
        """The manager of a named config, built on first use."""
        with self._lock:
            if self._closed:
                raise LogClosedError("the unified log manager is closed")
            manager = self._managers.get(config_name)
            if manager is None:
                try:
                    backend = self.log_config.configs[config_name]
                except KeyError:
                    raise ConfigError(
                        f"no log config named {config_name!r}; define [log.configs."
                        f"{config_name}] or use one of {', '.join(sorted(self.log_config.configs))}"
                    ) from None
                manager = self._build(backend)
                self._managers[config_name] = manager
                logger.debug("built the %s backend of config %r", backend.type, config_name)
            return manager

    @property
    def built(self) -> dict[str, LogManager]:
        """The backends built so far, by config name."""
        with self._lock:
            return dict(self._managers)

    def _build(self, backend: BackendConfig) -> LogManager:
        return backend_type(backend.type).open(backend, self.config)

    def _group_manager(self, name: Name, group: str) -> LogManager:
        route = self.log_config.route(name, group)
        manager = self.backend_manager(route.config)
        if not route.by_group or (name, route.config) in self._verified:
            return manager
        home = self.log_config.route(name)
        if home.config == route.config or manager.exists(name):
            self._verified.add((name, route.config))
            return manager
        if self.backend_manager(home.config).exists(name):
            raise ConfigError(
                f"group {group} reads log {name} from config {route.config!r} ({route.reason}), "
                f"but the log lives in config {home.config!r} ({home.reason}), where its writers "
                f'append; add a [[log.match]] rule with namespace = "{name.namespace}" (or the '
                f"log's URN) before the group rule so writers and readers agree"
            )
        return manager

    def _one_manager(self, group: str, names: list[Name], what: str) -> LogManager:
        routes = {name: self.log_config.route(name, group) for name in names}
        configs = {route.config for route in routes.values()}
        if len(configs) > 1:
            detail = "; ".join(
                f"{name} -> {route.config!r} ({route.reason})" for name, route in routes.items()
            )
            raise ConfigError(
                f"a {what} of group {group} cannot read logs of different backends: {detail}. "
                f"Use one {what} per backend, or route these logs to one config"
            )
        managers = [self._group_manager(name, group) for name in names]
        return managers[0]

    # -- logs ------------------------------------------------------------------------------------
    def exists(self, name: str | Name) -> bool:
        return self.backend_for(name).exists(name)

    def create(self, name: str | Name, partitions: int | None = None, **options: Any) -> bool:
        """Create the log where its name routes. A log LogConfig compacts (`compact = true`)
        becomes, on Kafka, a topic with `cleanup.policy=compact` (unless `topic_config` sets
        a policy); a local log is compacted by the retention job."""
        if self.log_config.compacted(name):
            options = backend_type(self.log_config.config_for(name).type).compacted(options)
        return self.backend_for(name).create(name, partitions, **options)

    def size(self, name: str | Name) -> int:
        return self.backend_for(name).size(name)

    def incarnation(self, name: str | Name) -> str | None:
        return self.backend_for(name).incarnation(name)

    def delete(self, name: str | Name) -> bool:
        return self.backend_for(name).delete(name)

    def list_logs(self) -> list[Name]:
        """Every log of the backends calls can reach, once each, sorted by URN."""
        return sorted({name for name, _ in self.locations()}, key=lambda n: n.urn)

    def locations(self) -> list[tuple[Name, BackendConfig]]:
        """(log, config it was found in) for every log of every reachable backend, by URN. A log
        found in two backends (e.g. after a routing change) is listed twice."""
        out = []
        for backend in self.log_config.used():
            for name in self.backend_manager(backend.name).list_logs():
                out.append((name, backend))
        return sorted(out, key=lambda item: item[0].urn)

    def list_groups(self, name: str | Name) -> list[str]:
        return self.backend_for(name).list_groups(name)

    def end_offsets(self, name: str | Name) -> list[int]:
        return self.backend_for(name).end_offsets(name)

    def start_offsets(self, name: str | Name) -> list[int]:
        return self.backend_for(name).start_offsets(name)

    def record_at(self, partition: LogPartition, offset: int) -> tuple[str, bytes, int] | None:
        return self.backend_for(partition.name).record_at(partition, offset)

    def describe(self, name: str | Name) -> LogDescription:
        return self.backend_for(name).describe(name)

    # -- appenders and tailers -------------------------------------------------------------------
    def appender(self, name: str | Name, codec: Codec[Any] | None = None) -> LogAppender[Any]:
        return self.backend_for(name).appender(name, codec)

    def tailer(
        self,
        group: str,
        source: str | Name | LogPartition | Sequence[LogPartition],
        codec: Codec[Any] | None = None,
    ) -> LogTailer[Any]:
        names = _source_names(source)
        if not names:
            return self.backend_manager(self.log_config.default.name).tailer(group, source, codec)
        return self._one_manager(group, names, "tailer").tailer(group, source, codec)

    def subscribe(
        self,
        group: str,
        names: Sequence[str | Name],
        listener: RebalanceListener | None = None,
        codec: Codec[Any] | None = None,
        *,
        start: str = "earliest",
    ) -> LogTailer[Any]:
        if isinstance(names, str | Name):
            names = [names]
        resolved = list(dict.fromkeys(Name.of(n) for n in names))
        if not resolved:
            raise InvalidArgumentError("subscribe needs at least one log name")
        manager = self._one_manager(group, resolved, "subscription")
        return manager.subscribe(group, names, listener, codec, start=start)

    def subscribe_with_standby(
        self,
        group: str,
        names: Sequence[str | Name],
        listener: RebalanceListener | None,
        *,
        standby_replicas: int,
        location: str,
        start: str = "earliest",
    ) -> LogTailer[Any]:
        """`subscribe` with standby replicas, on the backend of the subscription; raises
        `UnsupportedOperationError` when that backend has none (`standby_groups_of`)."""
        resolved = list(dict.fromkeys(Name.of(n) for n in names))
        if not resolved:
            raise InvalidArgumentError("subscribe needs at least one log name")
        manager = standby_groups_of(self._one_manager(group, resolved, "subscription"))
        return manager.subscribe_with_standby(  # type: ignore[no-any-return]
            group,
            names,
            listener,
            standby_replicas=standby_replicas,
            location=location,
            start=start,
        )

    # -- group positions -------------------------------------------------------------------------
    def committed(self, name: str | Name, group: str) -> list[int | None]:
        return self._group_manager(Name.of(name), group).committed(name, group)

    def commit_position(self, partition: LogPartition, group: str, offset: int) -> None:
        manager = self._group_manager(partition.name, group)
        manager.commit_position(partition, group, offset)

    def lag_per_partition(self, name: str | Name, group: str) -> list[LogLag]:
        return self._group_manager(Name.of(name), group).lag_per_partition(name, group)

    def lag(self, name: str | Name, group: str) -> LogLag:
        return self._group_manager(Name.of(name), group).lag(name, group)

    def latency_per_partition(
        self,
        name: str | Name,
        group: str,
        codec: Codec[Any] | None = None,
        now_ms: int | None = None,
    ) -> list[Latency]:
        manager = self._group_manager(Name.of(name), group)
        return manager.latency_per_partition(name, group, codec, now_ms)

    def latency(self, name: str | Name, group: str, codec: Codec[Any] | None = None) -> Latency:
        return self._group_manager(Name.of(name), group).latency(name, group, codec)

    def group_members(self, group: str) -> list[LiveMember]:
        """The live members of `group` in every backend calls can reach (see `list_logs`): a
        group's subscriptions may live in several, as its logs route. Each member once (by
        id), sorted by member id."""
        found: dict[str, LiveMember] = {}
        for backend in self.log_config.used():
            for member in self.backend_manager(backend.name).group_members(group):
                found.setdefault(member.member_id, member)
        return [found[mid] for mid in sorted(found)]

    # -- lifecycle -------------------------------------------------------------------------------
    def close(self) -> None:
        """Close every backend built (all of them, even if one fails; the first error is raised)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            managers = list(self._managers.values())
            self._managers.clear()
        first: BaseException | None = None
        for manager in managers:
            try:
                manager.close()
            except Exception as exc:  # close the others anyway
                logger.warning("closing %s failed: %s", type(manager).__name__, exc)
                first = first or exc
        if first is not None:
            raise first

    def __repr__(self) -> str:
        built = ", ".join(sorted(self._managers)) or "none yet"
        return f"UnifiedLogManager(configs={sorted(self.log_config.configs)}, built={built})"
