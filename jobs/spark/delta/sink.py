"""The exactly-once Delta sink of offset-range batches (docs/design.md, "Micro-batches,
exactly-once and intervals").

A batch is the records of a consumer group from its committed positions to the end offsets seen
at start (`jobs.spark.batch_positions.plan_batch`). Its write to Delta is one commit carrying
`txnAppId = <job>/<group>`, `txnVersion = <batch number>` and, in the commit's `userMetadata`,
the batch's offset ranges and the log's incarnation (`LogManager.incarnation`); the runner
(`jobs.spark.batches.run_offset_batch`) commits the group's positions only after that commit.
A write replayed with a batch number Delta already recorded for the app id is skipped by Delta
itself (idempotent writes), a second line of defence against double landing.

The last batch number is Delta's own record of the app id (the `SetTransaction` of the table
snapshot, kept across checkpoints), not `history()`, which log cleanup truncates. Its offsets come
from its commit in history; a commit cleaned up from history is old enough for its positions to
have been committed (by its own run or the recovery of the next one), so it needs no recovery.
What a crash between the two commits leaves, and how the next run finishes it:
`jobs.spark.batch_positions`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs.spark.delta import sql as delta_sql

if TYPE_CHECKING:
    from jobs.spark.batch_positions import BatchPlan

__all__ = ["DeltaBatchSink", "LandedBatch", "commit_metrics"]

logger = logging.getLogger(__name__)
_TXN_APP = "spark.databricks.delta.write.txnAppId"
_TXN_VERSION = "spark.databricks.delta.write.txnVersion"
_USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"


@dataclass(frozen=True)
class LandedBatch:
    """The newest batch of an app in a table: its number (Delta's transaction version of the app
    id) and, while its commit is still in the table history, its offset ranges, version, the
    incarnation of the log it read and the companion group's positions when it was planned (None
    if its commit predates their recording)."""

    batch: int
    ranges: dict[int, tuple[int, int]] | None = None
    version: int | None = None
    incarnation: str | None = None
    landed_before: dict[int, int | None] | None = None

    @property
    def ends(self) -> dict[int, int] | None:
        return None if self.ranges is None else {p: end for p, (_, end) in self.ranges.items()}


class DeltaBatchSink:
    """Offset-range batches of one app id into the Delta table at `path`."""

    def __init__(self, spark: SparkSession, path: str, app_id: str) -> None:
        self.spark = spark
        self.path = path
        self.app_id = app_id

    def exists(self) -> bool:
        return delta_sql.is_delta_table(self.spark, self.path)

    def last_batch(self) -> LandedBatch | None:
        """The newest batch of this app id that reached the table, or None."""
        batch = self.txn_version()
        if batch is None:
            return None
        # The metadata JSON starts with app and batch (BatchPlan.metadata): match both at once.
        marker = json.dumps({"app": self.app_id, "batch": batch}, separators=(",", ":"))
        rows = (
            delta_sql.history(self.spark, self.path)
            .where(F.col("userMetadata").startswith(marker[:-1] + ","))
            .orderBy(F.col("version").desc())
            .select("version", "userMetadata")
            .limit(1)
            .collect()
        )
        if not rows:
            return LandedBatch(batch)
        meta = json.loads(rows[0]["userMetadata"])
        ranges = {int(p): (int(r[0]), int(r[1])) for p, r in meta["offsets"].items()}
        before = meta.get("landed_before")
        return LandedBatch(
            batch,
            ranges,
            int(rows[0]["version"]),
            meta.get("incarnation"),
            None if before is None else {int(p): o for p, o in before.items()},
        )

    def txn_version(self) -> int | None:
        """The newest batch number Delta recorded for this app id (None if none): the table
        snapshot's transaction of the app id, which checkpoints keep when history is cleaned."""
        if not self.exists():
            return None
        return delta_sql.txn_version(self.spark, self.path, self.app_id)

    def write(self, plan: BatchPlan, action: Callable[[], None]) -> int | None:
        """Run `action` (one Delta write or MERGE on this table) as batch `plan.batch`: the commit
        gets the txn id and the batch metadata. Returns the new table version (None if Delta
        skipped the write because that batch had landed already)."""
        return self.write_batch(plan.batch, plan.metadata(), action)

    def write_batch(self, batch: int, metadata: str, action: Callable[[], None]) -> int | None:
        """`write` for a batch that is not an offset range (a bulk command's batch): `action`'s
        commit carries txn id (app id, `batch`) and `metadata` as its user metadata."""
        before = self.version()
        txn = {_TXN_APP: self.app_id, _TXN_VERSION: str(batch), _USER_METADATA: metadata}
        with delta_sql.session_confs(self.spark, txn):
            action()
        after = self.version()
        if after == before:
            logger.warning(
                "%s: batch %d of %s was already in the table; Delta skipped the write",
                self.path,
                batch,
                self.app_id,
            )
            return None
        return after

    def version(self) -> int | None:
        return delta_sql.version_or_none(self.spark, self.path)


def commit_metrics(spark: SparkSession, path: str, version: int) -> dict[str, str]:
    """Delta's `operationMetrics` of commit `version` of the table at `path` (numOutputBytes,
    numTargetRowsInserted, ...; empty if the commit left the history)."""
    history = delta_sql.history(spark, path).where(F.col("version") == int(version))
    row = history.select("operationMetrics").first()
    return dict(row["operationMetrics"] or {}) if row else {}
