"""The state of a dynamic consumer group of the local log, shared by processes through files.

    <root>/_subscriptions/<group-id>@<log-id>[+<log-id>...]/<version>.json   one file per version

One folder per group and set of subscribed logs (log ids sorted; a stem longer than 150 characters
is replaced by `<group-id>@<sha256 prefix>`). The newest version file is the state, a JSON object:

    {"format": 2, "group": "my/group", "logs": ["my/log"], "version": 42, "next_seq": 3,
     "generation": "<random>", "claims_after": <epoch s>, "token": "<random>", "parent": "...",
     "members": {"<host>-<pid>-<rand>": {"seq": 1, "heartbeat": <epoch s>,
                 "session_timeout": 10.0, "host": "...", "pid": 1234}},
     "owners": {"my-log-00": "<member id>", ...}}

**Compare-and-swap without a lock.** A writer that read version N writes its state to a temporary
file and hard-links it as `<N+1>.json`: `link(2)` fails if that name exists, so exactly one writer
wins each version, and nobody ever waits for another process. A process frozen (SIGSTOP) in the
middle of a write holds nothing the others need; when it resumes, its link fails and it retries
on the newest state. Readers list the folder and read the highest version (files are complete
before they are linked, so a reader never sees a partial state).

Old versions are deleted once they are `_KEEP` versions behind and `_GC_AGE` s old. A writer
frozen for longer could then link a version number that was deleted: that file is never the
newest (a newer one exists), and the writer sees it lost: its swap succeeds only if its file is
still the newest, or if the next version names its file (`token`) as its `parent`.

The folder appears atomically with its first version (built under a temporary name and renamed),
so a folder without any version means the state was deleted: `existed()` then says so, and the
next member writes a new `generation` (see `streamcore.log.cursor.membership`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from streamcore.names import Name

__all__ = ["FileGroupStore", "group_states", "state_stem"]

logger = logging.getLogger(__name__)
FOLDER = "_subscriptions"
FORMAT = 2
_MAX_STEM = 150
_KEEP = 16  # versions kept behind the newest
_GC_AGE = 60.0  # seconds a version is kept at least (see module doc)


def state_stem(group: str, names: list[Name]) -> str:
    """The folder name of the state of `group` subscribed to `names` (order does not matter)."""
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


def group_states(root: Path, group: str) -> list[dict[str, Any]]:
    """The newest state of every folder of `group` under `root` (one per set of subscribed
    logs), by folder name. Read only, unlike `FileGroupStore`: no folder is made, and a
    state that is unreadable or deleted while being read is left out rather than rewritten."""
    parent = Path(root) / FOLDER
    prefix = f"{Name.of(group).id}@"  # temporary folders start with "." and never match
    urn = Name.of(group).urn
    try:
        entries = sorted(e for e in os.listdir(parent) if e.startswith(prefix))
    except FileNotFoundError:
        return []
    out = []
    for entry in entries:
        state = _newest_state(parent / entry)
        # The state names its group: trust that over a folder name someone may have copied.
        if state is not None and state.get("group") == urn:
            out.append(state)
    return out


def _newest_state(folder: Path) -> dict[str, Any] | None:
    for _ in range(10):  # a writer collects old versions as we list: look again
        try:
            versions = state_versions(folder)
        except NotADirectoryError:
            return None
        if not versions:
            return None
        try:
            return read_state(folder, max(versions))
        except FileNotFoundError:
            continue
    return None


def state_versions(folder: Path) -> list[int]:
    """The version numbers of the states in `folder` (none if it does not exist)."""
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    return [int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit()]


def read_state(folder: Path, version: int) -> dict[str, Any] | None:
    """The state of `version`; None if it is unreadable (only after a machine crash)."""
    data = (folder / f"{version}.json").read_bytes()
    try:
        state = json.loads(data)
    except ValueError:
        return None
    return state if isinstance(state, dict) and isinstance(state.get("members"), dict) else None


def _unique() -> str:
    return f"{os.getpid()}-{threading.get_ident()}-{os.urandom(4).hex()}"


class FileGroupStore:
    """Compare-and-swap access to one group state folder (a `GroupStore` for `GroupMember`).
    `history` (optional) says whether the group was used before (e.g. it has committed
    positions): a missing folder then also counts as a deleted state."""

    def __init__(
        self,
        root: Path,
        group: str,
        names: list[Name],
        history: Callable[[], bool] | None = None,
    ) -> None:
        self.parent = Path(root) / FOLDER
        self.parent.mkdir(parents=True, exist_ok=True)
        self.stem = state_stem(group, names)
        self.folder = self.parent / self.stem
        self._group = group
        self._names = list(names)
        self._history = history

    def _versions(self) -> list[int]:
        return state_versions(self.folder)

    def _read(self, version: int) -> dict[str, Any] | None:
        return read_state(self.folder, version)

    def load(self) -> dict[str, Any]:
        """The newest state; an empty one (version 0) if none was written. An unreadable newest
        version reads as an empty state with its version number, which the next swap replaces
        (the members then see a new generation and rejoin)."""
        while True:
            versions = self._versions()
            if not versions:
                return empty_state(self._group, self._names)
            newest = max(versions)
            try:
                state = self._read(newest)
            except FileNotFoundError:
                continue  # deleted meanwhile (a reset): look again
            if state is None:
                logger.warning(
                    "group state %s/%d.json is unreadable; rewriting", self.folder, newest
                )
                state = empty_state(self._group, self._names)
            state["version"] = newest
            return state

    def existed(self) -> bool:
        """True if a state of this group was written before (so one missing now was deleted)."""
        return self.folder.is_dir() or (self._history is not None and self._history())

    def swap(self, state: dict[str, Any], expected_version: int) -> bool:
        """Write `state` as version `expected_version + 1` if that is still the next version;
        False (nothing changed) if another writer got there first."""
        version = expected_version + 1
        state["version"] = version
        state["format"] = FORMAT
        state["parent"] = state.get("token")
        state["token"] = token = os.urandom(8).hex()
        data = json.dumps(state, indent=1, sort_keys=True)
        tmp = self.folder / f".{_unique()}.tmp"
        try:
            tmp.write_text(data)
        except FileNotFoundError:  # no folder yet, or it was deleted
            return version == 1 and self._create(data)
        try:
            os.link(tmp, self.folder / f"{version}.json")
        except (FileExistsError, FileNotFoundError):
            return False
        finally:
            tmp.unlink(missing_ok=True)
        versions = self._versions()
        if max(versions, default=version) != version and not self._is_parent_of(version + 1, token):
            return False  # a stale writer re-created a deleted version (see module doc)
        self._collect(versions)
        return True

    def _is_parent_of(self, version: int, token: str) -> bool:
        try:
            state = self._read(version)
        except FileNotFoundError:
            return False
        return state is not None and state.get("parent") == token

    def _create(self, data: str) -> bool:
        """Make the folder with version 1 in it, atomically: False if it exists with a state."""
        tmp = self.parent / f".{self.stem}.{_unique()}.tmp"
        tmp.mkdir()
        try:
            (tmp / "1.json").write_text(data)
            os.rename(tmp, self.folder)  # replaces an empty folder, fails on a non-empty one
            return True
        except OSError:
            return False
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _collect(self, versions: list[int]) -> None:
        """Delete versions `_KEEP` behind the newest and older than `_GC_AGE` s, and temporary
        files a killed writer left."""
        if len(versions) <= 2 * _KEEP:
            return
        horizon = max(versions) - _KEEP
        old = time.time() - _GC_AGE
        for version in sorted(v for v in versions if v < horizon):
            path = self.folder / f"{version}.json"
            with contextlib.suppress(FileNotFoundError):
                if path.stat().st_mtime > old:
                    break
                path.unlink()
        for name in os.listdir(self.folder):
            if name.endswith(".tmp"):
                with contextlib.suppress(FileNotFoundError):
                    if (self.folder / name).stat().st_mtime < old:
                        (self.folder / name).unlink()

    def signature(self) -> Any:
        """Changes whenever a new version is written or the state is deleted (for watching)."""
        return max(self._versions(), default=None)

    def __repr__(self) -> str:
        return f"FileGroupStore({str(self.folder)!r})"
