"""The state of a dynamic consumer group of the local log, shared by processes through one file.

    <root>/_subscriptions/<group-id>@<log-id>[+<log-id>...].json   the state (JSON, see below)
    <root>/_subscriptions/.<same stem>.lock                         flock'd only around a swap

One file per group and set of subscribed logs (log ids sorted; a stem longer than 150 characters is
replaced by `<group-id>@<sha256 prefix>`). The state is a JSON object:

    {"format": 1, "group": "my/group", "logs": ["my/log"], "version": 42, "next_seq": 3,
     "members": {"<host>-<pid>-<rand>": {"seq": 1, "heartbeat": <epoch s>,
                 "session_timeout": 10.0, "host": "...", "pid": 1234}},
     "owners": {"my-log-00": "<member id>", ...}}

Readers read the file without a lock (it is only ever replaced by `os.replace`, so a reader sees the
old or the new state, never a mix). A writer swaps in a new state only if the file still holds the
version it read (compare-and-swap): it takes the flock, re-reads the version, writes a temporary
file and renames it over the state with `version + 1`, then releases the lock. On a conflict the
caller re-reads, re-applies its change and retries (see `streamcore.log.subscription`).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

from streamcore.names import Name

logger = logging.getLogger(__name__)
FOLDER = "_subscriptions"
FORMAT = 1
_MAX_STEM = 150


def state_stem(group: str, names: list[Name]) -> str:
    """The file stem of the state of `group` subscribed to `names` (order does not matter)."""
    stem = f"{Name.of(group).id}@{'+'.join(sorted({n.id for n in names}))}"
    if len(stem) > _MAX_STEM:
        digest = hashlib.sha256(stem.encode()).hexdigest()[:16]
        stem = f"{Name.of(group).id}@{digest}"
    return stem


def empty_state(group: str, names: list[Name]) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "group": Name.of(group).urn,
        "logs": sorted({n.urn for n in names}),
        "version": 0,
        "next_seq": 1,
        "members": {},
        "owners": {},
    }


class FileGroupStore:
    """Compare-and-swap access to one group state file (a `GroupStore` for `GroupMember`)."""

    def __init__(self, root: Path, group: str, names: list[Name]) -> None:
        self.folder = Path(root) / FOLDER
        self.folder.mkdir(parents=True, exist_ok=True)
        stem = state_stem(group, names)
        self.path = self.folder / f"{stem}.json"
        self.lock_path = self.folder / f".{stem}.lock"
        self._group = group
        self._names = list(names)

    def _parse(self, data: bytes) -> dict[str, Any] | None:
        try:
            state = json.loads(data)
        except ValueError:
            return None
        return state if isinstance(state, dict) and isinstance(state.get("version"), int) else None

    def load(self) -> dict[str, Any]:
        """The current state; an empty one (version 0) if none was written yet. An unreadable
        file (only possible after a machine crash) reads as empty with version -1, which the next
        swap replaces."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return empty_state(self._group, self._names)
        state = self._parse(data)
        if state is None:
            logger.warning("group state %s is unreadable; it will be rewritten", self.path)
            state = empty_state(self._group, self._names)
            state["version"] = -1
        return state

    def _current_version(self) -> int:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return 0
        state = self._parse(data)
        return -1 if state is None else state["version"]

    def swap(self, state: dict[str, Any], expected_version: int) -> bool:
        """Write `state` as version `expected_version + 1` if the file still holds
        `expected_version`; False (nothing written) if another writer got there first."""
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if self._current_version() != expected_version:
                return False
            state["version"] = expected_version + 1
            tmp = self.folder / f".{self.path.name}.{os.getpid()}.{threading.get_ident()}.tmp"
            tmp.write_text(json.dumps(state, indent=1, sort_keys=True))
            os.replace(tmp, self.path)
            return True
        finally:
            os.close(fd)  # releases the flock

    def signature(self) -> Any:
        """Changes whenever the state is replaced (a cheap `stat`, for watching)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def __repr__(self) -> str:
        return f"FileGroupStore({str(self.path)!r})"
