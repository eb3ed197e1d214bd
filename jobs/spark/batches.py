"""Micro-batches of a stream into Delta, as one reusable piece (docs/design.md, "Micro-batches,
exactly-once and intervals").

**Offset-range batches** (`run_offset_batch`): plan (recover a batch that reached Delta but not
the log, then the group's committed positions to the end observed now) → read the ranges as
decoded Records → the job's `land` (transform, checks), which returns what it wants written, a
`BatchWrite` → the runner writes it as the batch's one Delta commit (`DeltaBatchSink.write`) →
check that a skipped write was this very batch → commit the group's positions (and the sink's
record of that commit, `batch_positions.landed_group`). A crash at any point, then a rerun, gives no
duplicate and no loss; an operator's rewind of the group, even to exactly the last batch's
starts, is read from, not taken for a crash. A job supplies only `land`, which never sees the
sink: it cannot write the batch outside this sequence.

Batches over a time interval instead of a group's positions: `jobs.spark.logs.intervals`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from jobs.spark.job import JobError
from streamcore.errors import StreamcoreError
from streamcore.names import Name

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from jobs.spark.batch_positions import BatchPlan
    from jobs.spark.delta.sink import DeltaBatchSink
    from jobs.spark.delta.sql import Append, Merge
    from jobs.spark.job import JobContext

__all__ = ["BatchWrite", "Land", "run_offset_batch"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class BatchWrite:
    """What a landing wants written of its batch: `action`, a MERGE into the batch's table or an
    append to it, not yet run; `phase`, the phase of the job's summary its run is timed as; its
    part of the summary, `summary` known before the write, and `then(version)` the fields known
    only after it (Delta's commit metrics, the checks' report), `version` being the Delta version
    written or None when Delta skipped the write as already landed."""

    action: Merge | Append
    phase: str = "write"
    summary: dict[str, Any] = field(default_factory=dict)
    then: Callable[[int | None], dict[str, Any]] | None = None

    def finish(self, version: int | None) -> dict[str, Any]:
        """The write's part of the summary once `version` is known."""
        return {**self.summary, **(self.then(version) if self.then else {})}


Land = Callable[["DataFrame", "BatchPlan"], BatchWrite]


def run_offset_batch(
    ctx: JobContext,
    *,
    app: str,
    stream: str | Name,
    group: str,
    table_path: str,
    land: Land,
    max_records: int = 0,
    until: Mapping[int, int] | None = None,
) -> dict[str, Any]:
    """One exactly-once offset-range batch of `stream` for `group` into the table at
    `table_path`, whose Delta transactions carry the app id `<app>/<group>`; `until` bounds the
    batch's end per partition (`plan_batch`). `land(records, plan)` returns the batch's
    `BatchWrite`, which must target `table_path`; this runner performs it as batch `plan.batch`.
    Returns the batch's summary (batch number, ranges, recovered positions, Delta version, and
    the write's summary)."""
    from jobs.spark.batch_positions import commit_positions, plan_batch
    from jobs.spark.delta.sink import DeltaBatchSink
    from jobs.spark.logs.streams import read_stream

    name = Name.of(stream)
    if not ctx.logs.exists(name):
        raise StreamcoreError(f"stream {name} does not exist; produce to it first (or check it)")
    sink = DeltaBatchSink(ctx.spark, table_path, f"{app}/{group}")
    with ctx.phases("plan"):
        plan = plan_batch(sink, ctx.logs, name, group, max_records=max_records, until=until)
    summary: dict[str, Any] = {
        "group": group,
        "batch": plan.batch,
        "offsets": {str(p): list(r) for p, r in sorted(plan.ranges.items())},
        "recovered_positions": {str(p): o for p, o in plan.recovered.items()},
        "table_path": table_path,
    }
    if plan.records == 0:
        logger.info("%s: nothing to read for group %s", name, group)
        return {**summary, "read": 0, "delta_version": sink.version()}
    records = read_stream(ctx.spark, ctx.logs, name, plan.ranges)
    try:
        write = land(records, plan)
        if write.action.path != table_path:
            raise StreamcoreError(
                f"{app}'s landing would write to {write.action.path}, not to its batch's table "
                f"{table_path}: an offset batch lands in the table that records its batches"
            )
        with ctx.phases(write.phase):
            version = sink.write(plan, write.action.execute)
        landed = write.finish(version)
    except JobError as exc:  # the failure's summary line names the batch too
        exc.summary = {**summary, **exc.summary}
        raise
    if version is None:
        _check_same_batch(sink, plan)
    ctx.fault_point(f"{app}.after_delta_commit")
    with ctx.phases("commit_positions"):
        commit_positions(ctx.logs, plan)
    if version is None:
        version = sink.version()
    return {**summary, **landed, "delta_version": version}


def _check_same_batch(sink: DeltaBatchSink, plan: BatchPlan) -> None:
    """Delta skipped the write because the table has this batch number already: only possible if
    another run of the same group landed it meanwhile (runs of a group must not overlap). Moving
    the positions is safe only if that run covered exactly this range."""
    landed = sink.last_batch()
    mine = {p: end for p, (_, end) in plan.ranges.items()}
    if landed is None or landed.batch != plan.batch or landed.ends != mine:
        raise StreamcoreError(
            f"batch {plan.batch} of {sink.app_id} was landed by another run with other offsets "
            f"({landed.ends if landed else 'unknown'}, this run read up to {mine}): two runs "
            "of one group overlapped. Nothing was committed by this run; run it again (it "
            "recovers from the other run's batch) and keep one run per group at a time"
        )
