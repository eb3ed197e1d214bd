"""`MemoryGroupStore`: the state of a dynamic consumer group of the memory log, shared by the
members of one manager (the `GroupStore` of `streamcore.log.cursor.membership`; the local log
keeps it in files, `streamcore.log.local.groups`)."""

from __future__ import annotations

import copy
import threading
from collections.abc import Sequence
from typing import Any

__all__ = ["MemoryGroupStore"]


class MemoryGroupStore:
    """A group state shared by the members of one process (the memory backend)."""

    def __init__(self, group: str, logs: Sequence[str]) -> None:
        self._lock = threading.Lock()
        self._state: dict[str, Any] = {
            "format": 1,
            "group": group,
            "logs": sorted(logs),
            "version": 0,
            "next_seq": 1,
            "members": {},
            "owners": {},
        }

    def load(self) -> dict[str, Any]:
        with self._lock:
            return copy.deepcopy(self._state)

    def swap(self, state: dict[str, Any], expected_version: int) -> bool:
        with self._lock:
            if self._state["version"] != expected_version:
                return False
            state["version"] = expected_version + 1
            self._state = copy.deepcopy(state)
            return True

    def signature(self) -> Any:
        return self._state["version"]

    def existed(self) -> bool:
        return False  # nothing outside this object can delete it

    def __repr__(self) -> str:
        return f"MemoryGroupStore({self._state['group']!r})"
