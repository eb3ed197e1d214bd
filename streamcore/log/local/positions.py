"""Committed consumer positions of the local log: one small file per (group, partition).

`groups/<group-id>/p-NN` holds two slots of `offset i64 | timestamp i64 | sequence u32 | crc32 u32`.
A commit overwrites, in place, the slot that does not hold the newest position, with the next
sequence number; reading takes the valid slot with the highest sequence. A crash in the middle of
a write leaves at worst that slot unreadable (its checksum fails), and the other slot still holds
the previous position: the consumer re-reads a few records, which at-least-once delivery allows.

Why not write a temporary file and rename it: on ext4 a rename over an existing file forces the
new file's data to disk (`auto_da_alloc`), about 1 ms a commit here, which made committing cost
more than reading the records it covers. With `fsync` other than `none` the file is fsynced.
A first commit, and the next commit of a file of the older one-slot layout (20 bytes, still read)
or of a damaged file, writes a new file and renames it over, so a crash leaves the old file.
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

__all__ = ["LocalPositionStore"]

_SLOT = struct.Struct("<qqII")
_FILE_SIZE = 2 * _SLOT.size
_LEGACY = struct.Struct("<qqI")


def group_id(group: str) -> str:
    """The folder name of a consumer group (its Name id; validates the group name)."""
    return Name.of(group).id


def _slot(offset: int, sequence: int) -> bytes:
    head = struct.pack("<qqI", offset, time.time_ns() // 1_000_000, sequence)
    return head + struct.pack("<I", zlib.crc32(head))


def _newest(data: bytes) -> tuple[int, int] | None:
    """(offset, sequence) of the newest valid slot of a two-slot file, None if neither is."""
    best: tuple[int, int] | None = None
    for base in (0, _SLOT.size):
        offset, _, sequence, crc = _SLOT.unpack_from(data, base)
        if zlib.crc32(data[base : base + 20]) == crc and (best is None or sequence > best[1]):
            best = (offset, sequence)
    return best


class LocalPositionStore:
    """The local log's committed positions, a file per group and partition (a `PositionStore`
    of the cursor tailer)."""

    def __init__(self, log_folder: Path, fsync: str) -> None:
        self.folder = log_folder / "groups"
        self.fsync = fsync

    def _path(self, group: str, partition: int) -> Path:
        return self.folder / group_id(group) / f"p-{partition:02d}"

    def commit(self, group: str, partition: int, offset: int) -> None:
        path = self._path(group, partition)
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            fd = -1
        if fd >= 0:
            try:
                current = os.pread(fd, _FILE_SIZE + 1, 0)
                newest = _newest(current) if len(current) == _FILE_SIZE else None
                if newest is not None and newest[1] < 0xFFFFFFFF:  # else start over at 0
                    sequence = newest[1] + 1
                    os.pwrite(fd, _slot(offset, sequence), (sequence % 2) * _SLOT.size)
                    if self.fsync != "none":
                        os.fsync(fd)
                    return
            finally:
                os.close(fd)
        self._replace(path, offset)

    def _replace(self, path: Path, offset: int) -> None:
        """Write a new file (sequence 0 in slot 0) beside `path` and rename it over: for a first
        commit, a file of the older layout, or a damaged one, so a crash leaves the old file."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, _slot(offset, 0) + bytes(_SLOT.size))
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
        if len(data) == _LEGACY.size:
            offset: int
            offset, _, crc = _LEGACY.unpack(data)
            if zlib.crc32(data[:16]) != crc:
                raise CorruptLogError(self._bad(group, partition, "checksum mismatch"))
            return offset
        if len(data) != _FILE_SIZE:
            raise CorruptLogError(self._bad(group, partition, f"{len(data)} bytes"))
        newest = _newest(data)
        if newest is None:
            raise CorruptLogError(self._bad(group, partition, "checksum mismatch"))
        return newest[0]

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
