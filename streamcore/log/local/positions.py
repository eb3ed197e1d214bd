"""Committed consumer positions of the local log: one small file per (group, partition).

`groups/<group-id>/p-NN` holds `offset i64 | timestamp i64 | crc32 u32`. A commit writes a
temporary file and renames it over the old one, so after a crash the file holds the old position or
the new one, never a mix. With `fsync` other than `none` the file and its folder are fsynced.
"""

from __future__ import annotations

import os
import struct
import threading
import time
import zlib
from pathlib import Path

from streamcore.errors import CorruptLogError
from streamcore.names import Name

_ENTRY = struct.Struct("<qqI")


def group_id(group: str) -> str:
    """The folder name of a consumer group (its Name id; validates the group name)."""
    return Name.of(group).id


class PositionStore:
    def __init__(self, log_folder: Path, fsync: str) -> None:
        self.folder = log_folder / "groups"
        self.fsync = fsync

    def _path(self, group: str, partition: int) -> Path:
        return self.folder / group_id(group) / f"p-{partition:02d}"

    def commit(self, group: str, partition: int, offset: int) -> None:
        path = self._path(group, partition)
        path.parent.mkdir(parents=True, exist_ok=True)
        payload = struct.pack("<qq", offset, time.time_ns() // 1_000_000)
        data = payload + struct.pack("<I", zlib.crc32(payload))
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, data)
            if self.fsync != "none":
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        if self.fsync != "none":
            dfd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)

    def committed(self, group: str, partition: int) -> int | None:
        try:
            data = self._path(group, partition).read_bytes()
        except FileNotFoundError:
            return None
        if len(data) != _ENTRY.size:
            raise CorruptLogError(self._bad(group, partition, f"{len(data)} bytes"))
        offset, _, crc = _ENTRY.unpack(data)
        if zlib.crc32(data[:16]) != crc:
            raise CorruptLogError(self._bad(group, partition, "checksum mismatch"))
        return offset

    def _bad(self, group: str, partition: int, what: str) -> str:
        return (
            f"committed position of group {group!r} partition {partition} is unreadable ({what}); "
            f"reset it with `streamcore position -g {group} --to-start` (or --to-end)"
        )

    def groups(self) -> list[str]:
        try:
            return sorted(
                Name.of_id(d).urn for d in os.listdir(self.folder) if not d.startswith(".")
            )
        except FileNotFoundError:
            return []
