"""Retention of the local log: which sealed segments may be purged, and who holds the others.

A sealed segment (not the one being written) whose newest record was appended longer ago than
the retention has *expired*; "appended" is the record's timestamp (as Kafka judges its
segments), so history appended with its original times (`append_batch(timestamps=...)`,
`streamcore copy`) ages by those times, and copying or restoring files does not make them
young again. It is purged only when every consumer group with a committed position on its
partition has read past it (the segment's end <= the group's position), so no group loses a
record it has not read: a group behind keeps the expired segments from its position on, and the
purge says which groups hold how many records. A group that never committed a position on a
partition holds nothing there (it starts from the oldest record when it comes), except the
retention job's archiver (`streamcore.log.config.ARCHIVER`) on a log LogConfig archives
(`archive = true`, the default): it holds the whole partition until it has archived it, so
history is archived before it is purged. A log with `archive = false` does not wait for it.

`force` purges the expired segments anyway; the groups behind then lose the records, which their
lag reports as `lost`, and the purge appends what each group lost to `<log>/purges.jsonl`.

The same rule runs when a writer rolls a segment (never forced) and in `LocalLogManager.purge`
(`streamcore purge`, the retention job's purge step).
"""

from __future__ import annotations

import itertools
import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from streamcore.log.local.segment import (
    index_name,
    list_segments,
    newest_batch_timestamp,
    segment_name,
)

__all__ = [
    "PartitionPurge",
    "hold_offset",
    "newest_timestamp",
    "plan_partition",
    "record_loss",
    "sealed_segments",
]

PURGES_FILE = "purges.jsonl"


@dataclass(frozen=True)
class Segment:
    """A sealed segment: offsets `[base, end)`, its size, and whether it has expired."""

    base: int
    end: int
    bytes: int
    expired: bool


def sealed_segments(folder: Path, retention_ms: int, now_ms: int) -> list[Segment]:
    """The sealed segments of a partition folder, oldest first, each expired or not."""
    bases = list_segments(folder)
    horizon = now_ms - retention_ms
    out = []
    for base, end in itertools.pairwise(bases):  # the last one is being written
        try:
            size = (folder / segment_name(base)).stat().st_size
        except FileNotFoundError:  # purged meanwhile by its writer
            continue
        expired = retention_ms > 0 and newest_timestamp(folder, base) < horizon
        out.append(Segment(base, end, size, expired))
    return out


def newest_timestamp(folder: Path, base: int) -> int:
    """The append time (ms) of the newest record of the sealed segment `base`; its file's
    modification time if no batch can be read (a segment written before a crash)."""
    newest = newest_batch_timestamp(folder / segment_name(base), folder / index_name(base))
    if newest is not None:
        return newest
    return (folder / segment_name(base)).stat().st_mtime_ns // 1_000_000


def hold_offset(positions: Mapping[str, int]) -> int | None:
    """The first offset a purge must keep: the lowest committed position (None: no group)."""
    return min(positions.values(), default=None)


@dataclass(frozen=True)
class PartitionPurge:
    """What a purge of one partition does (or would do): the expired segments from the oldest
    on, those it may purge without loss, and per group the records of the expired segments it
    has not read (what it would lose if they were purged anyway)."""

    partition: int
    expired_segments: int = 0
    expired_records: int = 0
    expired_bytes: int = 0
    purgeable_segments: int = 0
    purgeable_records: int = 0
    purgeable_bytes: int = 0
    held_by: dict[str, int] = field(default_factory=dict)


def plan_partition(
    partition: int, segments: list[Segment], positions: Mapping[str, int]
) -> PartitionPurge:
    """The purge of a partition with these sealed segments and committed group positions."""
    expired = []
    for segment in segments:
        if not segment.expired:
            break  # retention removes a prefix: nothing after a young segment
        expired.append(segment)
    if not expired:
        return PartitionPurge(partition)
    hold = hold_offset(positions)
    purgeable = [s for s in expired if hold is None or s.end <= hold]
    first, last = expired[0].base, expired[-1].end
    held_by = {
        group: last - max(pos, first) for group, pos in sorted(positions.items()) if pos < last
    }
    return PartitionPurge(
        partition,
        expired_segments=len(expired),
        expired_records=last - first,
        expired_bytes=sum(s.bytes for s in expired),
        purgeable_segments=len(purgeable),
        purgeable_records=(purgeable[-1].end - first) if purgeable else 0,
        purgeable_bytes=sum(s.bytes for s in purgeable),
        held_by=held_by,
    )


def record_loss(
    log_folder: Path, partition: int, removed_end: int, positions: Mapping[str, int]
) -> dict[str, int]:
    """After a forced purge of a partition up to `removed_end`: the records each group lost,
    appended as one JSON line to `<log>/purges.jsonl` when any did. Returns them."""
    lost = {g: removed_end - p for g, p in sorted(positions.items()) if p < removed_end}
    if lost:
        line = {
            "time_ms": time.time_ns() // 1_000_000,
            "partition": partition,
            "purged_until": removed_end,
            "lost": lost,
        }
        path = log_folder / PURGES_FILE
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, (json.dumps(line) + "\n").encode())
        finally:
            os.close(fd)
    return lost
