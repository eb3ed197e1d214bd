"""The memory backend: logs in one process's memory, for tests and examples (see
`streamcore.log.memory.manager`)."""

from streamcore.log.memory.manager import MemoryLogManager

__all__ = ["MemoryLogManager"]
