"""`LogConfig`: which backend each log lives in, from `include/streamcore.toml` and the environment.

Schema (every key optional; with none of it, every log is a local log under `home`)::

    [log]
    backend = ""                    # force every name to one config or type (see below)

    [log.configs.default]           # a named config; "default" takes unmatched names
    type = "local"                  # local | kafka | memory (streamcore.log.registry)
    # local options: root (folder; relative = under home; default <home>/log), and defaults for
    # logs it creates: partitions, retention, segment_bytes, segment_roll, fsync, max_record_bytes
    # (each defaults to the [log] value of the same name)

    [log.configs.kafka]
    type = "kafka"
    bootstrap_servers = "127.0.0.1:9092"
    topic_prefix = "streamcore-"    # topic = prefix + name id: streamcore-bulk-command
    timeout = "30s"                 # broker operations give up after this (number = seconds)
    replication_factor = 1          # for topics it creates
    partitions = 4                  # for topics created without a count (default: [log] partitions)
    [log.configs.kafka.properties]  # any librdkafka property, passed through as is
    # "security.protocol" = "SASL_SSL"
    # "sasl.password" = "${KAFKA_PASSWORD}"   # from the environment (see below)

    [log.configs.scratch]
    type = "memory"                 # in-process, nothing on disk (tests, examples); no options

    [[log.match]]                   # rules are tried in file order; the first that matches wins
    namespace = "bulk"              # names in namespace bulk (bulk/command, bulk/status, ...)
    config = "kafka"
    archive = true                  # retention archives these logs to Delta before purging
                                    # them (namespace rules only; default true)
    compact = false                 # keep only the latest record per key (namespace rules
                                    # only; default false): Kafka topics are created with
                                    # cleanup.policy=compact, local logs are compacted by the
                                    # retention job (docs/log.md, "Key compaction")
    [[log.match]]
    group = "audit/"                # consumer groups whose URN starts with audit/
    config = "kafka"

A log declared in `[logs."<name>"]` with `backend` or `compact` (streamcore.computation.declared)
gets an exact-name rule of its own, tried before every `[[log.match]]` rule.

A `namespace` or `group` value is a string or a list of strings. A bare word (`"bulk"`) matches that
namespace: `bulk/anything`, and the namespace-less name `bulk` itself. A value with a `/` is a URN
prefix: `"bulk/dlq-"` matches `bulk/dlq-indexer` but not `bulk/command`; `"audit/"` is the whole
namespace. A rule has exactly one of `namespace` or `group`, and a `config`.

Routing (how a call finds its backend):

1. **A log lives where its name routes**: the first `namespace` rule matching the log's URN, else
   the config named `default` (a local config when the file defines none). This decides every
   call that names only a log: create, exists, size, delete, appender, offsets, record_at,
   list_groups. It depends on the name alone, so every process writing or reading a log agrees
   on where it is, whatever groups exist.
2. **Group calls** (tailer, subscribe, committed, lag, latency) carry a log *and* a group. A
   consumer must read the log where it is written and a group's positions are kept next to the
   log (local: in the log's folder; Kafka: by the broker for the topic; memory: in the manager),
   so a namespace rule matching the log always wins. Only for a log that no namespace rule
   matches does a `group` rule apply: the group then reads that log from the group rule's
   config instead of `default` (Nuxeo's `<match group=..>`, with namespace rules taking
   precedence). Use it for logs fed into a backend by something other than this routing, e.g. a
   Kafka topic another system produces: `group = "billing/"` with `config = "kafka"` lets the
   billing consumers read `orders/created` from Kafka while everything else stays local.
   For logs streamcore writes, prefer a `namespace` rule: it routes writers and readers alike.
3. **Conflicts are errors** (`ConfigError`), never a silent read of the wrong place:
   - a tailer or subscription whose logs route to different configs (a tailer reads one
     backend); split it into one tailer per backend, or route the logs to one config;
   - a group rule sending a group to config C for a log that does not exist in C but does exist
     where its name routes (its writers' backend); add a `namespace` rule for that log instead.

Environment overrides (over the file):

- `STREAMCORE_LOG_BACKEND` (or `[log] backend`): route every name and group to one config. The
  value is a config name, or a type `local | kafka | memory`: then the first config of that type
  in the file, or a built-in one with default options. Run the same job against memory in tests
  or against Kafka in staging without editing the file.
- `STREAMCORE_KAFKA_BOOTSTRAP_SERVERS`: the `bootstrap_servers` of every kafka config.
- `STREAMCORE_KAFKA_TOPIC_PREFIX`: the `topic_prefix` of every kafka config.

Each backend type parses its own options (`streamcore.log.<type>.backend`; the types are those of
`streamcore.log.registry`) and applies its own environment: `${NAME}` in a kafka config's
properties is replaced from the environment at load (`streamcore.log.environ`), so credentials
stay out of the file.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streamcore.config import StreamcoreConfig
from streamcore.errors import ConfigError
from streamcore.log.environ import Unresolved
from streamcore.log.registry import DEFAULT_TYPE, backend_type, backend_types
from streamcore.names import NO_NAMESPACE, Name
from streamcore.redact import redact_properties

__all__ = [
    "ARCHIVER",
    "CHANGELOG_SUFFIX",
    "TOOLS_GROUP",
    "BackendConfig",
    "LogConfig",
    "MatchRule",
    "Route",
    "is_state_changelog",
]

DEFAULT_CONFIG = "default"
ENV_BACKEND = "STREAMCORE_LOG_BACKEND"
_CONFIG_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_\-]*")
_NAMESPACE = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_BARE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_]*")
_REST = re.compile(r"[A-Za-z0-9_\-]*")
_RULE_KEYS = ("namespace", "group", "config", "archive", "compact")
# The consumer group of the retention job's archive step: on a log `LogConfig.archived`, purges
# wait for it (streamcore.log.local.retention).
ARCHIVER = "retention/archiver"
# Nuxeo's default group for tools (streamcore's CLI, recovery): read with it, never commit.
TOOLS_GROUP = "admin/tools"
# The name suffix of state-store changelogs (`streamcore.state.changelog.changelog_name`), reserved
# as Kafka Streams reserves it: such a log is state, not history.
CHANGELOG_SUFFIX = "-changelog"


def is_state_changelog(name: str | Name) -> bool:
    """Whether log `name` is a state store's changelog (named `<namespace>/<...>-changelog`)."""
    parsed = Name.of(name)
    return parsed.namespace != NO_NAMESPACE and parsed.name.endswith(CHANGELOG_SUFFIX)


@dataclass(frozen=True)
class BackendConfig:
    """One named config: a backend type and its validated options."""

    name: str
    type: str
    options: Mapping[str, Any] = field(default_factory=dict)
    builtin: bool = False

    @property
    def key(self) -> str:
        return f"log.configs.{self.name}"

    @property
    def label(self) -> str:
        """How tools show it: `type`, or `type:name` for a config not named `default` or after
        its type (`local`, `kafka`, `memory:scratch`, `local:archive`)."""
        return self.type if self.name in (self.type, DEFAULT_CONFIG) else f"{self.type}:{self.name}"

    def __repr__(self) -> str:
        # Secret properties (sasl.password, ... whether written or from `${VAR}`) never show.
        options = dict(self.options)
        properties = options.get("properties")
        if isinstance(properties, Mapping) and not isinstance(properties, Unresolved):
            options["properties"] = redact_properties(properties)
        return (
            f"BackendConfig(name={self.name!r}, type={self.type!r}, options={options!r}, "
            f"builtin={self.builtin!r})"
        )


@dataclass(frozen=True)
class MatchRule:
    """One `[[log.match]]` entry. `position` counts from 1 in file order."""

    position: int
    config: str
    namespaces: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    names: tuple[str, ...] = ()  # exact log URNs: a declared `[logs."<name>"]` with a backend
    archive: bool = True  # namespace rules: whether retention archives the logs (`archived`)
    compact: bool = False  # namespace rules: whether the logs keep only the latest per key

    @property
    def label(self) -> str:
        if self.names:
            return f'[logs."{self.names[0]}"]'
        kind, values = ("namespace", self.namespaces) if self.namespaces else ("group", self.groups)
        shown = f'"{values[0]}"' if len(values) == 1 else "[" + ", ".join(values) + "]"
        return f"[[log.match]] #{self.position} ({kind} = {shown})"

    def matches_name(self, urn: str) -> bool:
        return urn in self.names or any(_prefix_matches(p, urn) for p in self.namespaces)

    def matches_group(self, urn: str) -> bool:
        return any(_prefix_matches(p, urn) for p in self.groups)


@dataclass(frozen=True)
class Route:
    """Where a call goes (`config`) and why (`reason`, for messages and `streamcore route`)."""

    config: str
    reason: str
    by_group: bool = False


def _prefix_matches(prefix: str, urn: str) -> bool:
    if "/" in prefix:
        return urn.startswith(prefix)
    return urn == prefix or urn.startswith(prefix + "/")


class LogConfig:
    """The parsed routing: named backend configs, match rules, and an optional forced config."""

    def __init__(
        self,
        configs: Mapping[str, BackendConfig] | None = None,
        rules: tuple[MatchRule, ...] | list[MatchRule] = (),
        forced: Route | None = None,
    ) -> None:
        configs = dict(configs or {})
        if DEFAULT_CONFIG not in configs:
            configs[DEFAULT_CONFIG] = BackendConfig(DEFAULT_CONFIG, DEFAULT_TYPE, {}, builtin=True)
        self.configs: dict[str, BackendConfig] = configs
        self.rules: tuple[MatchRule, ...] = tuple(rules)
        self.forced = forced
        for rule in self.rules:
            if rule.config not in configs:
                raise ConfigError(_unknown_config(rule, configs))
        if forced is not None and forced.config not in configs:
            raise ConfigError(f"{forced.reason}: no config named {forced.config!r}")
        self._name_rules = tuple(r for r in self.rules if r.namespaces or r.names)
        self._group_rules = tuple(r for r in self.rules if r.groups)
        self._cache: dict[tuple[str, str | None], Route] = {}

    # -- loading -------------------------------------------------------------------------------
    @classmethod
    def parse(
        cls, document: Mapping[str, Any], environ: Mapping[str, str] | None = None
    ) -> LogConfig:
        """Build from a whole parsed TOML document (its `[log]` table) plus the environment."""
        env = os.environ if environ is None else environ
        log = document.get("log", {})
        if not isinstance(log, Mapping):
            raise ConfigError(f"[log] in the config file must be a table, got {log!r}")
        raw_configs = log.get("configs", {})
        if not isinstance(raw_configs, Mapping):
            raise ConfigError(
                "log.configs must be a table of named configs, e.g. [log.configs.default] "
                'with type = "local"'
            )
        configs = {name: _parse_backend(name, raw) for name, raw in raw_configs.items()}
        raw_rules = log.get("match", [])
        if isinstance(raw_rules, Mapping):
            raw_rules = [raw_rules]
        if not isinstance(raw_rules, list):
            raise ConfigError(
                "log.match must be an array of tables: write each rule as [[log.match]] with "
                "namespace = ... or group = ..., and config = ..."
            )
        rules = [_parse_rule(i + 1, raw) for i, raw in enumerate(raw_rules)]
        if DEFAULT_CONFIG not in configs:
            configs[DEFAULT_CONFIG] = BackendConfig(DEFAULT_CONFIG, DEFAULT_TYPE, {}, builtin=True)
        for kind in backend_types():
            backend_type(kind).environment(env)
        forced_value, forced_source = None, None
        if env.get(ENV_BACKEND, "").strip():
            forced_value, forced_source = env[ENV_BACKEND].strip(), ENV_BACKEND
        elif log.get("backend"):
            forced_value, forced_source = log["backend"], "log.backend"
        forced = None
        if forced_value is not None:
            forced = _forced_route(forced_value, forced_source or "", configs)
            if forced.config not in configs:  # a built-in config of a type
                configs[forced.config] = BackendConfig(
                    forced.config, forced.config, {}, builtin=True
                )
        rules = _declared_rules(document.get("logs", {}), cls(configs, rules, forced)) + rules
        config = cls(configs, rules, forced)
        reachable = {backend.name for backend in config.used()}
        for name, backend in config.configs.items():
            found = backend_type(backend.type).configure(backend, env, name in reachable)
            config.configs[name] = found
        return config

    @classmethod
    def from_settings(
        cls, settings: StreamcoreConfig, environ: Mapping[str, str] | None = None
    ) -> LogConfig:
        """The routing of a loaded configuration (`load_config()`), with env overrides."""
        return cls.parse(settings.table, environ)

    @classmethod
    def load(cls, path: str | Path, environ: Mapping[str, str] | None = None) -> LogConfig:
        try:
            document = tomllib.loads(Path(path).read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"cannot read config {path}: {exc}; fix the TOML syntax") from exc
        return cls.parse(document, environ)

    # -- routing -------------------------------------------------------------------------------
    def route(self, name: str | Name, group: str | Name | None = None) -> Route:
        """Where a call on log `name` (for consumer `group`, if any) goes; see module docstring."""
        urn = Name.of(name).urn
        group_urn = Name.of(group).urn if group is not None else None
        key = (urn, group_urn)
        found = self._cache.get(key)
        if found is not None:
            return found
        found = self._route(urn, group_urn)
        if len(self._cache) < 100_000:
            self._cache[key] = found
        return found

    def _route(self, urn: str, group_urn: str | None) -> Route:
        if self.forced is not None:
            return self.forced
        for rule in self._name_rules:
            if rule.matches_name(urn):
                return Route(rule.config, rule.label)
        if group_urn is not None:
            for rule in self._group_rules:
                if rule.matches_group(group_urn):
                    return Route(rule.config, rule.label, by_group=True)
        return Route(DEFAULT_CONFIG, "no [[log.match]] rule matches, so the default config")

    def archived(self, name: str | Name) -> bool:
        """Whether retention archives log `name` to the Delta `archive` table before purging
        it: the `archive` setting of the first namespace rule matching it (default true), so
        it holds whichever backend a forced route sends the log to. A log no rule matches is
        archived; a state store's changelog never is (it is state, kept by compaction, not
        history)."""
        if is_state_changelog(name):
            return False
        urn = Name.of(name).urn
        for rule in self._name_rules:
            if rule.matches_name(urn):
                return rule.archive
        return True

    def compacted(self, name: str | Name) -> bool:
        """Whether log `name` is key-compacted (only the latest record per key is kept): the
        `compact` setting of the first namespace rule matching it (default false); a state
        store's changelog always is."""
        if is_state_changelog(name):
            return True
        urn = Name.of(name).urn
        for rule in self._name_rules:
            if rule.matches_name(urn):
                return rule.compact
        return False

    def config_for(self, name: str | Name, group: str | Name | None = None) -> BackendConfig:
        return self.configs[self.route(name, group).config]

    @property
    def default(self) -> BackendConfig:
        return self.configs[self.forced.config if self.forced else DEFAULT_CONFIG]

    def used(self) -> list[BackendConfig]:
        """The configs calls can reach: the forced one, else `default` and every rule's config."""
        if self.forced is not None:
            return [self.configs[self.forced.config]]
        names = [DEFAULT_CONFIG]
        for rule in self.rules:
            if rule.config not in names:
                names.append(rule.config)
        return [self.configs[n] for n in names]


# -- parsing helpers ---------------------------------------------------------------------------
def _unknown_config(rule: MatchRule, configs: Mapping[str, Any]) -> str:
    return (
        f"{rule.label}: config = {rule.config!r} is not defined; add a [log.configs.{rule.config}] "
        f"table with a type, or use one of: {', '.join(sorted(configs))}"
    )


def _parse_backend(name: Any, raw: Any) -> BackendConfig:
    if not isinstance(name, str) or not _CONFIG_NAME.fullmatch(name):
        raise ConfigError(
            f"log.configs.{name}: a config name uses letters, digits, '_' and '-' only"
        )
    key = f"log.configs.{name}"
    if not isinstance(raw, Mapping):
        raise ConfigError(f'{key} must be a table, e.g. [{key}] with type = "local"')
    kind = raw.get("type")
    types = backend_types()
    if kind is None:
        raise ConfigError(f"{key}.type is missing; set type = one of {', '.join(types)}")
    if kind not in types:
        raise ConfigError(
            f"{key}.type = {kind!r} is not a backend type; use one of {', '.join(types)}"
        )
    backend = backend_type(kind)
    allowed = backend.options
    unknown = sorted(set(raw) - {"type", *allowed})
    if unknown:
        hint = f"use {', '.join(allowed)}" if allowed else f"a {kind} config takes no options"
        raise ConfigError(f"{key}: unknown option(s) {', '.join(unknown)} for type {kind}; {hint}")
    return BackendConfig(name, kind, backend.parse_options(key, raw))


def _parse_prefixes(value: Any, key: str) -> tuple[str, ...]:
    values = value if isinstance(value, list) else [value]
    if not values:
        raise ConfigError(f"{key} is an empty list; give at least one prefix")
    out = []
    for item in values:
        if not isinstance(item, str) or not item.strip():
            raise ConfigError(f"{key} must be a string or a list of strings, got {item!r}")
        text = item.strip()
        if "/" in text:
            namespace, _, rest = text.partition("/")
            valid = bool(_NAMESPACE.fullmatch(namespace)) and bool(_REST.fullmatch(rest))
        else:
            valid = bool(_BARE.fullmatch(text))
        if not valid:
            raise ConfigError(
                f'{key} = {item!r} is not a name prefix: use a namespace such as "bulk" or a '
                'URN prefix such as "bulk/dlq-" (letters, digits, _ and -)'
            )
        out.append(text)
    return tuple(out)


def _parse_rule(position: int, raw: Any) -> MatchRule:
    key = f"[[log.match]] #{position}"
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{key} must be a table with namespace or group, and config")
    unknown = sorted(set(raw) - set(_RULE_KEYS))
    if unknown:
        raise ConfigError(
            f"{key}: unknown key(s) {', '.join(unknown)}; a rule has namespace or group, and config"
        )
    has_ns, has_group = "namespace" in raw, "group" in raw
    if not has_ns and not has_group:
        raise ConfigError(
            f'{key} has neither namespace nor group; add namespace = "bulk" (logs by name) or '
            'group = "audit/" (consumer groups)'
        )
    if has_ns and has_group:
        raise ConfigError(
            f"{key} has both namespace and group; split it into two [[log.match]] rules (one "
            "routes logs by name, the other consumer groups)"
        )
    config = raw.get("config")
    if not isinstance(config, str) or not config:
        raise ConfigError(f'{key}.config is missing; name the config to use, e.g. config = "kafka"')
    settings: dict[str, bool] = {}
    for setting, default in (("archive", True), ("compact", False)):
        value = raw.get(setting, default)
        if not isinstance(value, bool):
            raise ConfigError(f"{key}.{setting} must be true or false, got {value!r}")
        settings[setting] = value
    if has_ns:
        namespaces = _parse_prefixes(raw["namespace"], f"{key}.namespace")
        return MatchRule(
            position,
            config,
            namespaces=namespaces,
            archive=settings["archive"],
            compact=settings["compact"],
        )
    for setting in ("archive", "compact"):
        if setting in raw:
            raise ConfigError(
                f"{key}: {setting} applies to logs, and this rule routes consumer groups; put "
                f"{setting} = ... on a namespace rule matching the logs"
            )
    return MatchRule(position, config, groups=_parse_prefixes(raw["group"], f"{key}.group"))


def _declared_rules(declared: Any, base: LogConfig) -> list[MatchRule]:
    """Exact-name rules for the `[logs."<name>"]` tables that set `backend` or `compact`
    (streamcore.computation.declared): they come before every `[[log.match]]` rule. A declared
    log without a backend stays where the other rules route it."""
    if not isinstance(declared, Mapping):
        raise ConfigError(f"[logs] in the config file must be a table, got {declared!r}")
    out = []
    for name, raw in declared.items():
        if not isinstance(raw, Mapping) or not ({"backend", "compact"} & set(raw)):
            continue
        where = f'[logs."{name}"]'
        urn = Name.of(name).urn
        backend, compact = raw.get("backend"), raw.get("compact", False)
        if not isinstance(compact, bool):
            raise ConfigError(f"{where}.compact must be true or false, got {compact!r}")
        if backend is not None and backend not in base.configs:
            raise ConfigError(
                f"{where}.backend is {backend!r}, but no [log.configs.{backend}] exists; the "
                f"configs are {', '.join(sorted(base.configs))}"
            )
        config = backend if backend is not None else base.route(urn).config
        out.append(MatchRule(0, config, names=(urn,), archive=base.archived(urn), compact=compact))
    return out


def _forced_route(value: Any, source: str, configs: Mapping[str, BackendConfig]) -> Route:
    shown = f"{source}={value}" if source == ENV_BACKEND else f"{source} = {value!r}"
    types = backend_types()
    if not isinstance(value, str):
        raise ConfigError(f"{shown}: use a config name or one of {', '.join(types)}")
    if value in configs:
        return Route(value, f"{shown} forces every log to config {value!r}")
    if value in types:
        for cfg in configs.values():
            if cfg.type == value:
                return Route(cfg.name, f"{shown} forces every log to config {cfg.name!r}")
        return Route(value, f"{shown} forces every log to a built-in {value} config")
    raise ConfigError(
        f"{shown} is neither a config nor a backend type; use one of "
        f"{', '.join(sorted({*configs, *types}))}"
    )
