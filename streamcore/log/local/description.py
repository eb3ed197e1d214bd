"""`LocalLogDescription`: a local log as another process (a Spark executor) opens it.

It carries the log's folder and the log defaults of the manager that described it (so an executor
appends with the driver's `max_record_bytes`, not whatever configuration it would find itself),
and opens partition cursors and appenders from them. The on-disk layout (`P-NN` partition
folders) stays in this package: callers name a partition by its number.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamcore.config import LogDefaults, StreamcoreConfig
from streamcore.errors import ConfigError
from streamcore.log.local.reader import PartitionCursor
from streamcore.log.values import LogDescription

if TYPE_CHECKING:
    from streamcore.log.local.manager import LocalLogManager

__all__ = ["LocalLogDescription", "partition_folder"]

BACKEND = "local"


def partition_folder(log_folder: Path, partition: int) -> Path:
    """The folder of one partition of the log in `log_folder`."""
    return log_folder / f"P-{partition:02d}"


@dataclass(frozen=True)
class LocalLogDescription(LogDescription):
    """A local log: `folder` (the log's folder, a string) and `options`, the `LogDefaults`
    fields of the describing manager's configuration (`max_record_bytes`, ...)."""

    folder: str = ""
    options: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(
        cls, name: str, partitions: int, folder: Path, defaults: LogDefaults
    ) -> LocalLogDescription:
        return cls(BACKEND, name, partitions, str(folder), dataclasses.asdict(defaults))

    @classmethod
    def from_json(cls, text: str) -> LocalLogDescription:
        fields = json.loads(text)
        if fields.get("backend") != BACKEND:
            raise ConfigError(
                f"not a local log description: {text[:200]}; make it with describe() of the "
                "local log's manager"
            )
        return cls(**fields)

    def label(self, partition: int) -> str:
        """How messages name a partition: `<log-id>-NN`."""
        return f"{Path(self.folder).name}-{partition:02d}"

    def open_cursor(self, partition: int) -> PartitionCursor:
        """A read-only cursor on one partition (any number of processes may read); close it."""
        folder = partition_folder(Path(self.folder), partition)
        return PartitionCursor(folder, self.label(partition))

    def open_manager(self) -> LocalLogManager:
        """A `LocalLogManager` on the log's root with the describing manager's log defaults, for
        appending from this process; close it (that releases the partition writers' locks)."""
        from streamcore.log.local.manager import LocalLogManager

        root = Path(self.folder).parent
        config = StreamcoreConfig(home=root, log=LogDefaults(**self.options))
        return LocalLogManager(root, config=config)
