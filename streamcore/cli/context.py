"""What every command needs: the parsed arguments, the configuration, the log manager, codecs
and output helpers. `open_manager` is the one place that chooses the log backend: a
`UnifiedLogManager` routing each log by the `[log.configs.*]` / `[[log.match]]` tables of the
configuration (`--config`), so every command works on every backend. Features only some backends
have (the local log's `purge`, ...: the protocols of `streamcore.log.capabilities`) are reached
per log through `backend_with`."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from streamcore.config import StreamcoreConfig, load_config
from streamcore.errors import LogNotFoundError, StreamcoreError
from streamcore.log import LogManager, LogPartition
from streamcore.log.capabilities import OnDisk
from streamcore.log.unified import UnifiedLogManager
from streamcore.names import Name

__all__ = [
    "RAW",
    "Context",
    "UsageError",
    "backend_for",
    "backend_label",
    "backend_with",
    "codec_label",
    "global_options",
    "group_name",
    "load_cli_config",
    "require_backend",
    "resolve_codec",
]

RAW = "raw"
T = TypeVar("T")


class UsageError(StreamcoreError):
    """A command-line argument is wrong; the CLI exits with code 2."""

    retryable = False  # the same command line fails again: it must change


def load_cli_config(args: argparse.Namespace) -> StreamcoreConfig:
    """The configuration, with `--config FILE` and `--home DIR` applied."""
    config_file = getattr(args, "config", None)
    if config_file and not Path(config_file).is_file():
        raise UsageError(
            f"--config {config_file}: no such file; give the path of a streamcore.toml"
        )
    overrides: dict[str, Any] = {}
    if getattr(args, "home", None):
        overrides["home"] = args.home
    return load_config(config_file, **overrides)


def open_manager(args: argparse.Namespace, config: StreamcoreConfig | None = None) -> LogManager:
    """The log manager the command works on: every log in the backend the configuration routes
    it to (LogConfig; `STREAMCORE_LOG_BACKEND` forces one)."""
    return UnifiedLogManager(config or load_cli_config(args))


def backend_for(manager: LogManager, name: str | Name, group: str | None = None) -> LogManager:
    """The backend manager holding log `name` (the one `group`'s calls on it use, if given);
    the manager itself when it does not route."""
    if isinstance(manager, UnifiedLogManager):
        return manager.backend_for(name, group)
    return manager


def backend_with(
    manager: LogManager, name: str | Name, capability: type[T], group: str | None = None
) -> T | None:
    """The backend holding `name` if it has `capability` (a protocol of
    `streamcore.log.capabilities`), else None."""
    backend = backend_for(manager, name, group)
    return backend if isinstance(backend, capability) else None


def backend_label(manager: LogManager, name: str | Name) -> str:
    """How tools name the backend of `name`: `local`, `kafka`, `memory:scratch`, ..."""
    if isinstance(manager, UnifiedLogManager):
        return manager.log_config.config_for(name).label
    return type(manager).__name__


def where(manager: LogManager, name: str | Name) -> str:
    """Where a log would live, for messages: a folder for a local log, else the backend."""
    backend = backend_for(manager, name)
    if isinstance(backend, OnDisk):
        return f"under {backend.root}"
    return f"in the {backend_label(manager, name)} backend"


def require_backend(manager: LogManager, name: Name, capability: type[T], what: str) -> T:
    """`backend_with`, or a clear error naming the backend that lacks the capability."""
    found = backend_with(manager, name, capability)
    if found is None:
        raise StreamcoreError(
            f"log {name} lives in the {backend_label(manager, name)} backend, which has no "
            f"{what}; this command works on local logs only"
        )
    return found


def codec_names(config: StreamcoreConfig | None = None) -> tuple[str, ...]:
    """The built-in Record codecs and the custom ones (streamcore.codecs.named)."""
    from streamcore.codecs import CODEC_NAMES
    from streamcore.codecs.named import custom_codec_names

    return (*CODEC_NAMES, *custom_codec_names(config))


def resolve_codec(name: str | None, config: StreamcoreConfig, *, allow_raw: bool = True) -> Any:
    """The Record codec named `name` (default: the configured one); None for `raw`."""
    name = name or config.default_codec
    if name == RAW:
        if not allow_raw:
            raise UsageError("--codec raw is not possible here; pick a Record codec")
        return None
    names = codec_names(config)
    if name not in names:
        choices = ", ".join((*names, RAW) if allow_raw else names)
        raise UsageError(f"unknown codec {name!r}; use one of {choices}")
    from streamcore.codecs import get_codec

    return get_codec(name, config=config)


def codec_label(name: str | None, config: StreamcoreConfig) -> str:
    return name or config.default_codec


@dataclass
class Context:
    """One command's run: its arguments and configuration, the log manager opened on first use,
    and the output helpers (text or JSON)."""

    args: argparse.Namespace
    config: StreamcoreConfig
    _manager: LogManager | None = field(default=None, repr=False)

    @property
    def manager(self) -> LogManager:
        if self._manager is None:
            self._manager = open_manager(self.args, self.config)
        return self._manager

    @property
    def json(self) -> bool:
        return bool(getattr(self.args, "json", False))

    def close(self) -> None:
        if self._manager is not None:
            self._manager.close()
            self._manager = None

    # -- output -------------------------------------------------------------------------------
    @staticmethod
    def out(text: str = "") -> None:
        sys.stdout.write(text + "\n")

    @staticmethod
    def err(text: str) -> None:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()

    @staticmethod
    def emit_json(document: Any) -> None:
        sys.stdout.write(json.dumps(document, indent=2, sort_keys=False) + "\n")

    @staticmethod
    def emit_json_line(document: Any) -> None:
        sys.stdout.write(json.dumps(document, separators=(",", ":")) + "\n")

    # -- arguments ----------------------------------------------------------------------------
    def log(self, value: str, *, must_exist: bool = True) -> Name:
        """A log name from the command line, checked to exist unless told otherwise."""
        name = Name.of(value)
        if must_exist and not self.manager.exists(name):
            raise LogNotFoundError(
                f"log {name} does not exist {where(self.manager, name)}; "
                "list the logs with `streamcore logs` or create it with `streamcore create`"
            )
        return name

    def partitions(self, name: Name, partition: int | None) -> list[LogPartition]:
        """All partitions of `name`, or only `partition` (checked)."""
        size = self.manager.size(name)
        if partition is None:
            return [LogPartition(name, p) for p in range(size)]
        if not 0 <= partition < size:
            raise UsageError(f"-p {partition}: log {name} has partitions 0..{size - 1}")
        return [LogPartition(name, partition)]


def group_name(value: str) -> str:
    """Validate a consumer group name (same rules as log names) and return its URN."""
    return Name.of(value).urn


def global_options(*, top_level: bool = False, verbose: bool = True) -> argparse.ArgumentParser:
    """`--home`, `--config`, `--json`, `-v`: accepted before and after the command name.
    On commands, their default is "not given" so they never override the top-level value."""
    parser = argparse.ArgumentParser(add_help=False)
    extra: dict[str, Any] = {} if top_level else {"default": argparse.SUPPRESS}
    group = parser.add_argument_group("global options")
    group.add_argument(
        "--home", metavar="DIR", help="data folder (overrides STREAMCORE_HOME)", **extra
    )
    group.add_argument(
        "--config",
        metavar="FILE",
        help="streamcore.toml to use (default: $STREAMCORE_CONFIG or include/streamcore.toml)",
        **extra,
    )
    group.add_argument("--json", action="store_true", help="machine-readable JSON output", **extra)
    if verbose:
        group.add_argument(
            "-v",
            "--verbose",
            dest="debug",
            action="store_true",
            help="debug logging, tracebacks on errors",
            **extra,
        )
    return parser
