"""The log positions of an exactly-once offset-range batch (docs/design.md, "Micro-batches,
exactly-once and intervals"): which range a batch reads (`plan_batch`), finishing a batch that
reached Delta but not the log (`recover`), and moving the group past a landed batch
(`commit_positions`). The Delta side of the batch, its commit and the record of the last one, is
`jobs.spark.delta.sink`; `jobs.spark.batches.run_offset_batch` runs the sequence.

The group's positions are committed to the log only after the batch's Delta commit. So:

* crash before the Delta commit: nothing landed, positions unchanged; the rerun reads the same
  records (maybe more) again;
* crash after the Delta commit and before the positions: on start, `recover()` finds the last
  batch, sees the group's positions at that batch's recorded starts, and commits its ends first;
  the rerun then only reads what came after (a batch whose commit left the table history is
  old enough for its positions to have been committed: nothing to recover);
* a write replayed with a batch number Delta already recorded for the app id is skipped by Delta
  itself (`DeltaBatchSink`), a second line of defence against double landing.

Recovery only ever moves positions that are exactly at the landed batch's starts. Positions
elsewhere were set on purpose (a rewind re-reads; the MERGE by id makes that idempotent), and a log
that ends before the landed batch was recreated: planning refuses it rather than skip its records.

A rewind to exactly the landed batch's starts (`streamcore recovery reset --to-start` on a group
whose last batch began at offset 0) leaves the positions where a crash does. What tells them apart
is the sink's own record of its position commits: after committing the group's positions, the
sink gives them to the companion group `<group>_landed` too (`landed_group`), and a batch's
metadata keeps that group's positions as they were when it was planned. Positions at the
batch's starts with the companion as it was then: the sink never committed the batch's positions,
a crash, recovered. With the companion moved since: the sink committed them, and someone moved the
group back after, a rewind, read from. (A batch of an older version, without that record, is
recovered as before. A batch whose ends the companion held already leaves no trace when committed:
after a rewind, a batch that found no new record, then a second rewind to the same starts, that
rewind is taken for a crash; nothing is lost, those records landed again with the batch.)

Offsets cannot tell a recreated log that already grew past the landed ends from the old one, and
deleting a log deletes its groups' positions too: a first batch (starts 0) would look like a crash
to recover, and committing the old ends would skip the new log's first records. So planning also
refuses, whatever the positions, when the landed batch's incarnation and the log's current one are
both known and differ. When either is unknown (a batch landed before incarnations were recorded,
its commit cleaned from history, a local log created before they were kept) the rules above apply.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from jobs.spark.delta.sink import DeltaBatchSink, LandedBatch
from streamcore.errors import StreamcoreError
from streamcore.log import LogManager, LogPartition
from streamcore.names import Name

__all__ = [
    "BatchPlan",
    "LogMismatchError",
    "commit_positions",
    "landed_group",
    "plan_batch",
    "read_positions",
    "recover",
]

logger = logging.getLogger(__name__)


class LogMismatchError(StreamcoreError):
    """The log no longer holds what the table or the group's positions say was read from it (it
    was deleted and recreated, or truncated)."""


@dataclass(frozen=True)
class BatchPlan:
    """What a run reads: offsets `[start, end)` per partition of `stream`, as batch `batch`."""

    app_id: str
    stream: str
    group: str
    batch: int
    ranges: dict[int, tuple[int, int]]
    recovered: dict[int, int] = field(default_factory=dict)
    incarnation: str | None = None  # of the log the ranges are offsets of (None: unknown)
    # The companion group's positions when the batch was planned (`landed_group`).
    landed_before: dict[int, int | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for partition, (start, end) in self.ranges.items():
            if not 0 <= start <= end:
                raise LogMismatchError(
                    f"batch {self.batch} of {self.app_id}: the range [{start}, {end}) of partition "
                    f"{partition} of {self.stream} ends before it starts; the group's position is "
                    "beyond the log's end (move it with `streamcore position`)"
                )

    @property
    def records(self) -> int:
        return sum(end - start for start, end in self.ranges.values())

    def metadata(self) -> str:
        """The commit's userMetadata: enough to finish the batch if the job dies after it."""
        return json.dumps(
            {
                "app": self.app_id,
                "batch": self.batch,
                "stream": self.stream,
                "group": self.group,
                "offsets": {str(p): list(r) for p, r in sorted(self.ranges.items())},
                "incarnation": self.incarnation,
                "landed_before": {str(p): o for p, o in sorted(self.landed_before.items())},
            },
            separators=(",", ":"),
        )


def recover(
    sink: DeltaBatchSink,
    manager: LogManager,
    stream: str | Name,
    group: str,
    incarnation: str | None,
) -> tuple[LandedBatch | None, dict[int, int]]:
    """Commit the positions of a batch that reached Delta but not the log (the job died between
    the two). Returns the newest landed batch and the positions committed now, by partition.

    Only positions exactly at the batch's starts move (to its ends), and only when every partition
    is at its start or end: positions anywhere else were moved on purpose since (a rewind asks for
    a re-read). Raises LogMismatchError if the batch was read from another incarnation of the log
    than the current one, `incarnation`, or if the log ends before the batch's ends."""
    landed = sink.last_batch()
    if landed is None:
        return None, {}
    if landed.ranges is None:
        logger.info(
            "batch %d of %s is no longer in the history of %s (Delta log cleanup): its positions "
            "were committed long ago, nothing to recover",
            landed.batch,
            sink.app_id,
            sink.path,
        )
        return landed, {}
    name = Name.of(stream)
    # The offset check first: where it fails, its message (what the log ends at) is more concrete.
    _check_log_holds(sink, landed, manager, name)
    _check_same_log(sink, landed, name, incarnation)
    positions = read_positions(manager, name, group)
    at_start = {p for p, (s, e) in landed.ranges.items() if positions[p] == s < e}
    at_end = {p for p, (_, e) in landed.ranges.items() if positions[p] == e}
    if at_end == set(landed.ranges):
        return landed, {}
    if not at_start or at_start | at_end != set(landed.ranges):
        logger.info(
            "group %s on %s was moved since batch %d of %s (positions %s, batch %s): reading from "
            "its positions, not recovering the batch",
            group,
            name,
            landed.batch,
            sink.app_id,
            positions,
            landed.ranges,
        )
        return landed, {}
    if _committed_since(manager, name, group, landed, at_start):
        logger.info(
            "group %s on %s was moved back to the starts of batch %d of %s after the batch's "
            "positions were committed (%s moved since the batch was planned): reading from its "
            "positions, not recovering the batch",
            group,
            name,
            landed.batch,
            sink.app_id,
            landed_group(group),
        )
        return landed, {}
    fixed = {p: landed.ranges[p][1] for p in sorted(at_start)}
    for partition, end in fixed.items():
        manager.commit_position(LogPartition(name, partition), group, end)
        manager.commit_position(LogPartition(name, partition), landed_group(group), end)
    logger.warning(
        "batch %d of %s reached Delta (version %d) but its positions were not committed (the "
        "previous run stopped in between); committed them now: %s",
        landed.batch,
        sink.app_id,
        landed.version,
        fixed,
    )
    return landed, fixed


def _check_same_log(
    sink: DeltaBatchSink, landed: LandedBatch, name: Name, incarnation: str | None
) -> None:
    """Refuse a log whose incarnation is not the landed batch's, where both are known."""
    if landed.incarnation is None or incarnation is None or landed.incarnation == incarnation:
        return
    raise LogMismatchError(
        f"batch {landed.batch} of {sink.app_id} in {sink.path} was read from {name} incarnation "
        f"{landed.incarnation}, but {name} is now incarnation {incarnation}: the log was deleted "
        f"and recreated since batch {landed.batch} was landed, so neither the table's record of "
        "the batch nor the group's positions describe this log. Nothing was read or committed. "
        "To import the new log, use a new consumer group (--group; it numbers its own batches "
        f"and upserts into the same table), or move {sink.path} away to start the table over"
    )


def _check_log_holds(
    sink: DeltaBatchSink, landed: LandedBatch, manager: LogManager, name: Name
) -> None:
    """Refuse a log that ends before the landed batch: it is not the log the batch was read from."""
    ends = manager.end_offsets(name)
    for partition, (_, end) in sorted((landed.ranges or {}).items()):
        log_end = ends[partition] if partition < len(ends) else None
        if log_end is None or log_end < end:
            now = "does not exist" if log_end is None else f"ends at {log_end}"
            raise LogMismatchError(
                f"batch {landed.batch} of {sink.app_id} in {sink.path} read {name} partition "
                f"{partition} up to offset {end}, but that partition now {now}: the log was "
                "deleted and recreated (or truncated) since, so the table's record of the batch "
                "does not describe this log. Nothing was read or committed. To import the new "
                "log, use a new consumer group (--group; it numbers its own batches and upserts "
                f"into the same table), or move {sink.path} away to start the table over"
            )


def landed_group(group: str) -> str:
    """The companion group whose positions record the sink's last commit of `group`'s (the
    module doc says why)."""
    return Name.of(f"{group}_landed").urn


def _committed_since(
    manager: LogManager, name: Name, group: str, landed: LandedBatch, partitions: set[int]
) -> bool:
    """Did the sink commit `landed`'s positions on any of `partitions` (its companion group moved
    since the batch was planned)? False when the batch has no record of the companion."""
    if landed.landed_before is None:
        return False
    now = manager.committed(name, landed_group(group))
    return any(now[p] != landed.landed_before.get(p) for p in partitions)


def read_positions(manager: LogManager, name: Name, group: str) -> list[int]:
    """Where `group` reads each partition of `name` next: its committed position, or the oldest
    retained offset if it has none (or its position was purged)."""
    starts = manager.start_offsets(name)
    committed = manager.committed(name, group)
    return [
        start if pos is None else max(start, pos)
        for start, pos in zip(starts, committed, strict=True)
    ]


def plan_batch(
    sink: DeltaBatchSink,
    manager: LogManager,
    stream: str | Name,
    group: str,
    *,
    max_records: int = 0,
    until: Mapping[int, int] | None = None,
) -> BatchPlan:
    """Recover if needed, then the next batch: from the group's committed positions (the oldest
    retained offset if none) to the end offsets now, or to `until[partition]` where that comes
    first (the archiver stops at the records of its horizon), at most `max_records` in all (0 =
    no cap)."""
    name = Name.of(stream)
    incarnation = manager.incarnation(name)
    landed, fixed = recover(sink, manager, name, group, incarnation)
    positions = read_positions(manager, name, group)
    ends = manager.end_offsets(name)
    for partition, (pos, end) in enumerate(zip(positions, ends, strict=True)):
        if pos > end:
            raise LogMismatchError(
                f"group {group}'s position {pos} on partition {partition} of {name} is beyond the "
                f"end ({end}) of the log: it was deleted and recreated (or truncated) while the "
                f"group kept its positions. Re-read it with `streamcore position -l {name} -g "
                f"{group} --to-start` (or skip it with --to-end), or use a new consumer group"
            )
    if until is not None:  # a position past its bound (a horizon moved back) reads nothing
        ends = [
            max(pos, min(end, until.get(p, end)))
            for p, (pos, end) in enumerate(zip(positions, ends, strict=True))
        ]
    ranges = _cap(dict(enumerate(zip(positions, ends, strict=True))), max_records)
    batch = landed.batch + 1 if landed is not None else 0
    before = dict(enumerate(manager.committed(name, landed_group(group))))
    return BatchPlan(sink.app_id, name.urn, group, batch, ranges, fixed, incarnation, before)


def _cap(ranges: Mapping[int, tuple[int, int]], max_records: int) -> dict[int, tuple[int, int]]:
    """Shrink the ranges to at most `max_records` records, shared fairly across partitions."""
    out = dict(ranges)
    if max_records <= 0:
        return out
    budget = max_records
    pending = sorted(p for p, (s, e) in out.items() if e > s)
    for p in out:
        out[p] = (out[p][0], out[p][0])
    while budget > 0 and pending:
        share = max(1, budget // len(pending))
        still = []
        for p in pending:
            start, end = ranges[p]
            taken_end = out[p][1]
            take = min(share, end - taken_end, budget)
            out[p] = (start, taken_end + take)
            budget -= take
            if out[p][1] < end:
                still.append(p)
            if budget == 0:
                break
        pending = still
    return out


def commit_positions(manager: LogManager, plan: BatchPlan) -> None:
    """Move the group to the end of the batch (after its Delta commit, never before), then
    record that commit: the companion group (`landed_group`) takes the group's positions, so it
    also holds back no purge the group allows."""
    name = Name.of(plan.stream)
    for partition, (start, end) in sorted(plan.ranges.items()):
        if end > start:
            manager.commit_position(LogPartition(name, partition), plan.group, end)
    companion = landed_group(plan.group)
    recorded = manager.committed(name, companion)
    for partition, pos in enumerate(manager.committed(name, plan.group)):
        if pos is not None and pos != recorded[partition]:
            manager.commit_position(LogPartition(name, partition), companion, pos)
