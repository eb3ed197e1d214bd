"""The local log in the backend registry (`type = "local"`): the options of a
`[log.configs.<name>]` table of that type and how a configuration opens it.

    [log.configs.default]
    type = "local"
    root = "log"            # the logs' folder; relative = under home (default: <home>/log)
    partitions = 4          # defaults for the logs it creates; each defaults to the [log] value
    retention = "4d"        # of the same name: partitions, retention, segment_bytes,
    fsync = "none"          # segment_roll, fsync, max_record_bytes
"""

from __future__ import annotations

import builtins
import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamcore.config import FSYNC_MODES, StreamcoreConfig
from streamcore.errors import ConfigError
from streamcore.log.options import duration_option, int_option, str_option
from streamcore.log.registry import MAX_PARTITIONS, Backend

if TYPE_CHECKING:
    from streamcore.log.config import BackendConfig
    from streamcore.log.local.description import LocalLogDescription
    from streamcore.log.local.manager import LocalLogManager

__all__ = ["BACKEND", "LOCAL_OPTIONS", "LocalBackend", "local_root"]

LOCAL_OPTIONS = (
    "root",
    "partitions",
    "retention",
    "segment_bytes",
    "segment_roll",
    "fsync",
    "max_record_bytes",
)


def local_root(config: BackendConfig, home: Path) -> Path:
    """The folder of a local config's logs."""
    root = config.options.get("root")
    if root is None:
        return home / "log"
    path = Path(root).expanduser()
    return path if path.is_absolute() else home / path


class LocalBackend(Backend):
    """The `type = "local"` backend: reads a config's options and opens a `LocalLogManager` on
    them."""

    type = "local"
    options = LOCAL_OPTIONS
    retention_by = "the retention job and `streamcore purge`"

    def parse_options(self, key: str, raw: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if "root" in raw:
            out["root"] = str_option(raw["root"], f"{key}.root")
        if "partitions" in raw:
            out["partitions"] = int_option(
                raw["partitions"], f"{key}.partitions", 1, MAX_PARTITIONS
            )
        if "retention" in raw:
            out["retention_ms"] = duration_option(raw["retention"], f"{key}.retention")
        if "segment_bytes" in raw:
            out["segment_bytes"] = int_option(raw["segment_bytes"], f"{key}.segment_bytes", 4096)
        if "segment_roll" in raw:
            out["segment_roll_ms"] = duration_option(raw["segment_roll"], f"{key}.segment_roll")
        if "fsync" in raw:
            fsync = raw["fsync"]
            if fsync not in FSYNC_MODES:
                raise ConfigError(f"{key}.fsync = {fsync!r}; use one of {', '.join(FSYNC_MODES)}")
            out["fsync"] = fsync
        if "max_record_bytes" in raw:
            out["max_record_bytes"] = int_option(
                raw["max_record_bytes"], f"{key}.max_record_bytes", 1
            )
        return out

    def open(self, config: BackendConfig, settings: StreamcoreConfig) -> LocalLogManager:
        """A `LocalLogManager` on the config's root whose log defaults are the config's options
        over the `[log]` ones."""
        from streamcore.log.local.manager import LocalLogManager

        overrides = {k: v for k, v in config.options.items() if k != "root"}
        if overrides:
            log = dataclasses.replace(settings.log, **overrides)
            settings = dataclasses.replace(settings, log=log)
        return LocalLogManager(local_root(config, settings.home), config=settings)

    def description(self) -> builtins.type[LocalLogDescription]:
        from streamcore.log.local.description import LocalLogDescription

        return LocalLogDescription

    def folder(self, config: BackendConfig, home: Path) -> Path:
        return local_root(config, home)


BACKEND = LocalBackend()
