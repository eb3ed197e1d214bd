"""The memory backend: logs in one process's memory, for tests and examples. Same contracts as
the local log (contiguous offsets, committed = next to read, one live tailer per group and
partition, consumer groups across the tailers of one manager), nothing on disk, no retention;
other processes cannot open its logs (`describe` refuses)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamcore.lazy_exports import lazy_exports

if TYPE_CHECKING:
    # What __getattr__ hands out, for type checkers ("X as X": `__all__` is computed).
    from streamcore.log.memory.manager import MemoryLogManager as MemoryLogManager

# Exports are imported on first use (PEP 562), like every backend folder's.
_EXPORTS = {"MemoryLogManager": "manager"}
__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
