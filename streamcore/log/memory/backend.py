"""The memory log in the backend registry (`type = "memory"`): in-process, nothing on disk (tests,
examples); its configs take no options."""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamcore.log.registry import Backend

if TYPE_CHECKING:
    from streamcore.config import StreamcoreConfig
    from streamcore.log.config import BackendConfig
    from streamcore.log.memory.manager import MemoryLogManager

__all__ = ["BACKEND", "MemoryBackend"]


class MemoryBackend(Backend):
    """The `type = "memory"` backend: each config opens a new, empty `MemoryLogManager`."""

    type = "memory"
    retention_by = "held in memory"

    def open(self, config: BackendConfig, settings: StreamcoreConfig) -> MemoryLogManager:
        """A new, empty `MemoryLogManager` (one per config of a `UnifiedLogManager`)."""
        from streamcore.log.memory.manager import MemoryLogManager

        return MemoryLogManager(settings.groups)


BACKEND = MemoryBackend()
