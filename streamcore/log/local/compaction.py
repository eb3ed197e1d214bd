"""Key compaction of the local log: sealed segments keep only the latest record of each key.

The semantics are Kafka's `cleanup.policy=compact` (docs/log.md, "Key compaction"):

- Only sealed segments are compacted, never the one being written. The compacted range is the
  sealed segments from the oldest on whose newest record is older than `min_lag`, and, on a log
  LogConfig archives, that the archiver (`streamcore.log.config.ARCHIVER`) has passed, so the
  Delta `archive` keeps every version before compaction removes any.
- A record is removed when a later record with the same key is in the range. Survivors keep
  their offsets, timestamps, keys and values, in order.
- A tombstone deletes its key: an empty value, or a Record envelope (the default `avro` codec)
  with empty data or the `TOMBSTONE` flag. It removes the key's older records at once, and is
  removed itself once older than `delete_retention` (default 1 day, as Kafka's
  `delete.retention.ms`), so a reader that comes within that time sees the delete.
- Consumer groups do not hold compaction (as in Kafka): a group behind reads, for each key it has
  not read yet, the latest value.
- Readers never see an unexplained gap: the records kept are rewritten as `COMPACTED` batches, so
  a cursor moves past removed offsets without reporting a loss and counts them in `compacted`
  (`streamcore.log.local.segment`, `streamcore.log.local.reader`).
- Crash safety: a segment is rewritten into `<segment>.compacting`, fsynced, then renamed over
  the original, so a crash leaves the old file or the new one; the next run deletes leftovers.
  Its sparse index is removed first and written afresh after (readers verify index entries).
- One purge or compaction of a partition at a time (`streamcore.log.local.maintenance`); a busy
  partition is skipped and reported as such.
"""

from __future__ import annotations

import errno
import itertools
import os
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from streamcore.errors import LogWriteError
from streamcore.log.local.maintenance import maintenance_lock
from streamcore.log.local.retention import newest_timestamp
from streamcore.log.local.segment import (
    COMPACTED,
    encode_raw_batch,
    index_name,
    list_segments,
    read_batches,
    segment_name,
)
from streamcore.record import TOMBSTONE

__all__ = [
    "DEFAULT_DELETE_RETENTION_MS",
    "PartitionCompaction",
    "compact_partition",
    "tombstone_test",
]

DEFAULT_DELETE_RETENTION_MS = 24 * 3600 * 1000
INDEX_EVERY = 64 * 1024  # as the writer's sparse index
LEFTOVER_SUFFIX = ".compacting"

Tombstones = Callable[[bytes], bool]


@dataclass(frozen=True)
class PartitionCompaction:
    """What compacting one partition did (or would do, on a dry run)."""

    partition: int
    segments: int = 0  # sealed segments in the compacted range
    until: int | None = None  # the offset the range ends at
    records: int = 0  # records in the range before
    removed: int = 0  # records removed: older versions of keys, and expired tombstones
    tombstones: int = 0  # expired tombstones among them
    keys: int = 0  # keys that lost at least one record
    bytes_before: int = 0  # of the segments rewritten
    bytes_after: int = 0
    rewritten: int = 0  # segments rewritten
    busy: bool = False  # another purge or compaction held the partition: nothing done


def tombstone_test(decode: Callable[[bytes], object]) -> Tombstones:
    """Whether a stored value is a tombstone, given the Record decoder of the log's codec (a
    value it cannot decode is not a Record envelope, so only an empty one is a tombstone)."""
    from streamcore.errors import StreamcoreError
    from streamcore.record import Record

    def is_tombstone(value: bytes) -> bool:
        if not value:
            return True
        try:
            record = decode(value)
        except StreamcoreError:
            return False
        return isinstance(record, Record) and (not record.data or record.has(TOMBSTONE))

    return is_tombstone


def compact_partition(
    folder: Path,
    partition: int,
    *,
    hold: int | None,
    now_ms: int,
    is_tombstone: Tombstones,
    min_lag_ms: int = 0,
    delete_retention_ms: int = DEFAULT_DELETE_RETENTION_MS,
    dry_run: bool = False,
) -> PartitionCompaction:
    """Compact the sealed segments of one partition folder (see the module docstring). `hold`:
    the range ends at or before this offset (the archiver's position; None: no bound)."""
    with maintenance_lock(folder) as locked:
        if not locked:
            return PartitionCompaction(partition, busy=True)
        if not dry_run:
            for leftover in folder.glob(f"*{LEFTOVER_SUFFIX}"):
                leftover.unlink(missing_ok=True)
        segments = _range(folder, hold, now_ms - min_lag_ms)
        if not segments:
            return PartitionCompaction(partition)
        latest: dict[bytes, int] = {}
        records = 0
        for base, _ in segments:
            for batch in read_batches(folder / segment_name(base), base):
                for offset, _, key, _ in batch.raw():
                    latest[key] = offset
                records += batch.count
        expired_before = now_ms - delete_retention_ms
        removed = tombstones = rewritten = bytes_before = bytes_after = 0
        keys: set[bytes] = set()
        for base, end in segments:
            path = folder / segment_name(base)
            batches = read_batches(path, base)
            kept: list[list[tuple[int, int, bytes, bytes]]] = []
            dropped = newest = 0
            for batch in batches:
                run: list[tuple[int, int, bytes, bytes]] = []
                for record in batch.raw():
                    offset, ts, key, value = record
                    newest = max(newest, ts)
                    if latest[key] != offset:
                        keys.add(key)
                    elif ts < expired_before and is_tombstone(value):
                        tombstones += 1
                        keys.add(key)
                    else:
                        run.append(record)
                        continue
                    dropped += 1
                    if run:
                        kept.append(run)
                        run = []
                if run:
                    kept.append(run)
            if not dropped:
                continue
            removed += dropped
            rewritten += 1
            size = path.stat().st_size
            bytes_before += size
            buffers, index = _encode(kept, end, newest)
            bytes_after += sum(len(b) for b in buffers)
            if not dry_run:
                _replace(folder, base, buffers, index)
        return PartitionCompaction(
            partition,
            segments=len(segments),
            until=segments[-1][1],
            records=records,
            removed=removed,
            tombstones=tombstones,
            keys=len(keys),
            bytes_before=bytes_before,
            bytes_after=bytes_after,
            rewritten=rewritten,
        )


def _range(folder: Path, hold: int | None, young_from: int) -> list[tuple[int, int]]:
    """(base, end) of the sealed segments compaction may rewrite, oldest first."""
    out = []
    for base, end in itertools.pairwise(list_segments(folder)):  # the last one is being written
        if (hold is not None and end > hold) or newest_timestamp(folder, base) >= young_from:
            break
        out.append((base, end))
    return out


def _encode(
    runs: list[list[tuple[int, int, bytes, bytes]]], end: int, newest: int
) -> tuple[list[bytes | memoryview], list[tuple[int, int]]]:
    """The new segment's buffers (one COMPACTED batch per run of consecutive survivors, then an
    empty one at `end` if the segment's last records went) and its sparse index."""
    buffers: list[bytes | memoryview] = []
    index: list[tuple[int, int]] = []
    position, since_index = 0, INDEX_EVERY
    batches = [
        (
            run[0][0],
            [r[2] for r in run],
            [r[3] for r in run],
            [r[1] for r in run],
        )
        for run in runs
    ]
    last = runs[-1][-1][0] if runs else None
    if last != end - 1:
        batches.append((end, [], [], []))
    for base, keys, values, timestamps in batches:
        parts, size = encode_raw_batch(
            base, keys, values, timestamps, timestamp=newest, flags=COMPACTED
        )
        if since_index >= INDEX_EVERY:
            index.append((base, position))
            since_index = 0
        buffers += parts
        position += size
        since_index += size
    return buffers, index


def _replace(
    folder: Path, base: int, buffers: list[bytes | memoryview], index: list[tuple[int, int]]
) -> None:
    path = folder / segment_name(base)
    tmp = path.with_name(path.name + LEFTOVER_SUFFIX)
    stat = path.stat()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for first in range(0, len(buffers), 512):  # at most IOV_MAX (1024) buffers per call
            chunk = buffers[first : first + 512]
            wanted = sum(len(b) for b in chunk)
            if os.writev(fd, chunk) != wanted:
                raise LogWriteError(
                    f"{tmp}: short write while compacting (is the disk full?)", errno.EIO
                )
        os.fsync(fd)
    finally:
        os.close(fd)
    # The file's age is the mtime retention falls back on: a rewrite must not make it young.
    os.utime(tmp, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    (folder / index_name(base)).unlink(missing_ok=True)
    os.replace(tmp, path)
    flat = array("q", [v for pair in index for v in pair])
    index_tmp = folder / (index_name(base) + ".tmp")
    index_tmp.write_bytes(flat.tobytes())
    os.replace(index_tmp, folder / index_name(base))
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
