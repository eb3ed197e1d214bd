"""The one configuration object: `include/streamcore.toml`, overridden by `STREAMCORE_*` variables.

Resolution order for each key: environment variable, then the TOML file, then the default below.
The file is found at `$STREAMCORE_CONFIG`, else `include/streamcore.toml` under the current
directory or the project root (`project_root()`).

`home` (STREAMCORE_HOME) defaults to `data/` under the project root, and a relative `home` from the
file or the environment is resolved against the project root too, as `codec.schemas_dir` is: DAG
processes, Spark drivers, the CLI and the plugin each run in their own working directory, and must
all find the same home. A `home=` override (the `--home` option) is resolved against the working
directory, as any path given on a command line.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field, fields
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamcore.errors import ConfigError
from streamcore.log.registry import MAX_PARTITIONS, partitions_in_range
from streamcore.redact import redact_credentials

if TYPE_CHECKING:
    from streamcore.log.tuning import GroupTuning

__all__ = [
    "FSYNC_MODES",
    "CronSchedule",
    "LogDefaults",
    "StreamcoreConfig",
    "load_config",
    "parse_cron_schedule",
    "parse_duration_ms",
    "project_root",
    "streamcore_home",
]


# The checkout this package runs from: streamcore/ lies directly under it.
_PROJECT_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_HOME = "data"  # under the project root
FSYNC_MODES = ("none", "batch", "always")
# The local log stores a record inside one batch, whose body holds at most 1 GiB
# (streamcore.log.local.segment.MAX_BATCH_BODY), 16 bytes of it the record's offsets.
MAX_RECORD_BYTES_LIMIT = (1 << 30) - 16
_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d)?\s*$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
AUDIT_SCHEDULE = "*/5 * * * *"


def project_root() -> Path:
    """The project folder: the checkout whose `streamcore/` package runs (`make` installs it
    editable), holding include/, jobs/, dags/, .cache/ and the default home data/. The same in
    every process whatever its working directory, so default paths are taken from it."""
    return _PROJECT_ROOT


def parse_duration_ms(value: str | int, what: str = "duration") -> int:
    """`"4d"`, `"12h"`, `"500ms"`, `"30"` (seconds) or an int of ms → milliseconds."""
    if isinstance(value, int):
        return value
    match = _DURATION.match(str(value))
    if not match:
        raise ConfigError(
            f"invalid {what} {value!r}: use a number with a unit ms|s|m|h|d, e.g. '4d' or '500ms'"
        )
    number, unit = match.groups()
    return int(number) * _UNIT_MS[unit or "s"]


@dataclass(frozen=True)
class CronSchedule:
    """A cron expression (read in UTC) whose runs come at one fixed `period`, so that the data
    intervals of a DAG's runs, each the `period` before its run, tile time without gap or
    overlap: a backfill over any range then covers every instant once."""

    cron: str
    period: timedelta


# Airflow's presets with a fixed period (@monthly and longer have none: months differ).
_CRON_PRESETS = {"@hourly": "0 * * * *", "@daily": "0 0 * * *", "@weekly": "0 0 * * 0"}
_WEEKDAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]
_CRON_ITEM = re.compile(r"^(?:\*|(\w+)(?:-(\w+))?)(?:/(\d+))?$")
_WEEK_MINUTES = 7 * 1440


def parse_cron_schedule(value: Any, what: str) -> CronSchedule:
    """A five-field cron expression (minute hour day-of-month month day-of-week: numbers, `*`,
    `a-b`, lists, `/step`, day names) or @hourly / @daily / @weekly, whose runs come at one fixed
    period; raises ConfigError naming `what`, the problem and the fix otherwise."""
    text = " ".join(str(value).split())
    cron = _CRON_PRESETS.get(text, text)
    parts = cron.split(" ")
    where = f"{what} is {value!r}"
    example = "e.g. '*/5 * * * *' (every 5 minutes), '0 * * * *' (hourly), '30 2 * * *' (daily)"
    if text.startswith("@") and text not in _CRON_PRESETS:
        raise ConfigError(
            f"{where}; of the presets only {', '.join(_CRON_PRESETS)} run at one fixed period "
            f"(each run's data interval is the period before it); {example}"
        )
    if len(parts) != 5:
        raise ConfigError(
            f"{where}, not a cron expression of 5 fields (minute hour day-of-month month "
            f"day-of-week); {example}"
        )
    minute, hour, day, month, weekday = parts
    if day != "*" or month != "*":
        raise ConfigError(
            f"{where}: it runs on some days of the month or months only, whose lengths differ, "
            "so its runs do not come at one fixed period (each run's data interval is the period "
            f"before it); keep day-of-month and month '*', {example}"
        )
    minutes = _cron_field(minute, "minute", 59, where)
    hours = _cron_field(hour, "hour", 23, where)
    weekdays = _cron_field(weekday, "day-of-week", 7, where)
    days = {d % 7 for d in weekdays}  # 7 is Sunday too
    fires = sorted(d * 1440 + h * 60 + m for d in days for h in hours for m in minutes)
    gaps = {b - a for a, b in zip(fires, [*fires[1:], fires[0] + _WEEK_MINUTES], strict=True)}
    if len(gaps) > 1:
        raise ConfigError(
            f"{where}: its runs come {min(gaps)} to {max(gaps)} minutes apart, not at one fixed "
            "period (each run's data interval is the period before it, so uneven gaps would "
            f"leave time out of backfills); {example}"
        )
    return CronSchedule(cron, timedelta(minutes=gaps.pop()))


def _cron_field(text: str, name: str, high: int, where: str) -> set[int]:
    """The values of one cron field, from 0 to `high`."""
    names = _WEEKDAYS if name == "day-of-week" else []

    def bad(item: str) -> ConfigError:
        return ConfigError(
            f"{where}: its {name} field has {item!r}; give *, a number 0..{high}"
            f"{', sun..sat' if names else ''}, a range a-b (a <= b), a list a,b or a step */n "
            "(n >= 1)"
        )

    def number(token: str, item: str) -> int:
        if token in names:
            return names.index(token)
        if token.isdigit() and int(token) <= high:
            return int(token)
        raise bad(item)

    found: set[int] = set()
    for item in text.split(","):
        match = _CRON_ITEM.match(item.lower())
        if match is None:
            raise bad(item)
        low, up, step = match.groups()
        first = 0 if low is None else number(low, item)
        # `*` and `a/n` run to the field's end; `a` alone is one value.
        last = high if low is None or (up is None and step) else number(up or low, item)
        every = int(step or 1)
        if last < first or every == 0:
            raise bad(item)
        found.update(range(first, last + 1, every))
    return found


@dataclass(frozen=True)
class LogDefaults:
    """The `[log]` section: defaults of new logs (partitions; the local log's retention, segments,
    fsync and record size), checked when built."""

    partitions: int = 4
    retention_ms: int = 4 * 86_400_000
    segment_bytes: int = 128 * 1024 * 1024
    segment_roll_ms: int = 86_400_000
    fsync: str = "none"
    max_record_bytes: int = 1024 * 1024

    def __post_init__(self) -> None:
        if self.fsync not in FSYNC_MODES:
            raise ConfigError(f"log.fsync is {self.fsync!r}; use one of {', '.join(FSYNC_MODES)}")
        if not partitions_in_range(self.partitions):
            raise ConfigError(f"log.partitions is {self.partitions}; use 1..{MAX_PARTITIONS}")
        if self.segment_bytes < 4096:
            raise ConfigError(f"log.segment_bytes is {self.segment_bytes}; use at least 4096")
        if self.max_record_bytes < 1:
            raise ConfigError(
                f"log.max_record_bytes is {self.max_record_bytes}; use a positive number of bytes"
            )
        if self.max_record_bytes > MAX_RECORD_BYTES_LIMIT:
            raise ConfigError(
                f"log.max_record_bytes is {self.max_record_bytes}; the local log's format holds "
                f"at most {MAX_RECORD_BYTES_LIMIT} bytes per record, so use at most that: split "
                "larger payloads, or store them elsewhere and log a reference to them"
            )


@dataclass(frozen=True)
class StreamcoreConfig:
    """The resolved configuration (the module docstring has the order): `home`, the log defaults,
    codecs and schemas, import roots, warehouse, and the parsed TOML document for the sections
    that have their own parser."""

    home: Path
    log: LogDefaults = field(default_factory=LogDefaults)
    default_codec: str = "avro"
    schemas_dir: Path = _PROJECT_ROOT / "include" / "schemas"
    schema_registry_url: str = ""
    source: Path | None = None
    # Folders whose files the importer may read (after resolving symlinks and `..`); empty: home.
    import_roots: tuple[Path, ...] = ()
    # Root of the Delta tables: a folder or any URI Spark understands; empty: home/delta.
    warehouse: str = ""
    # The parsed TOML document (read-only by convention): sections that have their own parser,
    # such as the log routing tables `[log.configs.*]` / `[[log.match]]` (streamcore.log.config).
    table: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __repr__(self) -> str:
        shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if f.repr)
        return redact_credentials(f"{type(self).__name__}({shown})")

    def __post_init__(self) -> None:
        # Callers and subprocess scripts pass plain strings; every derived path needs a Path.
        object.__setattr__(self, "home", Path(self.home))
        if not self.import_roots:
            object.__setattr__(self, "import_roots", (self.home,))
        object.__setattr__(self, "warehouse", _warehouse(self.warehouse, self.home))

    @property
    def audit_schedule(self) -> CronSchedule:
        """`[audit] schedule` (STREAMCORE_AUDIT_SCHEDULE): when the audit DAG runs batch mode,
        each run's data interval being the period before it. Checked when asked, not at load, so
        a bad schedule breaks the audit DAG and nothing else that reads the configuration."""
        value = _lookup(self.table, "audit", "schedule", AUDIT_SCHEDULE)
        return parse_cron_schedule(value, "audit.schedule")

    @property
    def audit_event_types(self) -> tuple[str, ...]:
        """`[audit] event_types` (STREAMCORE_AUDIT_EVENT_TYPES, separated by commas): an
        application's own audit event types, which `publish` and the audit job accept besides
        the built-in ones (streamcore.audit.rules)."""
        value = _lookup(self.table, "audit", "event_types", [])
        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, list | tuple) or not all(isinstance(i, str) for i in items):
            raise ConfigError(
                f"audit.event_types must be a list of event type names (or one string "
                f"separated by commas), got {value!r}"
            )
        return tuple(i.strip() for i in items if i.strip())

    @property
    def backfill_topologies(self) -> tuple[str, ...]:
        """`[backfill] topologies` (STREAMCORE_BACKFILL_TOPOLOGIES, comma-separated): the module
        prefixes whose topology factories a backfill may import and run (`--topology
        MODULE:FACTORY`, the backfill DAG's `topology` Param). Empty, the default: none. Checked
        when asked, as `audit_schedule`."""
        value = _lookup(self.table, "backfill", "topologies", [])
        return _module_prefixes(value, "backfill.topologies")

    @property
    def state_engine(self) -> str:
        """`[state] engine` (STREAMCORE_STATE_ENGINE): the engine of the state stores that do not
        name one, "rocksdb" (on disk under `home/state`, the default) or "memory" (lost at every
        restart, rebuilt from the changelog). Checked when asked, as `audit_schedule`."""
        from streamcore.state.engines import ENGINES  # only the names: no engine is loaded

        value = _lookup(self.table, "state", "engine", "rocksdb")
        if value not in ENGINES:
            raise ConfigError(
                f"state.engine is {value!r}; use one of {', '.join(map(repr, ENGINES))}"
            )
        return str(value)

    @property
    def groups(self) -> GroupTuning:
        """`[groups]` (STREAMCORE_GROUPS_<KEY>): the timings of the local and memory logs'
        consumer groups and tailers (`streamcore.log.tuning`). Checked when asked."""
        from streamcore.log.tuning import parse_group_tuning

        section = self.table.get("groups", {})
        if not isinstance(section, dict):
            raise ConfigError(f"[groups] in the config file must be a table, got {section!r}")
        return parse_group_tuning(
            section, lambda key, default: _lookup(self.table, "groups", key, default)
        )

    @property
    def state_lock_timeout(self) -> float:
        """`[state] lock_timeout` (STREAMCORE_STATE_LOCK_TIMEOUT), in seconds, default 30: how
        long opening a persistent store waits for another process to release it (a previous
        owner still closing it) before failing with `StoreLockedError`."""
        value = _lookup(self.table, "state", "lock_timeout", 30)
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            seconds = -1.0
        if isinstance(value, bool) or not 0 <= seconds < float("inf"):
            raise ConfigError(
                f"state.lock_timeout is {value!r}; give a number of seconds >= 0, e.g. 30"
            )
        return seconds

    @property
    def log_dir(self) -> Path:
        return self.home / "log"

    @property
    def registry_dir(self) -> Path:
        return self.home / "schema-registry"


def _find_file() -> Path | None:
    explicit = os.environ.get("STREAMCORE_CONFIG")
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise ConfigError(f"STREAMCORE_CONFIG points to {path}, which is not a file")
        return path
    for candidate in (
        Path.cwd() / "include" / "streamcore.toml",
        _PROJECT_ROOT / "include" / "streamcore.toml",
    ):
        if candidate.is_file():
            return candidate
    return None


def _lookup(table: dict[str, Any], section: str | None, key: str, default: Any) -> Any:
    env_name = "STREAMCORE_" + (f"{section}_{key}" if section else key).upper()
    if env_name in os.environ:
        return os.environ[env_name]
    scope = table.get(section, {}) if section else table
    if not isinstance(scope, dict):
        raise ConfigError(f"[{section}] in the config file must be a table, got {scope!r}")
    return scope.get(key, default)


def _as_int(value: Any, what: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{what} must be an integer, got {value!r}") from None


def _paths(value: Any, what: str) -> tuple[Path, ...]:
    """A list of folders: a TOML array, or a string separated by os.pathsep (`:` on POSIX)."""
    items = value.split(os.pathsep) if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(i, str) for i in items):
        raise ConfigError(
            f"{what} must be a list of folders (or one string separated by {os.pathsep!r}), "
            f"got {value!r}"
        )
    return tuple(Path(i).expanduser().resolve() for i in items if i.strip())


_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def _module_prefixes(value: Any, what: str) -> tuple[str, ...]:
    """Dotted module names: a TOML array of strings, or one string separated by commas."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(i, str) for i in items):
        raise ConfigError(
            f"{what} must be a list of module names (or one string separated by commas), "
            f'got {value!r}; e.g. ["myapp.flows"]'
        )
    names = tuple(i.strip() for i in items if i.strip())
    for name in names:
        if not _MODULE.match(name):
            raise ConfigError(
                f"{what} has {name!r}, which is not a module name (dotted Python identifiers, "
                'e.g. "myapp.flows")'
            )
    return names


def _home(table: dict[str, Any]) -> Path:
    """STREAMCORE_HOME, else the file's `home`, else `DEFAULT_HOME`; a relative one under the
    project root. A variable set to "" counts as unset (CI systems pass a missing one so)."""
    value = os.environ.get("STREAMCORE_HOME") or table.get("home") or DEFAULT_HOME
    return _PROJECT_ROOT / Path(str(value)).expanduser()


def _warehouse(value: str, home: Path) -> str:
    """A URI (`s3a://…`, `file:///…`) as given, without a trailing slash; a plain path resolved
    against the working directory; empty: `home/delta`."""
    value = str(value).strip()
    if not value:
        return str(home / "delta")
    # A scheme of one letter would be a Windows drive; Spark URIs have longer ones.
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]+:", value):
        stripped = value.rstrip("/")
        return stripped if not stripped.endswith(":") else value
    return str(Path(value).expanduser().resolve())


def load_config(path: str | Path | None = None, **overrides: Any) -> StreamcoreConfig:
    """Read the configuration. `overrides` (e.g. `home=...`) win over everything."""
    source = Path(path) if path else _find_file()
    table: dict[str, Any] = {}
    if source is not None:
        try:
            table = tomllib.loads(source.read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"cannot read config {source}: {exc}; fix the TOML syntax") from exc
    defaults = LogDefaults()
    log = LogDefaults(
        partitions=_as_int(
            _lookup(table, "log", "partitions", defaults.partitions), "log.partitions"
        ),
        retention_ms=parse_duration_ms(
            _lookup(table, "log", "retention", defaults.retention_ms), "log.retention"
        ),
        segment_bytes=_as_int(
            _lookup(table, "log", "segment_bytes", defaults.segment_bytes), "log.segment_bytes"
        ),
        segment_roll_ms=parse_duration_ms(
            _lookup(table, "log", "segment_roll", defaults.segment_roll_ms), "log.segment_roll"
        ),
        fsync=str(_lookup(table, "log", "fsync", defaults.fsync)).lower(),
        max_record_bytes=_as_int(
            _lookup(table, "log", "max_record_bytes", defaults.max_record_bytes),
            "log.max_record_bytes",
        ),
    )
    schemas = Path(_lookup(table, "codec", "schemas_dir", "include/schemas"))
    values: dict[str, Any] = {
        "home": _home(table),
        "log": log,
        "default_codec": str(_lookup(table, "codec", "default", "avro")),
        "schemas_dir": schemas if schemas.is_absolute() else _PROJECT_ROOT / schemas,
        "schema_registry_url": str(_lookup(table, "codec", "schema_registry_url", "")),
        "source": source,
        "import_roots": _paths(_lookup(table, "import", "roots", []), "import.roots"),
        "warehouse": str(_lookup(table, None, "warehouse", "")),
        "table": table,
    }
    values.update(overrides)
    values["home"] = Path(values["home"]).expanduser().resolve()
    return StreamcoreConfig(**values)


def streamcore_home() -> Path:
    """STREAMCORE_HOME as every process resolves it: `load_config().home` (the environment, else
    the file's `home`, else data/ under the project root). DAGs, run records and the UI plugin
    take it from here, so they find what the jobs and the CLI wrote."""
    return load_config().home
