"""Moving a consumer group: skip one poison record, or reset positions, with a preview first.

    plan = plan_skip(manager, "app/orders", "enrich", partition=0, offset=42)
    plan = plan_reset(manager, "app/orders", "enrich", ResetTarget(timestamp_ms=...))
    print(plan.rows())          # per partition: before, after, end, re-read, skipped
    apply_plan(manager, plan)   # after check_no_live_members(group, members)

A plan is computed from the committed positions and the partitions' bounds, and checked against
them (an unknown group, an offset out of range, a reset into purged data are refused with what the
stream holds) before anything moves. A reset into purged data is an offset below the oldest
retained one, or a date or watermark whose first record may have been purged: one that resolves
to the oldest retained record of a partition that lost older ones (purged records may share its
millisecond, and watermarks need not grow with offsets). A position is the offset of the next
record to process. A group that never committed on a partition reads it from its oldest retained
record.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from streamcore.log import LiveMember, LogManager, LogPartition
from streamcore.log.config import TOOLS_GROUP
from streamcore.names import Name
from streamcore.recovery.deadletters import read_range
from streamcore.recovery.errors import LiveMembersError, SelectionError
from streamcore.recovery.targets import ResetTarget
from streamcore.text import iso_time

__all__ = [
    "PositionMove",
    "PositionPlan",
    "apply_plan",
    "check_no_live_members",
    "plan_reset",
    "plan_skip",
]


@dataclass(frozen=True, slots=True)
class PositionMove:
    """One partition's move from `before` (None: never committed) to `after`; `start` / `end`
    are the partition's oldest retained offset and its end."""

    partition: int
    before: int | None
    after: int
    start: int
    end: int

    @property
    def current(self) -> int:
        """Where the group would read next today."""
        return self.start if self.before is None else max(self.before, self.start)

    @property
    def reread(self) -> int:
        """Records the group will process again."""
        return max(0, self.current - self.after)

    @property
    def skipped(self) -> int:
        """Records the group will never process."""
        return max(0, self.after - self.current)

    def to_dict(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "before": self.before,
            "after": self.after,
            "end": self.end,
            "reread": self.reread,
            "skipped": self.skipped,
        }


@dataclass(frozen=True, slots=True)
class PositionPlan:
    """The moves of `group` on `stream` that `action` (`skip`, `reset to-offset` ...) makes."""

    stream: str
    group: str
    action: str
    moves: tuple[PositionMove, ...]

    def rows(self) -> list[dict[str, Any]]:
        return [m.to_dict() for m in self.moves]

    @property
    def reread(self) -> int:
        return sum(m.reread for m in self.moves)

    @property
    def skipped(self) -> int:
        return sum(m.skipped for m in self.moves)


def _bounds(
    manager: LogManager, stream: str, group: str, new_group: bool = False
) -> tuple[Name, list[int], list[int], list[int | None]]:
    name = Name.of(stream)
    if not manager.exists(name):
        raise SelectionError(
            f"stream {name.urn} does not exist; list streams with `streamcore logs`"
        )
    groups = manager.list_groups(name)
    if not new_group and group not in groups:
        known = ", ".join(groups) or "none"
        raise SelectionError(
            f"group {group!r} has no position on {name.urn} (its groups: {known}); check the "
            "group name (a computation's group is its name)"
        )
    return (
        name,
        manager.start_offsets(name),
        manager.end_offsets(name),
        manager.committed(name, group),
    )


def _check_partition(name: Name, partition: int, size: int) -> None:
    if not 0 <= partition < size:
        raise SelectionError(f"{name.urn} has partitions 0..{size - 1}, not {partition}")


def plan_skip(
    manager: LogManager, stream: str, group: str, *, partition: int, offset: int
) -> PositionPlan:
    """Move `group` past the record at `offset` of `partition`, which must be the record the
    group stands at (a poison record that stopped its computation)."""
    name, starts, ends, committed = _bounds(manager, stream, group)
    _check_partition(name, partition, len(ends))
    start, end = starts[partition], ends[partition]
    if not start <= offset < end:
        held = f"offsets {start}..{end - 1}" if end > start else "no record"
        raise SelectionError(
            f"{name.urn} partition {partition} holds {held}, not {offset}: nothing to skip there"
        )
    move = PositionMove(partition, committed[partition], offset + 1, start, end)
    if move.current != offset:
        raise SelectionError(
            f"group {group!r} stands at offset {move.current} of {name.urn} partition "
            f"{partition}, not at {offset}: skipping {offset} would also "
            f"{'skip' if move.current < offset else 're-read'} the records in between; use a "
            "reset to move it further, or skip the offset it stands at"
        )
    return PositionPlan(name.urn, group, f"skip {partition}:{offset}", (move,))


def plan_reset(
    manager: LogManager,
    stream: str,
    group: str,
    target: ResetTarget,
    *,
    partitions: Sequence[int] | None = None,
    codec: Any = None,
    new_group: bool = False,
) -> PositionPlan:
    """Move `group` on `partitions` (default: all) to `target`. A watermark target reads the
    records (with `codec`, the stream's Record codec) to find the first one at or above it.
    A group with no position on the stream is refused unless `new_group` (to place a group
    before its first consumer starts)."""
    name, starts, ends, committed = _bounds(manager, stream, group, new_group)
    chosen = list(range(len(ends))) if partitions is None else list(partitions)
    for p in chosen:
        _check_partition(name, p, len(ends))
    if target.offset is not None and len(chosen) != 1:
        raise SelectionError("a reset to an offset names one partition")
    if target.watermark is not None and codec is None:
        raise SelectionError("a reset to a watermark reads the records: give the Record codec")
    moves = []
    for p in chosen:
        after = _target_offset(manager, name, p, starts[p], ends[p], target, codec)
        moves.append(PositionMove(p, committed[p], after, starts[p], ends[p]))
    return PositionPlan(name.urn, group, f"reset {target.label}", tuple(moves))


def _target_offset(
    manager: LogManager, name: Name, p: int, start: int, end: int, target: ResetTarget, codec: Any
) -> int:
    if target.end:
        return end
    if target.start:
        return start
    if target.offset is not None:
        if target.offset < start:
            raise SelectionError(
                f"{name.urn} partition {p}: offset {target.offset} was purged by retention (the "
                f"oldest retained is {start}); reset to {start} or later, or restore the "
                "records from the archive first (backfill)"
            )
        if target.offset > end:
            raise SelectionError(
                f"{name.urn} partition {p} ends at {end}; offset {target.offset} does not exist "
                f"yet (reset to {end} to skip everything)"
            )
        return target.offset
    partition = LogPartition.of(name, p)
    after = end
    if target.timestamp_ms is not None:
        with manager.tailer(TOOLS_GROUP, [partition]) as tailer:
            found = tailer.offset_for_timestamp(partition, target.timestamp_ms)
        after = end if found is None else max(found.offset, start)
    else:
        with manager.tailer(TOOLS_GROUP, [partition], codec) as tailer:
            for rec in read_range(tailer, partition, start, end):
                if rec.message.watermark >= target.watermark:
                    after = rec.offset
                    break
    if after == start and start > 0:
        # The answer is the oldest retained record (or the end, none being retained): the
        # purged records before it may hold the first one asked for, and would be skipped.
        raise SelectionError(_purged_message(manager, name, p, start, end, target))
    return after


def _purged_message(
    manager: LogManager, name: Name, p: int, start: int, end: int, target: ResetTarget
) -> str:
    if target.timestamp_ms is not None:
        asked = f"appended at or after {iso_time(target.timestamp_ms)}"
    else:
        asked = f"with a watermark of at least {target.watermark}"
    oldest = manager.record_at(LogPartition.of(name, p), start) if start < end else None
    if oldest is None:
        held, later = f"holds no record: offsets 0..{start - 1} were all purged", ""
    else:
        since = iso_time(oldest[2])
        held = (
            f"holds offsets {start}..{end - 1} (offset {start} appended at {since}); offsets "
            f"0..{start - 1} were purged by retention"
        )
        later = f", or to a date after {since}" if target.timestamp_ms is not None else ""
    return (
        f"{name.urn} partition {p} {held}, so the first record {asked} may be a purged one, "
        f"which this reset would skip. Restore the purged records with a backfill first "
        "(jobs/backfill.py or the DAG streamcore_backfill replays an interval from the "
        "archive; docs/spark-jobs.md), or skip them knowingly: reset to the start (--to-start, "
        f"offset {start}){later}"
    )


def check_no_live_members(group: str, members: Sequence[LiveMember]) -> None:
    """Refuse while `group` has live members (`manager.group_members(group)`): they would
    commit over a moved position."""
    if members:
        shown = ", ".join(m.member_id + (f" on {m.host}" if m.host else "") for m in members)
        raise LiveMembersError(
            f"group {group!r} has {len(members)} live member(s) ({shown}): they would commit "
            "over the new position. Stop the computation first, or pass --force (its members "
            "then overwrite the move at their next commit)"
        )


def apply_plan(manager: LogManager, plan: PositionPlan) -> None:
    """Commit the plan's positions."""
    name = Name.of(plan.stream)
    for move in plan.moves:
        manager.commit_position(LogPartition.of(name, move.partition), plan.group, move.after)
