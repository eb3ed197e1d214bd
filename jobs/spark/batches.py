"""Micro-batches of a stream into Delta, as one reusable piece (docs/design.md, "Micro-batches,
exactly-once and intervals").

**Offset-range batches** (`run_offset_batch`): plan (recover a batch that reached Delta but not
the log, then the group's committed positions to the end observed now) → read the ranges as
decoded Records → the job's `land` (transform, checks, one Delta write through the sink) → check
that a skipped write was this very batch → commit the group's positions (and the sink's record of
that commit, `delta_sink.landed_group`). A crash at any point, then a rerun, gives no duplicate
and no loss; an operator's rewind of the group, even to exactly the last batch's starts, is read
from, not taken for a crash. A job supplies only `land`.

Batches over a time interval instead of a group's positions: `jobs.spark.intervals`.
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

    from jobs.spark.delta_sink import BatchPlan, DeltaBatchSink
    from jobs.spark.job import JobContext

__all__ = ["Landed", "run_offset_batch"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Landed:
    """What a job's `land` did: the Delta version it wrote (None if Delta skipped the write
    because this batch number had landed) and the job's own counts for the summary."""

    version: int | None
    summary: dict[str, Any] = field(default_factory=dict)


Land = Callable[["DataFrame", "BatchPlan", "DeltaBatchSink"], Landed]


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
    batch's end per partition (`plan_batch`). Returns the batch's summary (batch number, ranges,
    recovered positions, Delta version, and `land`'s counts)."""
    from jobs.spark.delta_sink import DeltaBatchSink, commit_positions, plan_batch
    from jobs.spark.streams import read_stream

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
        landed = land(records, plan, sink)
    except JobError as exc:  # the failure's summary line names the batch too
        exc.summary = {**summary, **exc.summary}
        raise
    if landed.version is None:
        _check_same_batch(sink, plan)
    ctx.fault_point(f"{app}.after_delta_commit")
    with ctx.phases("commit_positions"):
        commit_positions(ctx.logs, plan)
    version = landed.version if landed.version is not None else sink.version()
    return {**summary, **landed.summary, "delta_version": version}


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
