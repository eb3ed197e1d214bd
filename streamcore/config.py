"""The one configuration object: `include/streamcore.toml`, overridden by `STREAMCORE_*` variables.

Resolution order for each key: environment variable, then the TOML file, then the default below.
The file is found at `$STREAMCORE_CONFIG`, else `include/streamcore.toml` under the current
directory or the project root. Relative paths are resolved against the directory the process runs in
(home) or the project root (schemas), so the same file works from a clone and from a job.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from streamcore.errors import ConfigError
from streamcore.redact import redact_credentials

PROJECT_ROOT = Path(__file__).resolve().parent.parent
FSYNC_MODES = ("none", "batch", "always")
# The local log stores a record inside one batch, whose body holds at most 1 GiB
# (streamcore.log.local.segment.MAX_BATCH_BODY), 16 bytes of it the record's offsets.
MAX_RECORD_BYTES_LIMIT = (1 << 30) - 16
_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d)?\s*$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


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
class LogDefaults:
    partitions: int = 4
    retention_ms: int = 4 * 86_400_000
    segment_bytes: int = 128 * 1024 * 1024
    segment_roll_ms: int = 86_400_000
    fsync: str = "none"
    max_record_bytes: int = 1024 * 1024

    def __post_init__(self) -> None:
        if self.fsync not in FSYNC_MODES:
            raise ConfigError(f"log.fsync is {self.fsync!r}; use one of {', '.join(FSYNC_MODES)}")
        if not 1 <= self.partitions <= 1000:
            raise ConfigError(f"log.partitions is {self.partitions}; use 1..1000")
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
    home: Path
    log: LogDefaults = field(default_factory=LogDefaults)
    default_codec: str = "avro"
    schemas_dir: Path = PROJECT_ROOT / "include" / "schemas"
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
        PROJECT_ROOT / "include" / "streamcore.toml",
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


def _warehouse(value: str, home: Path) -> str:
    """A URI (`s3a://…`, `file:///…`) as given, without a trailing slash; a plain path resolved
    like `home` (relative to the working directory); empty: `home/delta`."""
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
        "home": Path(_lookup(table, None, "home", "./data")),
        "log": log,
        "default_codec": str(_lookup(table, "codec", "default", "avro")),
        "schemas_dir": schemas if schemas.is_absolute() else PROJECT_ROOT / schemas,
        "schema_registry_url": str(_lookup(table, "codec", "schema_registry_url", "")),
        "source": source,
        "import_roots": _paths(_lookup(table, "import", "roots", []), "import.roots"),
        "warehouse": str(_lookup(table, None, "warehouse", "")),
        "table": table,
    }
    values.update(overrides)
    values["home"] = Path(values["home"]).expanduser().resolve()
    return StreamcoreConfig(**values)
