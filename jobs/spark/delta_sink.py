"""The exactly-once Delta sink of offset-range batches (DESIGN.md section 7).

A batch is the records of a consumer group from its committed positions to the end offsets seen
at start. Its write to Delta is one commit carrying `txnAppId = <job>/<group>`,
`txnVersion = <batch number>` and, in the commit's `userMetadata`, the batch's offset ranges.
The group's positions are committed to the log only after that Delta commit. So:

* crash before the Delta commit: nothing landed, positions unchanged; the rerun reads the same
  records (maybe more) again;
* crash after the Delta commit and before the positions: on start, `recover()` finds the last
  batch in the table's history, sees the log positions behind its recorded ends, and commits them
  first; the rerun then only reads what came after;
* a write replayed with a batch number Delta already recorded for the app id is skipped by Delta
  itself (idempotent writes), a second line of defence against double landing.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from streamcore.log import LogManager, LogPartition
from streamcore.names import Name

__all__ = ["BatchPlan", "DeltaBatchSink", "plan_batch"]

logger = logging.getLogger(__name__)
_TXN_APP = "spark.databricks.delta.write.txnAppId"
_TXN_VERSION = "spark.databricks.delta.write.txnVersion"
_USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"


@dataclass(frozen=True)
class BatchPlan:
    """What a run reads: offsets `[start, end)` per partition of `stream`, as batch `batch`."""

    app_id: str
    stream: str
    group: str
    batch: int
    ranges: dict[int, tuple[int, int]]
    recovered: dict[int, int] = field(default_factory=dict)

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
            },
            separators=(",", ":"),
        )


@dataclass(frozen=True)
class LandedBatch:
    """The newest batch of an app found in a table: its number, offsets and table version."""

    batch: int
    ends: dict[int, int]
    version: int


class DeltaBatchSink:
    """Offset-range batches of one app id into the Delta table at `path`."""

    def __init__(self, spark: SparkSession, path: str, app_id: str) -> None:
        self.spark = spark
        self.path = path
        self.app_id = app_id

    def exists(self) -> bool:
        from delta.tables import DeltaTable

        return DeltaTable.isDeltaTable(self.spark, self.path)

    def last_batch(self) -> LandedBatch | None:
        """The newest batch of this app id recorded in the table's history, or None."""
        if not self.exists():
            return None
        from delta.tables import DeltaTable

        marker = json.dumps({"app": self.app_id})[1:-1]  # '"app": "..."' without braces
        compact = marker.replace('": "', '":"')
        rows = (
            DeltaTable.forPath(self.spark, self.path)
            .history()
            .where(F.col("userMetadata").contains(compact))
            .orderBy(F.col("version").desc())
            .select("version", "userMetadata")
            .limit(1)
            .collect()
        )
        if not rows:
            return None
        meta = json.loads(rows[0]["userMetadata"])
        ends = {int(p): int(r[1]) for p, r in meta["offsets"].items()}
        return LandedBatch(int(meta["batch"]), ends, int(rows[0]["version"]))

    def write(self, plan: BatchPlan, action: Callable[[], None]) -> int | None:
        """Run `action` (one Delta write or MERGE on this table) as batch `plan.batch`: the commit
        gets the txn id and the batch metadata. Returns the new table version (None if Delta
        skipped the write because that batch had landed already)."""
        before = self.version()
        conf = self.spark.conf
        conf.set(_TXN_APP, self.app_id)
        conf.set(_TXN_VERSION, str(plan.batch))
        conf.set(_USER_METADATA, plan.metadata())
        try:
            action()
        finally:
            for key in (_TXN_APP, _TXN_VERSION, _USER_METADATA):
                conf.unset(key)
        after = self.version()
        if after == before:
            logger.warning(
                "%s: batch %d of %s was already in the table; Delta skipped the write",
                self.path,
                plan.batch,
                self.app_id,
            )
            return None
        return after

    def version(self) -> int | None:
        if not self.exists():
            return None
        from delta.tables import DeltaTable

        row = DeltaTable.forPath(self.spark, self.path).history(1).select("version").first()
        return int(row["version"]) if row else None


def recover(
    sink: DeltaBatchSink, manager: LogManager, stream: str | Name, group: str
) -> tuple[LandedBatch | None, dict[int, int]]:
    """Commit the positions of a batch that reached Delta but not the log (the job died between
    the two). Returns the newest landed batch and the positions committed now, by partition."""
    landed = sink.last_batch()
    if landed is None:
        return None, {}
    name = Name.of(stream)
    committed = manager.committed(name, group)
    fixed: dict[int, int] = {}
    for partition, end in sorted(landed.ends.items()):
        current = committed[partition] if partition < len(committed) else None
        if current is None or current < end:
            manager_for_group(manager, name, group).commit_position(
                LogPartition(name, partition), group, end
            )
            fixed[partition] = end
    if fixed:
        logger.warning(
            "batch %d of %s reached Delta (version %d) but its positions were not committed (the "
            "previous run stopped in between); committed them now: %s",
            landed.batch,
            sink.app_id,
            landed.version,
            fixed,
        )
    return landed, fixed


def manager_for_group(manager: LogManager, name: Name, group: str) -> Any:
    """The backend manager that keeps `group`'s positions on `name` (it has `commit_position`)."""
    from streamcore.log.unified import UnifiedLogManager

    if isinstance(manager, UnifiedLogManager):
        return manager.manager_for(name, group)
    return manager


def plan_batch(
    sink: DeltaBatchSink,
    manager: LogManager,
    stream: str | Name,
    group: str,
    *,
    max_records: int = 0,
) -> BatchPlan:
    """Recover if needed, then the next batch: from the group's committed positions (the oldest
    retained offset if none) to the end offsets now, at most `max_records` in all (0 = no cap)."""
    name = Name.of(stream)
    landed, fixed = recover(sink, manager, name, group)
    starts = manager.start_offsets(name)
    ends = manager.end_offsets(name)
    committed = manager.committed(name, group)
    positions = [
        max(start, pos) if pos is not None else start
        for start, pos in zip(starts, committed, strict=True)
    ]
    ranges = _cap(
        {p: (pos, end) for p, (pos, end) in enumerate(zip(positions, ends, strict=True))},
        max_records,
    )
    batch = landed.batch + 1 if landed is not None else 0
    return BatchPlan(sink.app_id, name.urn, group, batch, ranges, fixed)


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
    """Move the group to the end of the batch (after its Delta commit, never before)."""
    name = Name.of(plan.stream)
    backend = manager_for_group(manager, name, plan.group)
    for partition, (start, end) in sorted(plan.ranges.items()):
        if end > start:
            backend.commit_position(LogPartition(name, partition), plan.group, end)
