"""`LogConfig`: which backend each log lives in, from `include/streamcore.toml` and the environment.

Schema (every key optional; with none of it, every log is a local log under `home`)::

    [log]
    backend = ""                    # force every name to one config or type (see below)

    [log.configs.default]           # a named config; "default" takes unmatched names
    type = "local"                  # local | kafka | memory
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

Environment variables in a kafka config's properties (credentials stay out of the file): in every
string value of `[log.configs.<name>.properties]`, `${NAME}` is replaced by the variable `NAME`,
`${NAME:-default}` by `default` when `NAME` is unset or empty, and `$${` is a literal `${` (in a
run of `$` before `{`, `$$` is one `$`: `$$${NAME}` is `$` then the value; any other `$` stays).
`NAME` unset (or empty: CI systems pass a missing secret as an empty string) without a default
raises `ConfigError` naming the variable, the property and the config, and the fix. The variables
are read when the file is loaded (`LogConfig.parse` / `load`, with `environ`), in the process that
loads it: for a Spark job that is the driver, and the resolved values travel in the log's
description (`KafkaLogDescription.properties` -> `kafka.sasl.jaas.config`), so executors need no
such variable. An unset variable in a config that no call can reach (not `default`, no rule's,
not the forced one) fails only when that config is opened, not at load: a file naming
`${KAFKA_PASSWORD}` still loads where the Kafka config is not used (`STREAMCORE_LOG_BACKEND=memory`
in tests). A malformed reference (`${}`, `${1X}`, an unclosed `${`) is an error at load, always.
Resolved values are secrets like written ones: reprs show `***` for passwords, secrets, tokens,
JAAS configs and private keys (`streamcore.redact.redact_properties`), and no error message
shows a property's value.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streamcore.config import FSYNC_MODES, StreamcoreConfig, parse_duration_ms
from streamcore.errors import ConfigError
from streamcore.names import Name
from streamcore.redact import redact_properties

TYPES = ("local", "kafka", "memory")
DEFAULT_CONFIG = "default"
ENV_BACKEND = "STREAMCORE_LOG_BACKEND"
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
LOCAL_OPTIONS = (
    "root",
    "partitions",
    "retention",
    "segment_bytes",
    "segment_roll",
    "fsync",
    "max_record_bytes",
)
_OPTIONS = {
    "local": LOCAL_OPTIONS,
    "kafka": tuple(KAFKA_DEFAULTS),
    "memory": (),
}
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
# A run of "$" before "{": each "$$" is a literal "$"; an odd run ends with a reference "${".
_DOLLARS_BRACE = re.compile(r"(\$+)\{")
_VARIABLE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(?::-(.*))?", re.DOTALL)
_REFERENCE_SYNTAX = (
    "write ${NAME} or ${NAME:-default} (NAME: letters, digits and _, not starting with a digit; "
    'a default holds no "}" and no "${"), or $${ for a literal "${"'
)


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
        if isinstance(properties, Mapping) and not isinstance(properties, _Unresolved):
            options["properties"] = redact_properties(properties)
        return (
            f"BackendConfig(name={self.name!r}, type={self.type!r}, options={options!r}, "
            f"builtin={self.builtin!r})"
        )

    def local_root(self, home: Path) -> Path:
        """The folder of a local config's logs."""
        root = self.options.get("root")
        if root is None:
            return home / "log"
        path = Path(root).expanduser()
        return path if path.is_absolute() else home / path


@dataclass(frozen=True)
class MatchRule:
    """One `[[log.match]]` entry. `position` counts from 1 in file order."""

    position: int
    config: str
    namespaces: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    archive: bool = True  # namespace rules: whether retention archives the logs (`archived`)
    compact: bool = False  # namespace rules: whether the logs keep only the latest per key

    @property
    def label(self) -> str:
        kind, values = ("namespace", self.namespaces) if self.namespaces else ("group", self.groups)
        shown = f'"{values[0]}"' if len(values) == 1 else "[" + ", ".join(values) + "]"
        return f"[[log.match]] #{self.position} ({kind} = {shown})"

    def matches_name(self, urn: str) -> bool:
        return any(_prefix_matches(p, urn) for p in self.namespaces)

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
            configs[DEFAULT_CONFIG] = BackendConfig(DEFAULT_CONFIG, "local", {}, builtin=True)
        self.configs: dict[str, BackendConfig] = configs
        self.rules: tuple[MatchRule, ...] = tuple(rules)
        self.forced = forced
        for rule in self.rules:
            if rule.config not in configs:
                raise ConfigError(_unknown_config(rule, configs))
        if forced is not None and forced.config not in configs:
            raise ConfigError(f"{forced.reason}: no config named {forced.config!r}")
        self._name_rules = tuple(r for r in self.rules if r.namespaces)
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
            configs[DEFAULT_CONFIG] = BackendConfig(DEFAULT_CONFIG, "local", {}, builtin=True)
        configs = _apply_kafka_env(configs, env)
        forced_value, forced_source = None, None
        if env.get(ENV_BACKEND, "").strip():
            forced_value, forced_source = env[ENV_BACKEND].strip(), ENV_BACKEND
        elif log.get("backend"):
            forced_value, forced_source = log["backend"], "log.backend"
        forced = None
        if forced_value is not None:
            forced = _forced_route(forced_value, forced_source or "", configs)
            if forced.config not in configs:  # a built-in config of a type
                builtin = BackendConfig(forced.config, forced.config, {}, builtin=True)
                configs[forced.config] = _apply_kafka_env({"x": builtin}, env)["x"]
        config = cls(configs, rules, forced)
        reachable = {backend.name for backend in config.used()}
        for name, backend in config.configs.items():
            if backend.type == "kafka":
                config.configs[name] = _resolve_properties(backend, env, name in reachable)
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
        archived."""
        urn = Name.of(name).urn
        for rule in self._name_rules:
            if rule.matches_name(urn):
                return rule.archive
        return True

    def compacted(self, name: str | Name) -> bool:
        """Whether log `name` is key-compacted (only the latest record per key is kept): the
        `compact` setting of the first namespace rule matching it (default false)."""
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
    if kind is None:
        raise ConfigError(f"{key}.type is missing; set type = one of {', '.join(TYPES)}")
    if kind not in TYPES:
        raise ConfigError(
            f"{key}.type = {kind!r} is not a backend type; use one of {', '.join(TYPES)}"
        )
    allowed = _OPTIONS[kind]
    unknown = sorted(set(raw) - {"type", *allowed})
    if unknown:
        hint = f"use {', '.join(allowed)}" if allowed else "a memory config takes no options"
        raise ConfigError(f"{key}: unknown option(s) {', '.join(unknown)} for type {kind}; {hint}")
    parse = _parse_local if kind == "local" else _parse_kafka if kind == "kafka" else None
    options = parse(key, raw) if parse else {}
    return BackendConfig(name, kind, options)


def _int(value: Any, key: str, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{key} must be an integer, got {value!r}")
    if value < low or (high is not None and value > high):
        bounds = f"{low}..{high}" if high is not None else f"at least {low}"
        raise ConfigError(f"{key} is {value}; use {bounds}")
    return value


def _str(value: Any, key: str, *, empty: bool = False) -> str:
    if not isinstance(value, str) or (not empty and not value.strip()):
        raise ConfigError(f"{key} must be a non-empty string, got {value!r}")
    return value


def _duration(value: Any, key: str) -> int:
    if isinstance(value, bool):
        raise ConfigError(f"{key} must be a duration such as '4d' or '12h', got {value!r}")
    return parse_duration_ms(value, key)


def _parse_local(key: str, raw: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "root" in raw:
        out["root"] = _str(raw["root"], f"{key}.root")
    if "partitions" in raw:
        out["partitions"] = _int(raw["partitions"], f"{key}.partitions", 1, 1000)
    if "retention" in raw:
        out["retention_ms"] = _duration(raw["retention"], f"{key}.retention")
    if "segment_bytes" in raw:
        out["segment_bytes"] = _int(raw["segment_bytes"], f"{key}.segment_bytes", 4096)
    if "segment_roll" in raw:
        out["segment_roll_ms"] = _duration(raw["segment_roll"], f"{key}.segment_roll")
    if "fsync" in raw:
        fsync = raw["fsync"]
        if fsync not in FSYNC_MODES:
            raise ConfigError(f"{key}.fsync = {fsync!r}; use one of {', '.join(FSYNC_MODES)}")
        out["fsync"] = fsync
    if "max_record_bytes" in raw:
        out["max_record_bytes"] = _int(raw["max_record_bytes"], f"{key}.max_record_bytes", 1)
    return out


def _seconds(value: Any, key: str) -> float:
    if isinstance(value, bool):
        raise ConfigError(f"{key} must be seconds or a duration such as '30s', got {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        seconds = parse_duration_ms(value, key) / 1000
    if seconds <= 0:
        raise ConfigError(f"{key} is {value!r}; use a positive duration such as '30s'")
    return seconds


def _parse_kafka(key: str, raw: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(KAFKA_DEFAULTS)
    out["properties"] = {}
    if "bootstrap_servers" in raw:
        out["bootstrap_servers"] = _str(raw["bootstrap_servers"], f"{key}.bootstrap_servers")
    if "topic_prefix" in raw:
        out["topic_prefix"] = _str(raw["topic_prefix"], f"{key}.topic_prefix", empty=True)
    if "timeout" in raw:
        out["timeout"] = _seconds(raw["timeout"], f"{key}.timeout")
    if "replication_factor" in raw:
        out["replication_factor"] = _int(
            raw["replication_factor"], f"{key}.replication_factor", 1, 32767
        )
    if "partitions" in raw:
        out["partitions"] = _int(raw["partitions"], f"{key}.partitions", 1, 100_000)
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
    settings = {}
    for setting, default in (("archive", True), ("compact", False)):
        value = raw.get(setting, default)
        if not isinstance(value, bool):
            raise ConfigError(f"{key}.{setting} must be true or false, got {value!r}")
        settings[setting] = value
    if has_ns:
        namespaces = _parse_prefixes(raw["namespace"], f"{key}.namespace")
        return MatchRule(position, config, namespaces=namespaces, **settings)
    for setting in ("archive", "compact"):
        if setting in raw:
            raise ConfigError(
                f"{key}: {setting} applies to logs, and this rule routes consumer groups; put "
                f"{setting} = ... on a namespace rule matching the logs"
            )
    return MatchRule(position, config, groups=_parse_prefixes(raw["group"], f"{key}.group"))


def _apply_kafka_env(
    configs: dict[str, BackendConfig], env: Mapping[str, str]
) -> dict[str, BackendConfig]:
    bootstrap = env.get(ENV_KAFKA_BOOTSTRAP)
    prefix = env.get(ENV_KAFKA_PREFIX)
    if bootstrap is not None and not bootstrap.strip():
        raise ConfigError(f"{ENV_KAFKA_BOOTSTRAP} is empty; unset it or give host:port[,host:port]")
    out = {}
    for name, cfg in configs.items():
        if cfg.type == "kafka":
            options = dict(KAFKA_DEFAULTS) | dict(cfg.options)
            if bootstrap is not None:
                options["bootstrap_servers"] = bootstrap.strip()
            if prefix is not None:
                options["topic_prefix"] = prefix
            cfg = BackendConfig(cfg.name, cfg.type, options, cfg.builtin)
        out[name] = cfg
    return out


class _UnsetVariable(ConfigError):
    """A `${NAME}` whose variable is unset or empty, with no default."""

    def __init__(self, message: str, variable: str) -> None:
        super().__init__(message)
        self.variable = variable


class _Unresolved(Mapping[str, Any]):
    """The properties of a kafka config that no call can reach and whose `${NAME}` is not set:
    loading the file does not fail for a config it does not open; reading them (opening the
    backend: `KafkaLogManager(config=...)`) raises the `ConfigError` of the missing variable."""

    def __init__(self, error: _UnsetVariable) -> None:
        self.message = str(error)
        self.variable = error.variable

    def _raise(self) -> Any:
        raise ConfigError(self.message)

    def __getitem__(self, key: str) -> Any:
        return self._raise()

    def __iter__(self) -> Any:
        return self._raise()

    def __len__(self) -> int:
        return int(self._raise())

    def __eq__(self, other: object) -> bool:
        return other is self

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<unresolved: ${{{self.variable}}}, its variable is unset or empty>"


def _substitute(text: str, env: Mapping[str, str], where: str) -> str:
    """`text` with `${NAME}` / `${NAME:-default}` replaced from `env`; before a `{`, `$$` is a
    literal `$` (`$${X}` -> `${X}`, `$$${X}` -> `$` + X). Other `$` stay as written. Messages name
    the variable and `where` (the property), never the value."""
    out: list[str] = []
    pos = 0
    while (match := _DOLLARS_BRACE.search(text, pos)) is not None:
        dollars = len(match.group(1))
        out.append(text[pos : match.start()] + "$" * (dollars // 2))
        pos = match.end()
        if dollars % 2 == 0:  # escaped: a literal "{"
            out.append("{")
            continue
        close = text.find("}", pos)
        parsed = _VARIABLE.fullmatch(text[pos:close]) if close >= 0 else None
        if parsed is None or "${" in (parsed.group(2) or ""):
            raise ConfigError(
                f'{where} holds a "${{" that is not a variable reference; {_REFERENCE_SYNTAX}'
            )
        out.append(_lookup(parsed.group(1), parsed.group(2), env, where))
        pos = close + 1
    out.append(text[pos:])
    return "".join(out)


def _lookup(variable: str, default: str | None, env: Mapping[str, str], where: str) -> str:
    value = env.get(variable, "")
    if value:
        return value
    if default is not None:
        return default
    state = "is set but empty" if variable in env else "is not set"
    raise _UnsetVariable(
        f"{where} takes ${{{variable}}} from the environment, but the environment variable "
        f"{variable} {state}; export {variable} in the environment of the process that loads "
        "the config (the shell, the Airflow worker, the Spark driver: executors get the "
        f'resolved value), or give a default: "${{{variable}:-default}}"',
        variable,
    )


def _resolve_properties(
    backend: BackendConfig, env: Mapping[str, str], reachable: bool
) -> BackendConfig:
    """A kafka config with `${NAME}` resolved in its properties' string values. An unset variable
    raises for a config calls can reach; for another, reading its properties raises."""
    properties = backend.options.get("properties", {})
    resolved: dict[str, Any] = {}
    unset: _UnsetVariable | None = None
    for prop, value in properties.items():
        if not isinstance(value, str) or "${" not in value:
            resolved[prop] = value
            continue
        try:
            resolved[prop] = _substitute(value, env, f'{backend.key}.properties."{prop}"')
        except _UnsetVariable as exc:  # go on: a malformed reference elsewhere fails at load
            unset = unset or exc
    if unset is not None:
        if reachable:
            raise ConfigError(str(unset)) from None
        options = {**backend.options, "properties": _Unresolved(unset)}
    else:
        options = {**backend.options, "properties": resolved}
    return BackendConfig(backend.name, backend.type, options, backend.builtin)


def _forced_route(value: Any, source: str, configs: Mapping[str, BackendConfig]) -> Route:
    shown = f"{source}={value}" if source == ENV_BACKEND else f"{source} = {value!r}"
    if not isinstance(value, str):
        raise ConfigError(f"{shown}: use a config name or one of {', '.join(TYPES)}")
    if value in configs:
        return Route(value, f"{shown} forces every log to config {value!r}")
    if value in TYPES:
        for cfg in configs.values():
            if cfg.type == value:
                return Route(cfg.name, f"{shown} forces every log to config {cfg.name!r}")
        return Route(value, f"{shown} forces every log to a built-in {value} config")
    raise ConfigError(
        f"{shown} is neither a config nor a backend type; use one of "
        f"{', '.join(sorted({*configs, *TYPES}))}"
    )
